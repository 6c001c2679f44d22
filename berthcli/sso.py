"""`berth login --sso`: sign in through the portal's identity provider (OAuth 2.0 device
authorization grant, RFC 8628) and store a normal API token, as `berth login` does.

The portal runs the grant with its own client credentials (portal/sso/device.py): this
command asks it to start, shows the provider's page and code (and opens the browser),
and polls until the person has confirmed there.
"""

from __future__ import annotations

import socket
import sys
import webbrowser

from berthcli import config, exitcodes
from berthcli.client import ApiError, Client

SLOW_DOWN_S = 5  # RFC 8628 §3.5: slow_down adds 5 seconds to the interval


def login(args, ask) -> int:
    from berthcli import commands  # its _sleep and _clock, which the tests drive

    url = args.url or config.load().url or ask("Berth URL: ")
    client = Client(url)
    body = {"name": args.name or f"berth-cli@{socket.gethostname()}"[:100]}
    if args.expires_days:
        body["expires_in_days"] = args.expires_days
    if args.team:
        body["teams"] = args.team
    start = client.post("/api/v1/sso/device/", body).body
    page = start.get("verification_uri_complete") or start["verification_uri"]
    print(f"Open {page} and confirm the code {start['user_code']}.", file=sys.stderr)
    if not args.no_browser:
        webbrowser.open(page)
    body["device_code"] = start["device_code"]
    interval, deadline = start["interval"], commands._clock() + start["expires_in"]
    while True:
        commands._sleep(interval)
        try:
            token = client.post("/api/v1/sso/device/token/", body).body
            break
        except ApiError as exc:
            if exc.code not in ("authorization_pending", "slow_down"):
                raise
            interval += SLOW_DOWN_S if exc.code == "slow_down" else 0
        if commands._clock() > deadline:
            print("berth: error: the code expired before it was confirmed", file=sys.stderr)
            return exitcodes.NOT_AUTHENTICATED
    return commands.save_token(args, url, token)
