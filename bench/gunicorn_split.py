"""A gunicorn config (`-c bench/gunicorn_split.py`, bench_api.py --split) that counts
where a gthread worker's CPU goes, per request, without a profiler: each request
thread's CPU clock (time.thread_time) around gunicorn's `handle` (read and parse
the request, call the application, write the response), around the WSGI call
(Django: middleware, view, the response built) and around the response's close
(Django's request_finished); the rest of the process's CPU is the main thread's
event loop (accept, poll, hand connections to the thread pool and back) and the
process's other threads. Each worker prints its split when it exits.
"""

from __future__ import annotations

import os
import sys
import threading
import time

if os.environ.get("BENCH_WITH_DEPLOY_CONFIG"):  # bench_api.py --split --deploy-config
    _deploy = os.path.join(os.path.dirname(__file__), "..", "deploy", "gunicorn.conf.py")
    with open(_deploy) as _file:
        exec(compile(_file.read(), _deploy, "exec"))  # noqa: S102 — gunicorn takes one -c

_acc = {"handle": 0.0, "app": 0.0, "close": 0.0, "requests": 0}
_lock = threading.Lock()
_start: list[float] = []


def _add(what: str, seconds: float) -> None:
    with _lock:
        _acc[what] += seconds


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def post_worker_init(worker):
    from gunicorn.workers import gthread

    handle = gthread.ThreadWorker.handle

    def timed_handle(self, conn):
        start = time.thread_time()
        try:
            return handle(self, conn)
        finally:
            _add("handle", time.thread_time() - start)

    gthread.ThreadWorker.handle = timed_handle
    app = worker.wsgi

    def timed_app(environ, start_response):
        start = time.thread_time()
        response = app(environ, start_response)
        _add("app", time.thread_time() - start)
        with _lock:
            _acc["requests"] += 1
        close = response.close

        def timed_close():
            begin = time.thread_time()
            try:
                close()
            finally:
                _add("close", time.thread_time() - begin)

        response.close = timed_close
        return response

    worker.wsgi = timed_app
    _start.append(_cpu())


def worker_exit(server, worker):
    n = max(1, _acc["requests"])
    total = _cpu() - _start[0] if _start else 0.0
    handle, app, close = _acc["handle"], _acc["app"], _acc["close"]
    ms = lambda s: f"{s / n * 1000:.3f}"  # noqa: E731
    print(
        f"split of process {os.getpid()}: {_acc['requests']} requests; per request: "
        f"process {ms(total)} ms = request threads {ms(handle)} (gunicorn {ms(handle - app - close)}, "
        f"application {ms(app)}, response close {ms(close)}) + main thread and others "
        f"{ms(total - handle)}",
        file=sys.stderr,
        flush=True,
    )
