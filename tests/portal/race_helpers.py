"""For tests of races between writers: a change made by another connection, committed,
between a writer's read and its lock, and a reset node's machine registering again."""

from __future__ import annotations

import threading

from django.db import connection, transaction

from portal.core.models import NodeBootstrapToken
from portal.core.secrets import new_secret
from tests.portal.agent_helpers import inventory


def in_another_connection(fn):
    """Run fn in a thread with its own connection and transaction (committed), giving up
    on a row lock after 1 s; return what it returned, the exception it raised, or
    "timed out"."""
    out = []

    def run():
        try:
            with transaction.atomic():
                if connection.vendor == "postgresql":
                    with connection.cursor() as cursor:
                        cursor.execute("SET LOCAL lock_timeout = '1s'")
                out.append(fn())
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return out[0] if out else "timed out"


def register_again(client, node):
    """The reinstalled machine of a reset node registers with a fresh bootstrap token."""
    secret = new_secret("bbt")
    NodeBootstrapToken.objects.create(prefix=secret.prefix, token_hash=secret.digest)
    body = {
        "bootstrap_token": secret.plaintext,
        "hostname": node.hostname,
        "rack": node.rack,
        "block": node.block,
        "gpus": inventory(node),
    }
    return client.post("/api/agent/v1/register", body, content_type="application/json")
