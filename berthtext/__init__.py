"""Text that the portal's pages and the `berth` CLI both show people, written once.

Neither may import the other (docs/architecture.md): the CLI talks to the
portal over HTTP only, and the portal must not depend on its client. What both
must say alike lives here, on the standard library only:

- `ISO_INSTANT`: how a reason writes an instant (scheduler.timewords.instant);
  the dashboard's `with_times` filter and `berth` find them with it.
- `command_line`: a job's argv as a shell line (the job page, `berth status`).
"""

from __future__ import annotations

import re
import shlex

__all__ = ["ISO_INSTANT", "command_line"]

# How the portal writes an instant in a sentence (scheduler.timewords.instant).
ISO_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_")
# Escaped by a backslash inside double quotes, by a POSIX shell and by shlex alike.
_IN_DOUBLE_QUOTES = re.compile(r'(["\\])')
# Expanded by a shell inside double quotes ($, `; ! in an interactive bash): such an
# argument stays single-quoted.
_EXPANDED = frozenset("$`!")


def command_line(argv: list[str] | str) -> str:
    """Return the argv as a shell line a person would type: `python -c "print('hi')"`.

    The one quoting of a job's command for people: `berth status` and the dashboard's
    job page. shlex.join quotes an argument holding a single quote as '"'"'; such an
    argument is double-quoted here instead, escaping only what a shell expands
    there. The line parses back to the same argv, by the submit form (shlex) and
    by a shell.
    """
    if isinstance(argv, str):
        return argv
    return " ".join(_quote(arg) for arg in argv)


def _quote(arg: str) -> str:
    if arg and all(c in _SHELL_SAFE for c in arg):
        return arg
    if "'" not in arg:
        return f"'{arg}'"
    if _EXPANDED.intersection(arg):
        return shlex.quote(arg)
    return '"' + _IN_DOUBLE_QUOTES.sub(r"\\\1", arg) + '"'
