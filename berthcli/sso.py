"""`berth login --sso`: sign in through the portal's identity provider and store a
normal API token, as `berth login` does.

Where the provider offers it, the OAuth 2.0 device authorization grant (RFC 8628), run
by the portal with its own client credentials (portal/sso/device.py): this command asks
it to start, shows the provider's page and code (and opens the browser), and polls
until the person has confirmed there. Otherwise a loopback redirect (RFC 8252 §7.3;
portal/sso/loopback.py): this command listens on 127.0.0.1, the browser signs in to
the portal and comes back with a one-time code, traded for the token.
"""

from __future__ import annotations

import secrets
import socket
import sys
import time
import webbrowser
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

from berthcli import config, exitcodes
from berthcli.client import ApiError, Client

SLOW_DOWN_S = 5  # RFC 8628 §3.5: slow_down adds 5 seconds to the interval
LOOPBACK_WAIT_S = 300.0


def login(args, ask) -> int:
    from berthcli import commands  # its _sleep and _clock, which the tests drive

    url = args.url or config.load().url or ask("Berth URL: ")
    client = Client(url)
    body = {"name": args.name or f"berth-cli@{socket.gethostname()}"[:100]}
    if args.expires_days:
        body["expires_in_days"] = args.expires_days
    if args.team:
        body["teams"] = args.team
    try:
        start = client.post("/api/v1/sso/device/", body).body
    except ApiError as exc:
        if exc.code != "not_supported":
            raise
        token = _loopback(client, url, body, args)
    else:
        token = _device(client, start, body, args)
    if token is None:
        return exitcodes.NOT_AUTHENTICATED
    return commands.save_token(args, url, token)


def _show(page: str, text: str, args) -> None:
    print(text, file=sys.stderr)
    if not args.no_browser:
        webbrowser.open(page)


def _device(client: Client, start: dict, body: dict, args) -> dict | None:
    """Poll until the person confirmed the code at the provider; the new token."""
    from berthcli import commands  # its _sleep and _clock, which the tests drive

    page = start.get("verification_uri_complete") or start["verification_uri"]
    _show(page, f"Open {page} and confirm the code {start['user_code']}.", args)
    body = body | {"device_code": start["device_code"]}
    interval, deadline = start["interval"], commands._clock() + start["expires_in"]
    while commands._clock() <= deadline:
        commands._sleep(interval)
        try:
            return client.post("/api/v1/sso/device/token/", body).body
        except ApiError as exc:
            if exc.code not in ("authorization_pending", "slow_down"):
                raise
            interval += SLOW_DOWN_S if exc.code == "slow_down" else 0
    print("berth: error: the code expired before it was confirmed", file=sys.stderr)
    return None


def _loopback(client: Client, url: str, body: dict, args) -> dict | None:
    """Wait on 127.0.0.1 for the browser to bring a one-time code; the new token."""
    state = secrets.token_urlsafe(16)
    received: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            query = parse_qs(urlsplit(self.path).query)
            if query.get("state") == [state] and query.get("code"):
                received["code"] = query["code"][0]
            self.send_response(200 if received else 400)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
            done = "berth is logged in; you can close this window."
            self.wfile.write((done if received else "Not a berth login.").encode())

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.timeout = 1.0
    try:
        page = f"{url.rstrip('/')}/sso/cli/?" + urlencode(
            {"port": server.server_port, "state": state}
        )
        _show(page, f"Open {page} to sign in.", args)
        deadline = time.monotonic() + LOOPBACK_WAIT_S
        while "code" not in received and time.monotonic() < deadline:
            server.handle_request()
    finally:
        server.server_close()
    if "code" not in received:
        print("berth: error: no sign-in came back from the browser", file=sys.stderr)
        return None
    return client.post("/api/v1/sso/cli/token/", body | {"code": received["code"]}).body
