"""Django's PostgreSQL backend, with a cheaper health check for kept connections.

With CONN_HEALTH_CHECKS Django sends `SELECT 1` before the first query of every
request that reuses a connection: a round trip, and on the API's and the
heartbeat's hot paths about a tenth of what PostgreSQL does for a request.
Between requests a connection is idle, and an idle connection in autocommit
mode receives nothing from the server unless the server is ending it (a
termination notice before a restart or `pg_terminate_backend`, then EOF; a crash
resets the socket). So this check asks the socket instead: nothing to read
means the connection is as it was left; anything to read, or an error, closes
it and the request reconnects, as after a failed `SELECT 1`. A connection left
inside a transaction, or a pooled one, is checked as Django checks it.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def close_if_health_check_failed(self):
        if (
            self.pool
            or self.connection is None
            or not self.health_check_enabled
            or self.health_check_done
        ):
            return super().close_if_health_check_failed()
        if not self.quietly_alive():
            self.close()
        self.health_check_done = True

    def quietly_alive(self) -> bool:
        """True when the idle connection is open and the server has sent nothing."""
        conn = self.connection
        if conn.closed or conn.pgconn.status != pq.ConnStatus.OK:
            return False
        if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            return self.is_usable()  # mid-transaction: only the server can tell
        try:
            readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable
