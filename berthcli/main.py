"""`berth` command line: parse arguments, run one command, map failures to exit codes."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys

from berthcli import __version__, arrays, commands, config, exitcodes
from berthcli.client import ApiError, Client, Unavailable
from berthcli.config import ConfigError
from berthcli.jobfile import SpecFileError, parse_duration

EPILOG = """exit codes: 0 ok · 1 refused by the server · 2 bad usage or job file ·
3 not logged in / bad token · 4 not found · 5 portal unavailable after retries ·
10 job failed · 11 job cancelled · 12 wait timed out (docs/cli.md)"""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return exitcodes.USAGE
    try:
        return args.func(args, _client_factory(args))
    except ApiError as exc:
        return _refused(args, exc)
    except Unavailable as exc:
        print(f"berth: error: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    except ConfigError as exc:
        print(f"berth: error: {exc}", file=sys.stderr)
        return exitcodes.NOT_AUTHENTICATED
    except (SpecFileError, commands.UsageError) as exc:
        print(f"berth: error: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    except EOFError:
        print("\nberth: error: no input (end of file)", file=sys.stderr)
        return exitcodes.USAGE
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130


def _client_factory(args):
    def client_for(*, url=None, token=None, auth=None) -> Client:
        saved = config.load()
        url = url or args.url or saved.url
        token = token if auth else (token or saved.token)
        if not url or not (token or auth):
            raise ConfigError("not logged in: run `berth login`, or set BERTH_URL and BERTH_TOKEN")
        return Client(
            url,
            token=token,
            auth=auth,
            retries=_env_int("BERTH_RETRIES", 5),
            timeout=float(_env_int("BERTH_TIMEOUT", 30)),
        )

    return client_for


def _refused(args, exc: ApiError) -> int:
    if getattr(args, "json", False) and exc.body is not None:
        print(json.dumps(exc.body, indent=2))
    print("\n".join(refusal_lines(exc)), file=sys.stderr)
    if exc.status == 401 and args.func is not commands.login:
        print("berth: run `berth login` for a new token", file=sys.stderr)
    return commands._code_for(exc)


def refusal_lines(exc: ApiError) -> list[str]:
    """The server's refusal, each message once: the API's message already lists the
    field messages ("Invalid request: workers: …"), so with fields only its head
    is printed, then one line per field."""
    fields = [(f, m) for f, messages in (exc.fields or {}).items() for m in messages]
    head = exc.message
    if fields and all(m in head for _, m in fields):
        head = head.split(": ", 1)[0]
    return [f"berth: error: {head}"] + [f"  {f}: {m}" for f, m in fields if m != head]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


def _seconds(text: str) -> float:
    """`30` (seconds, as timeout(1) reads it), `90s`, `10m`, `1h`, `1:30:00`."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return float(parse_duration(text))
    except SpecFileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# What users of Slurm, kubectl or docker type first, and the command that does it here.
SYNONYMS = {
    "jobs": "queue", "ls": "queue", "list": "queue", "ps": "queue", "squeue": "queue",
    "sbatch": "submit", "srun": "submit", "run": "submit", "create": "submit",
    "scancel": "cancel", "kill": "cancel", "rm": "cancel", "stop": "cancel", "delete": "cancel",
    "show": "status", "info": "status", "describe": "status", "get": "status",
    "scontrol": "status", "sshare": "share", "quota": "share", "log": "logs",
    "explain": "why",
}  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """argparse, with a hint where the command is unknown: `berth jobs` says "Did you
    mean: berth queue?", as a near miss (`berth sumbit`) does."""

    def error(self, message: str):
        unknown = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
        if unknown and (hint := did_you_mean(unknown.group(1), self._commands())):
            message = f"{message}\nDid you mean: berth {hint}?"
        super().error(message)

    def _commands(self) -> list[str]:
        return [
            name
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        ]


def did_you_mean(word: str, commands: list[str]) -> str | None:
    """The command a user most likely meant by `word`, or None."""
    if SYNONYMS.get(word.lower()) in commands:
        return SYNONYMS[word.lower()]
    close = difflib.get_close_matches(word.lower(), commands, n=1, cutoff=0.6)
    return close[0] if close else None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="berth", description="Submit and watch GPU jobs on Berth.", epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"berth {__version__}")
    url_help = "portal URL (default: $BERTH_URL, then the config file)"
    parser.add_argument("--url", help=url_help)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the API's JSON")
    # Before or after the command (`berth login --url …`); SUPPRESS keeps one given before.
    common.add_argument("--url", default=argparse.SUPPRESS, help=url_help)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(name, func, help_text):
        p = sub.add_parser(
            name, parents=[common], help=help_text, description=help_text, epilog=EPILOG
        )
        p.set_defaults(func=func)
        return p

    _account_commands(command)
    _submit_command(command)
    _look_commands(command)
    return parser


