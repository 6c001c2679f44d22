#!/usr/bin/env bash
# Start PostgreSQL and Redis when they are installed but not running, so `make test`
# works on a fresh machine. Does nothing for a service that is already up.
set -euo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }

if ! pg_up; then
  if command -v pg_lsclusters >/dev/null; then
    pg_lsclusters --no-header | while read -r version cluster _rest; do
      echo "starting PostgreSQL $version/$cluster"
      pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" start || true
    done
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  pg_up || { echo "PostgreSQL is not reachable on 127.0.0.1:5432 and could not be started" >&2; exit 1; }
fi

if ! redis_up; then
  if command -v redis-server >/dev/null; then
    echo "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  fi
  for _ in $(seq 1 20); do redis_up && break; sleep 0.5; done
  redis_up || { echo "Redis is not reachable on 127.0.0.1:6379 and could not be started" >&2; exit 1; }
fi
echo "PostgreSQL and Redis are up"
