"""Real identity providers for the SSO tests, each started once per test session:
oidc-provider (npm, run by node; tests/sso/oidc_provider.mjs) and slapd (Debian).

Each binds 127.0.0.1 on a free port and runs in a temporary folder; a test changes a
person's groups by rewriting the provider's data (`OidcProvider.set_groups`,
`Slapd.set_members`), which the provider reads at the next sign-in.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urljoin, urlparse

import requests

ROOT = Path(__file__).resolve().parents[2]


class Unavailable(Exception):
    """The provider's program is not installed (the test is skipped, naming it)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(check, what: str, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            if check():
                return
        except (OSError, requests.RequestException):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


class OidcProvider:
    """node tests/sso/oidc_provider.mjs on a free port; clients berth, berth-short, berth-other."""

    def __init__(self, folder: Path):
        script = ROOT / "tests" / "sso" / "oidc_provider.mjs"
        if not shutil.which("node") or not (ROOT / "node_modules" / "oidc-provider").is_dir():
            raise Unavailable("node or node_modules/oidc-provider (run scripts/ensure-sso.sh)")
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.accounts_file = folder / "accounts.json"
        self.accounts: dict[str, dict] = {}
        self._write()
        self.log = open(folder / "oidc-provider.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            ["node", str(script), str(self.port), str(self.accounts_file)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        discovery = f"{self.issuer}/.well-known/openid-configuration"
        _wait(lambda: requests.get(discovery, timeout=1).ok, "oidc-provider", self.process)

    def set_groups(self, login: str, groups: list[str]) -> None:
        self.accounts[login] = {"groups": list(groups)}
        self._write()

    def remove(self, login: str) -> None:
        self.accounts.pop(login, None)
        self._write()

    def _write(self) -> None:
        self.accounts_file.write_text(json.dumps(self.accounts))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.log.close()


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_HIDDEN = re.compile(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', re.S)


def through_provider(url: str, login: str, session: requests.Session | None = None) -> str:
    """Walk the provider's own pages from an authorization (or device) URL as a person
    would: submit each form (the login form with any password, consent, the device
    code's confirmation). Return the redirect back to the portal (a URL outside the
    provider), or the last page's URL when the provider shows a success page."""
    session = session or requests.Session()
    provider = urlparse(url).netloc
    response = session.get(url, allow_redirects=False, timeout=10)
    for _ in range(20):
        if response.is_redirect:
            url = urljoin(url, response.headers["Location"])
            if urlparse(url).netloc != provider:
                return url
            response = session.get(url, allow_redirects=False, timeout=10)
            continue
        form = _FORM.search(response.text)
        if form is None and "Sign-in Success" in response.text:
            return url  # the device flow's last page: nothing to go back to
        if form is None:
            raise AssertionError(f"no form on the provider's page {url}: {response.text[:300]}")
        fields = {name: html.unescape(value) for name, value in _HIDDEN.findall(form.group(2))}
        if 'name="login"' in form.group(2):
            fields |= {"login": login, "password": "any"}
        url = urljoin(url, html.unescape(form.group(1)))
        response = session.post(url, data=fields, allow_redirects=False, timeout=10)
    raise AssertionError("the provider never sent the browser back")


SUFFIX = "dc=berth,dc=test"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PW = "slapd-root-secret"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
_SLAPD_CONF = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {folder}/slapd.pid
database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "{root_dn}"
rootpw {root_pw}
directory {folder}/data
access to attrs=userPassword by anonymous auth by * none
access to * by * read
"""


class Slapd:
    """Debian's slapd on a free port with a small directory: people under ou=people
    (password `<uid>-password`), groupOfNames groups under ou=groups."""

    def __init__(self, folder: Path):
        binary = shutil.which("slapd") or "/usr/sbin/slapd"
        if not Path(binary).exists() or not Path("/etc/ldap/schema/nis.schema").exists():
            raise Unavailable("slapd (run scripts/ensure-sso.sh)")
        (folder / "data").mkdir()
        conf = folder / "slapd.conf"
        conf.write_text(
            _SLAPD_CONF.format(folder=folder, suffix=SUFFIX, root_dn=ROOT_DN, root_pw=ROOT_PW)
        )
        self.port = free_port()
        self.uri = f"ldap://127.0.0.1:{self.port}"
        self.log = open(folder / "slapd.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [binary, "-f", str(conf), "-h", f"{self.uri}/", "-d", "0"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        _wait(self._bound, "slapd", self.process)
        self._add(SUFFIX, objectClass=["dcObject", "organization"], dc="berth", o="Berth test")
        self._add(PEOPLE, objectClass=["organizationalUnit"], ou="people")
        self._add(GROUPS, objectClass=["organizationalUnit"], ou="groups")

    def _bound(self) -> bool:
        import ldap

        self.conn = ldap.initialize(self.uri)
        self.conn.simple_bind_s(ROOT_DN, ROOT_PW)
        return True

    def _add(self, dn: str, **attrs) -> None:
        from ldap import modlist

        values = {k: [v.encode() for v in (vs if isinstance(vs, list) else [vs])]
                  for k, vs in attrs.items()}  # fmt: skip
        self.conn.add_s(dn, modlist.addModlist(values))

    def add_person(self, uid: str) -> str:
        dn = f"uid={uid},{PEOPLE}"
        self._add(dn, objectClass=["inetOrgPerson"], uid=uid, cn=uid, sn=uid,
                  mail=f"{uid}@example.com", userPassword=f"{uid}-password")  # fmt: skip
        return dn

    def remove_person(self, uid: str) -> None:
        self.conn.delete_s(f"uid={uid},{PEOPLE}")

    def set_members(self, group: str, uids: list[str]) -> None:
        """The group's members, replaced (groupOfNames needs one: the root DN stands in)."""
        import ldap

        dn = f"cn={group},{GROUPS}"
        members = [f"uid={uid},{PEOPLE}".encode() for uid in uids] or [ROOT_DN.encode()]
        try:
            self.conn.modify_s(dn, [(ldap.MOD_REPLACE, "member", members)])
        except ldap.NO_SUCH_OBJECT:
            self._add(dn, objectClass=["groupOfNames"], cn=group,
                      member=[m.decode() for m in members])  # fmt: skip

    def stop(self) -> None:
        self.conn.unbind_s()
        self.process.terminate()
        self.process.wait(10)
        self.log.close()