def _account_commands(command) -> None:
    p = command("login", commands.login, "get an API token with your password and store it")
    p.add_argument("--username", "-u")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    p.add_argument("--name", help="token name (default berth-cli@HOST)")
    p.add_argument("--expires-days", type=int, default=90, help="0: never (default 90)")
    p.add_argument("--team", action="append", help="limit the token to this team (repeatable)")
    p.add_argument("--sso", action="store_true", help="sign in through the single sign-on provider")
    p.add_argument("--no-browser", action="store_true", help="with --sso: only print the page")
    command("logout", commands.logout, "revoke the stored token and forget it")
    command("whoami", commands.whoami, "who you are, your teams and your token's scope")


def _submit_command(command) -> None:
    p = command("submit", commands.submit, "submit a job (like sbatch); prints its id")
    p.add_argument("-f", "--file", help="job file, YAML or JSON (`-`: stdin); flags override it")
    p.add_argument("--team", "-A", help="team slug (optional if you have one team)")
    p.add_argument("--name", "-J")
    p.add_argument("--queue", "-p")
    p.add_argument("--image", "-i")
    p.add_argument("--workers", "-N", type=int, help="gang size")
    p.add_argument("--gpus-per-worker", "-G", type=int)
    p.add_argument(
        "--flavor", "-F", help="GPU flavor, e.g. h100-80gb; default: the cluster's only flavor"
    )
    p.add_argument("--priority", type=int)
    p.add_argument("--preemptible", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--time", "-t", help="max run time: 90m, 2h, 1d, 1:30:00")
    p.add_argument("--env", "-e", action="append", metavar="NAME=VALUE")
    p.add_argument("--checkpoint-signal")
    p.add_argument("--grace-period", help="between the signal and the kill: 30s, 2m")
    p.add_argument(
        "--dependency",
        "-d",
        metavar="TYPE:JOB[:JOB…][,…]",
        help="wait for jobs of your team (as sbatch): afterok, afternotok, afterany, after, "
        "singleton; e.g. afterok:12:13,singleton",
    )
    p.add_argument("--notify", metavar="URL", help="POST a signed JSON notice to URL on events")
    p.add_argument(
        "--notify-on",
        metavar="EVENTS",
        help="comma-separated: started,preempted,failed,ended (default ended)",
    )
    p.add_argument("--mail", action="store_true", help="e-mail you on those events")
    p.add_argument(
        "--array",
        "-a",
        metavar="SPEC",
        help="a job array, as sbatch: 0-99, 1,3,5-9, 0-99:4, 0-99%%8 (at most 8 at once); "
        "{index} in the name and command, $BERTH_ARRAY_INDEX / $SLURM_ARRAY_TASK_ID in the env",
    )
    p.add_argument("--idempotency-key", help="retries and re-runs with this key submit once")
    p.add_argument("--parsable", action="store_true", help="print only the job id (as sbatch)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the command and its arguments")


def _look_commands(command) -> None:
    ref = {"type": arrays.parse_ref, "metavar": "JOB", "help": "job id, array 12_ or task 12_4"}
    p = command("status", commands.status, "one job (or array) in detail")
    p.add_argument("job", **ref)
    p = command("queue", commands.queue, "jobs in the queues, like squeue")
    p.add_argument("--state", help=f"comma-separated states (default {commands.ACTIVE})")
    p.add_argument("--all", action="store_true", help="every state, finished jobs too")
    p.add_argument("--queue", "-p")
    p.add_argument("--team", "-A")
    p.add_argument("--me", action="store_true", help="only jobs you submitted")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--array", type=int, metavar="ID", help="only the tasks of this job array")
    p.add_argument("--expand", "-r", action="store_true", help="one row per array task (squeue -r)")
    p = command("cancel", commands.cancel, "cancel jobs or arrays (12_), like scancel")
    p.add_argument("jobs", nargs="+", **ref)
    p.add_argument("--reason")
    p = command("why", commands.why, "why a job waits, in plain words, and what would change it")
    p.add_argument("job", **ref)
    p = command("share", commands.share, "quota, usage and fair share per team, like sshare")
    p.add_argument("--team", "-A")
    p = command(
        "wait",
        commands.wait,
        "wait for a job (or all of an array, 12_) to end; the exit code says how",
    )
    p.add_argument("job", **ref)
    p.add_argument("--timeout", type=_seconds, help="give up after this long (exit 12)")
    p.add_argument("--interval", type=_seconds, default=5.0, help="poll every (default 5s)")
    p = command("logs", commands.logs, "the log tail of each worker")
    p.add_argument("job", **ref)
    p.add_argument("--rank", type=int)
    p.add_argument("--attempt", type=int)


if __name__ == "__main__":
    sys.exit(main())
