"""Gunicorn settings for Berth's web processes (deploy/systemd/berth-web.service, compose.yaml).

Every value can be overridden on the command line or with GUNICORN_CMD_ARGS.
"""

import multiprocessing
import os

# The private address the load balancer / nginx and Prometheus reach this process on.
bind = os.environ.get("BERTH_BIND", "127.0.0.1:8000")
# Threads serve the many short agent heartbeats and API calls while others wait on
# PostgreSQL; one process per core runs the Python (a process uses one core at a
# time). On 2 cores, 2 x 8 kept heartbeats' p99 at 27-48 ms in four runs where
# 5 x 4 gave 25-122 ms (max 1.2 s), at the same submission rate (docs/benchmarks.md).
# Each thread may hold a PostgreSQL connection: workers x threads per web machine.
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", min(max(2, multiprocessing.cpu_count()), 8)))
threads = int(os.environ.get("BERTH_WEB_THREADS", "8"))
# Not preloaded, so `systemctl reload` (SIGHUP) starts workers on the new code, then
# stops the old ones once their requests finish: a web process is upgraded in place.
preload_app = False
timeout = 60
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then so a slow leak cannot grow without bound.
max_requests = 5000
max_requests_jitter = 500
# Only the reverse proxy may say the request came over HTTPS (Django trusts
# X-Forwarded-Proto through SECURE_PROXY_SSL_HEADER; gunicorn through this list).
forwarded_allow_ips = os.environ.get("BERTH_FORWARDED_ALLOW_IPS", "127.0.0.1")
accesslog = "-"
errorlog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms "%(a)s"'
