"""The agent loop: register, heartbeat, reconcile, and stop everything when cut off.

One tick (every fraction of a second, and at once when something is to report):

1. collect finished worker starts;
2. observe workers (the runtime also kills those whose grace period ran out);
3. heartbeat when due, or soon after a worker started or ended or the watch said the
   desired state changed: report GPUs and workers, take the reply as the
   complete desired state, forget acknowledged exits;
   after a beat, rotate the node token once it is older than ``--token-max-age``;
4. if no heartbeat succeeded for ``disconnect_limit_s``, stop all workers
   (docs/protocol.md section 3: the portal may then run their gangs elsewhere);
5. otherwise converge on the desired state (agents.reconcile).

Everything is idempotent, so a lost reply or an agent restart is harmless.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agents import __version__
from agents.backoff import Backoff
from agents.config import AgentConfig
from agents.gpu import FAKE_UTILIZATION_ENV, GpuBackend, GpuInfo, Workload
from agents.portal import AuthError, PortalClient, PortalError, RejectedError, TransientError
from agents.reconcile import plan_reconcile
from agents.runtimes.base import Runtime, StartFailed
from agents.state import LEASE_FILE, NodeTokenFile, write_lease
from agents.workers import (
    DEFAULT_GRACE_S,
    DEFAULT_STOP_SIGNAL,
    FAILED_TO_START,
    RUNNING,
    STARTING,
    StopOrder,
    WorkerSpec,
    WorkerStatus,
    utc_iso,
)

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3
EXIT_AUTH = 4

MAX_TICK_S = 0.5
# A start, an exit or a changed desired state is reported at once, not at the next beat;
# what happens within this moment (the starts of one reply) rides on the same beat.
COALESCE_S = 0.02
# Acknowledged keys are remembered so a stale "run" entry can never start a
# worker twice; keys of old attempts never come back, so a bounded memory is enough.
FINISHED_MEMORY = 10_000
# After the portal refused a rotation (409: the token is another hostname's), the next try.
ROTATION_REFUSED_RETRY_S = 3600.0
# A rotation that failed (portal away, disk full) is tried again with a backoff up to this:
# nothing is urgent while the old token works, and each try is an audited rotation.
ROTATION_RETRY_CAP_S = 300.0
# A token file's mtime this far ahead of the clock means the clock was wrong when it was written.
FUTURE_SLACK_S = 60.0
# Nodes registered together would rotate together, every node in one beat interval: each
# node rotates up to this fraction of the max age early, by its hostname (rotation_due_at).
ROTATION_SPREAD = 0.1
# A worker key inside a sentence such as "Not this node's worker: 42.0.3".
_KEY_IN_TEXT = re.compile(r"(?<![\d.])\d{1,18}\.\d{1,9}\.\d{1,9}(?![\d.])")


def rejected_worker_keys(error: dict[str, Any]) -> set[str]:
    """Worker keys a 400 names in ``error.fields.workers`` (docs/protocol.md section 2), each
    entry being the key itself or a sentence naming it."""
    fields = error.get("fields")
    entries = fields.get("workers") if isinstance(fields, dict) else None
    if not isinstance(entries, list):
        return set()
    return {
        key for entry in entries if isinstance(entry, str) for key in _KEY_IN_TEXT.findall(entry)
    }


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        gpus: GpuBackend,
        runtime: Runtime,
        portal: PortalClient,
        token_file: NodeTokenFile,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ):
        self._cfg = config
        self._gpus = gpus
        self._runtime = runtime
        self._portal = portal
        self._token_file = token_file
        self._clock = clock
        self._backoff = backoff or Backoff(base_s=1.0, cap_s=10.0)
        self._token = config.node_token or token_file.load()
        # When the token is due for rotation (epoch seconds: the file's mtime + max age);
        # None: never (rotation off, or a token the agent could not save).
        self._rotate_at: float | None = None
        self._next_rotation_try = clock()
        self._rotation_backoff = Backoff(self._backoff.base_s, ROTATION_RETRY_CAP_S)
        self.heartbeat_interval_s = config.heartbeat_interval_s
        self.disconnect_limit_s = config.disconnect_limit_s
        self._stop_requested = threading.Event()
        self._executor = ThreadPoolExecutor(config.max_starts, thread_name_prefix="berth-start")
        self._in_flight: dict[str, Future] = {}
        self._failed: dict[str, WorkerStatus] = {}  # failed starts the runtime keeps no record of
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._disowned: set[str] = set()
        self._desired: dict[str, WorkerSpec] | None = None  # None until the portal has spoken
        self._stop_orders: dict[str, StopOrder] = {}
        self._local: dict[str, WorkerStatus] = {}
        self._gpus_seen: list[GpuInfo] = []
        self._sent_tails: dict[str, int] = {}
        self._warned: set[str] = set()
        self._last_contact = clock()
        self._next_beat = clock()
        self._cut_off = False
        self._backing_off = False
        # Set from any thread when there is something to report now (portal.core.wake).
        self._soon = threading.Event()
        self._runtime.on_exit = lambda key: self._soon.set()
        self._watch: tuple[str, str, int, float] | None = None
        self._watch_fresh = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the loop to end after the current tick (called from signal handlers)."""
        self._stop_requested.set()
        self._soon.set()
        self._watch_fresh.set()

    def run(self) -> int:
        """Run until asked to stop; return the process exit code."""
        try:
            if self._token is None:
                self._token = self._register()
                if self._token is None:
                    return EXIT_OK
            self._last_contact = self._next_beat = self._clock()
            self._schedule_rotation()
            log.info(
                "agent running on %s with the %s runtime", self._cfg.hostname, self._runtime.name
            )
            while not self._stop_requested.is_set():
                self._safe_tick()
                self._rest()
        except AuthError as exc:
            return self._on_auth_error(exc)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._on_exit()
        return EXIT_OK

    def _rest(self) -> None:
        """Wait for the next tick: the usual pause, or a moment once there is news."""
        if self._soon.wait(self._pause()) and not self._stop_requested.is_set():
            self._stop_requested.wait(COALESCE_S)

    def _pause(self) -> float:
        until_beat = max(0.0, self._next_beat - self._clock())
        return min(MAX_TICK_S, self.heartbeat_interval_s / 4, until_beat)

    def _on_auth_error(self, exc: AuthError) -> int:
        if self._token is None:
            log.error(
                "the portal rejected the bootstrap token (unknown, expired or revoked): %s — "
                "ask an admin for a new one",
                exc,
            )
            return EXIT_AUTH
        log.error(
            "the portal rejected this node's token (revoked?): %s — stopping all workers and exiting. "
            "To register again, delete %s and start the agent with a new BERTH_BOOTSTRAP_TOKEN",
            exc,
            self._token_file.path,
        )
        self._stop_all_and_wait("node token rejected")
        return EXIT_AUTH

    def _on_exit(self) -> None:
        if self._cfg.stop_workers_on_exit:
            self._stop_all_and_wait("agent exiting with --stop-workers-on-exit")
            return
        live = sum(1 for status in self._local.values() if status.live)
        log.info("agent stopped; %d live workers keep running for the next agent to re-adopt", live)

    def _stop_all_and_wait(self, reason: str) -> None:
        """Stop every worker and wait until they are gone or their grace (plus a margin) ran out."""
        deadline = self._clock() + DEFAULT_GRACE_S + 10
        while True:
            self._local = self._observe()
            self._stop_all(reason)
            live = [key for key, s in self._local.items() if s.live and key not in self._in_flight]
            if not live or self._clock() > deadline:
                break
            time.sleep(0.1)
        if live:
            log.error("workers still alive after stopping: %s", ", ".join(live))

    # -- registration -------------------------------------------------------

    def _register(self) -> str | None:
        """Register with the bootstrap token until it works; return the node token (None if stopped)."""
        while not self._stop_requested.is_set():
            try:
                reply = self._portal.register(self._registration())
                return self._registered(reply)
            except TransientError as exc:
                delay = self._backoff.next_delay(exc.retry_after)
                log.warning("registration failed: %s; retrying in %.1f s", exc, delay)
            except RejectedError as exc:
                delay = self._backoff.next_delay()
                log.error(
                    "the portal rejected the registration: %s; retrying in %.1f s", exc, delay
                )
            self._stop_requested.wait(delay)
        return None

    def _registration(self) -> dict[str, Any]:
        return {
            "bootstrap_token": self._cfg.bootstrap_token,
            "hostname": self._cfg.hostname,
            "rack": self._cfg.rack,
            "block": self._cfg.block,
            "agent_version": __version__,
            "gpus": self._inventory(),
        }

    def _registered(self, reply: dict[str, Any]) -> str:
        token = reply.get("node_token")
        if not isinstance(token, str) or not token:
            raise TransientError("the registration reply has no node_token")
        self._token_file.save(token)
        self._apply_timing(reply)
        self._backoff.reset()
        log.info(
            "registered as node %s; node token saved to %s",
            reply.get("node_id"),
            self._token_file.path,
        )
        return token

    # -- one tick -----------------------------------------------------------

    def _safe_tick(self) -> None:
        """A bug in one tick is logged, not fatal: the loop must keep heartbeating and stopping."""
        try:
            self.tick()
        except AuthError:
            raise
        except Exception:
            log.exception("unexpected error in the agent loop; carrying on")

    def tick(self) -> None:
        news = self._soon.is_set()
        self._soon.clear()  # first: news from now on wakes the next tick
        self._collect_starts()
        self._local = self._observe()
        beat = self._clock() >= self._next_beat or (news and not self._backing_off)
        if beat:
            self._heartbeat()
        self._check_contact()
        self._converge()
        if beat and self._rotation_due():  # after the reply's starts and stops are in hand
            self._rotate()

    def _observe(self) -> dict[str, WorkerStatus]:
        """Workers as the runtime sees them, plus starts in flight and failed starts it has no record of."""
        try:
            statuses = {status.key: status for status in self._runtime.poll()}
        except Exception:
            log.exception("cannot list workers; using their last known states")
            return dict(self._local)
        for key in self._in_flight:
            statuses[key] = WorkerStatus(key, STARTING)
        for key, status in self._failed.items():
            statuses.setdefault(key, status)
        return statuses

    # -- heartbeat ----------------------------------------------------------

    def _heartbeat(self) -> None:
        workers, tails = self._report()
        payload = {"agent_version": __version__, "gpus": self._inventory(), "workers": workers}
        try:
            reply = self._portal.heartbeat(self._token, payload)
        except TransientError as exc:
            self._retry_later(exc, exc.retry_after)
            return
        except RejectedError as exc:
            self._on_rejected(exc)
            self._retry_later(exc)
            return
        self._on_reply(reply, tails)

    def _inventory(self) -> list[dict[str, Any]]:
        try:
            self._gpus.observe_workload(self._workload())
            self._gpus_seen = self._gpus.inventory()
        except Exception:
            log.exception("cannot read the GPU inventory; reporting the last one")
        return [gpu.to_json() for gpu in self._gpus_seen]

    def _workload(self) -> dict[str, Workload]:
        """GPU UUID -> the running worker that holds it (what the fake backend simulates)."""
        busy = {}
        for key, spec in (self._desired or {}).items():
            status = self._local.get(key)
            if status is None or status.state != RUNNING:
                continue
            pinned = spec.env.get(FAKE_UTILIZATION_ENV, "")
            level = int(pinned) if pinned.strip().isdigit() else None
            for uuid in spec.gpu_uuids:
                busy[uuid] = Workload(spec.job_id, spec.rank, level)
        return busy

    def _report(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Worker entries for the heartbeat. A log tail is sent when it changed since the last
        successful heartbeat, and always for exited workers, whose last lines matter most."""
        entries, tails = [], {}
        for key, status in self._local.items():
            if key in self._disowned:
                continue
            entry = status.to_json()
            tail = self._runtime.log_tail(key) or status.detail
            tails[key] = hash(tail)
            if status.terminal or self._sent_tails.get(key) != tails[key]:
                entry["log_tail"] = tail
            entries.append(entry)
        return entries, tails

    def _retry_later(self, exc: PortalError, retry_after: float | None = None) -> None:
        delay = self._backoff.next_delay(retry_after)
        self._next_beat = self._clock() + delay
        self._backing_off = True
        log.warning("heartbeat failed: %s; retrying in %.1f s", exc, delay)

    def _on_rejected(self, exc: RejectedError) -> None:
        """Log the portal's error. When it names workers that are not this node's, drop them:
        otherwise every later heartbeat would be rejected too, until the disconnect limit."""
        log.error("the portal rejected the heartbeat: %s", exc, extra={"error": exc.error})
        for key in sorted(rejected_worker_keys(exc.error)):
            if key in self._local and key not in self._disowned:
                log.warning(
                    "the portal says worker %s is not this node's: stopping it and no longer reporting it",
                    key,
                )
                self._disowned.add(key)

    def _on_reply(self, reply: dict[str, Any], tails: dict[str, int]) -> None:
        now = self._clock()
        if self._cut_off:
            log.warning("contact with the portal is back after %.0f s", now - self._last_contact)
            self._cut_off = False
        self._last_contact = now
        self._backoff.reset()
        self._backing_off = False
        self._apply_timing(reply)
        self._take_watch(reply.get("watch"))
        self._renew_lease()
        self._desired = self._parse(reply.get("run"), WorkerSpec.from_json, "run")
        self._stop_orders = self._parse(reply.get("stop"), StopOrder.from_json, "stop")
        self._sent_tails = tails
        self._apply_acks(reply.get("ack"))
        self._next_beat = now + self.heartbeat_interval_s

    # -- token rotation (docs/protocol.md section 1, "Rotation") -------------

    def _schedule_rotation(self) -> None:
        """Set when the node token is due for rotation: its file's mtime plus the max age.
        A token from --node-token / BERTH_NODE_TOKEN is never rotated: the agent could not
        save a new one, and a new one it cannot save locks the node out once it restarts."""
        max_age = self._cfg.token_max_age_s
        self._rotate_at = None
        if not max_age:
            return
        if self._cfg.node_token:
            self._warn_once(
                "rotation",
                "the node token comes from --node-token / BERTH_NODE_TOKEN, where the agent "
                "cannot save a new one: it is not rotated (keep it in %s to have it rotated)",
                self._token_file.path,
            )
            return
        saved_at = self._token_file.saved_at()
        if saved_at is None:
            return
        if saved_at > time.time() + FUTURE_SLACK_S:
            # Written while the clock was ahead: its age is unknown. Rotating now writes a
            # file dated right; counting from now at every start would put it off for as
            # long as the agent restarts more often than the max age.
            log.warning("the node token file is dated in the future; rotating it now")
            self._rotate_at = time.time()
            return
        self._rotate_at = rotation_due_at(saved_at, max_age, self._cfg.hostname)

    def _rotation_due(self) -> bool:
        return (
            self._rotate_at is not None
            and not self._backing_off
            and self._clock() >= self._next_rotation_try
            and time.time() >= self._rotate_at
        )

    def _rotate(self) -> None:
        """Trade the node token for a new one, saved (atomically, 0600) before it is used.
        Until the new one is used the portal still accepts the old one, so a lost reply, a
        failed save or an agent dying in between leaves a working token in the file; the
        next try sends the old one again. A 401 raises AuthError (the token-rejected path)."""
        if not self._token_file.writable():
            self._warn_once(
                "rotation-file",
                "cannot write the node token file's directory %s: the token is not rotated",
                self._token_file.path.parent,
            )
            self._rotate_at = None
            return
        if not self._token_file.can_save():
            # Not asked of the portal: a rotation starts the old token's overlap, and a new
            # token that cannot be saved would be lost with the next restart.
            path = self._token_file.path
            self._retry_rotation(f"cannot write beside the node token {path}", "no space?")
            return
        request = {k: v for k, v in self._registration().items() if k != "bootstrap_token"}
        token = None
        try:
            reply = self._portal.rotate(self._token, request)
            token = self._new_token(reply)
            self._token_file.save(token)
        except TransientError as exc:
            self._retry_rotation("the node token rotation failed", exc, exc.retry_after)
            return
        except OSError as exc:
            # The file may hold the new token all the same (renamed, its directory's fsync
            # failed): then the agent uses it, as the next agent would.
            if token is None or self._saved_token() != token:
                path = self._token_file.path
                reason = exc.strerror or exc
                self._retry_rotation(f"cannot save the new node token to {path}", reason)
                return
        except RejectedError as exc:
            self._rotation_refused(exc)
            return
        self._token = token
        self._rotation_backoff.reset()
        self._apply_timing(reply)
        self._schedule_rotation()
        log.info("node token rotated; the new one is saved to %s", self._token_file.path)

    def _saved_token(self) -> str | None:
        try:
            return self._token_file.load()
        except OSError:
            return None

    @staticmethod
    def _new_token(reply: dict[str, Any]) -> str:
        token = reply.get("node_token")
        if not isinstance(token, str) or not token or token != token.strip():
            raise TransientError("the rotation reply has no node_token")
        return token

    def _retry_rotation(self, what: str, reason: Any, retry_after: float | None = None) -> None:
        """Try again with the agent's backoff; the current token stays in use (the portal
        accepts it until the new one is used, for BERTH_NODE_TOKEN_OVERLAP_S at most)."""
        delay = self._rotation_backoff.next_delay(retry_after)
        self._next_rotation_try = self._clock() + delay
        log.warning(
            "%s: %s; keeping the current token, trying again in %.1f s", what, reason, delay
        )

    def _rotation_refused(self, exc: RejectedError) -> None:
        """A 409 (the token is another hostname's: --hostname changed?) or another 4xx: the
        current token stays; trying again at every beat would only repeat the refusal."""
        log.error(
            "the portal refused to rotate the node token: %s; keeping the current token, "
            "trying again in %.0f s",
            exc,
            ROTATION_REFUSED_RETRY_S,
            extra={"error": exc.error},
        )
        self._next_rotation_try = self._clock() + ROTATION_REFUSED_RETRY_S

    # -- watch (docs/protocol.md section 2a) ----------------------------------

    def _take_watch(self, watch: Any) -> None:
        """Remember where to wait for the next change (a portal without a watch sends none:
        the agent then learns changes at its next beat) and start the watcher once."""
        valid = (
            isinstance(watch, dict)
            and isinstance(watch.get("url"), str)
            and isinstance(watch.get("ticket"), str)
            and type(watch.get("version")) is int
        )
        if not valid:
            self._watch = None
            return
        timeout = watch.get("timeout_s")
        ok = isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0
        self._watch = (watch["url"], watch["ticket"], watch["version"], timeout if ok else 25.0)
        self._watch_fresh.set()
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=self._watch_loop, name="berth-watch", daemon=True
            )
            self._watcher.start()

    def _watch_loop(self) -> None:
        """Wait on the watch; when it says the desired state changed, heartbeat now."""
        backoff = Backoff(base_s=1.0, cap_s=30.0)
        while not self._stop_requested.is_set():
            watch = self._watch
            if watch is None:
                self._watch_fresh.clear()
                self._watch_fresh.wait(5.0)
                continue
            url, ticket, since, timeout = watch
            try:
                answer = self._portal.watch(url, ticket, since, timeout)
            except Exception as exc:  # noqa: BLE001 — the beat still carries every change
                delay = backoff.next_delay(getattr(exc, "retry_after", None))
                log.warning("the watch failed: %s; watching again in %.1f s", exc, delay)
                self._stop_requested.wait(delay)
                continue
            backoff.reset()
            if answer.get("changed") is True:
                self._watch_fresh.clear()
                self._soon.set()
                # Watch again from the version the beat this wakes brings back.
                self._watch_fresh.wait(self.heartbeat_interval_s + 1)

    def _renew_lease(self) -> None:
        """Let the process runtime's workers live for another disconnect limit (shim.sh fences
        them when this file goes stale, e.g. because this agent died)."""
        lease = self._cfg.state_dir / LEASE_FILE
        try:
            write_lease(lease, self.disconnect_limit_s)
        except OSError as exc:
            self._warn_once("lease", "cannot renew the worker lease %s: %s", lease, exc)

    def _apply_timing(self, reply: dict[str, Any]) -> None:
        """The portal may change the heartbeat interval and disconnect limit in any reply."""
        for name in ("heartbeat_interval_s", "disconnect_limit_s"):
            value = reply.get(name)
            valid = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            if valid and value != getattr(self, name):
                log.info("portal set %s to %s", name, value)
                setattr(self, name, float(value))

    def _parse(self, entries: Any, parse: Callable[[Any], Any], kind: str) -> dict[str, Any]:
        """Parse ``run`` or ``stop`` entries by key, skipping (and warning once about) malformed ones."""
        parsed = {}
        for entry in entries if isinstance(entries, list) else []:
            try:
                item = parse(entry)
            except ValueError as exc:
                self._warn_once(f"{kind}:{entry!r}", "ignoring malformed %s entry: %s", kind, exc)
                continue
            parsed[item.key] = item
        return parsed

    def _warn_once(self, topic: str, message: str, *args: Any) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            log.warning(message, *args)

    def _apply_acks(self, keys: Any) -> None:
        for key in keys if isinstance(keys, list) else []:
            status = self._local.get(key)
            if status is None:
                continue
            if status.live:
                log.warning(
                    "the portal acknowledged worker %s, which is still %s; keeping it",
                    key,
                    status.state,
                )
                continue
            self._forget(key)

    def _forget(self, key: str) -> None:
        self._runtime.forget(key)
        self._failed.pop(key, None)
        self._disowned.discard(key)
        self._sent_tails.pop(key, None)
        self._local.pop(key, None)
        self._finished[key] = None
        if len(self._finished) > FINISHED_MEMORY:
            self._finished.popitem(last=False)

    # -- converging ---------------------------------------------------------

    def _check_contact(self) -> None:
        silent = self._clock() - self._last_contact
        if not self._cut_off and silent > self.disconnect_limit_s:
            log.error(
                "no successful heartbeat for %.0f s (limit %.0f s): stopping all workers so the "
                "portal can safely run their gangs elsewhere",
                silent,
                self.disconnect_limit_s,
            )
            self._cut_off = True
            self._desired = None
            self._stop_orders = {}

    def _converge(self) -> None:
        if self._cut_off:
            self._stop_all("lost contact with the portal")
            return
        self._drop_disowned()
        if self._desired is None:
            return  # before the first reply nothing is stopped: re-adopted workers wait for the portal
        local = {key: s for key, s in self._local.items() if key not in self._disowned}
        plan = plan_reconcile(
            self._desired,
            self._stop_orders,
            local,
            finished=self._finished,
            max_starts=self._cfg.max_starts,
        )
        for order in plan.stop:
            self._stop(order)
        for spec in plan.start:
            self._start(spec)

    def _drop_disowned(self) -> None:
        for key in list(self._disowned):
            status = self._local.get(key)
            if status is None or status.terminal:
                self._forget(key)
            elif status.state == RUNNING:
                self._stop(StopOrder(key, reason="unknown to the portal"))

    def _stop_all(self, reason: str) -> None:
        for key, status in self._local.items():
            if status.state == RUNNING:
                self._stop(StopOrder(key, DEFAULT_STOP_SIGNAL, DEFAULT_GRACE_S, reason))

    def _stop(self, order: StopOrder) -> None:
        log.info(
            "stopping worker %s with %s, grace %.0f s: %s",
            order.key,
            order.signal.name,
            order.grace_s,
            order.reason or "stop requested",
            extra={"worker": order.key},
        )
        try:
            self._runtime.stop(order.key, order.signal, order.grace_s)
        except Exception:
            log.exception("could not stop worker %s", order.key)

    def _start(self, spec: WorkerSpec) -> None:
        known = {gpu.uuid for gpu in self._gpus_seen}
        missing = [uuid for uuid in spec.gpu_uuids if uuid not in known]
        if missing:
            self._start_failed(
                spec.key, StartFailed(f"GPUs not on this node: {', '.join(missing)}")
            )
            return
        log.info(
            "starting worker %s on %s",
            spec.key,
            ",".join(spec.gpu_uuids) or "no GPUs",
            extra={"worker": spec.key},
        )
        future = self._executor.submit(self._runtime.start, spec)
        future.add_done_callback(lambda _: self._soon.set())  # report the start at once
        self._in_flight[spec.key] = future
        self._local[spec.key] = WorkerStatus(spec.key, STARTING)

    def _collect_starts(self) -> None:
        for key, future in list(self._in_flight.items()):
            if not future.done():
                continue
            del self._in_flight[key]
            exc = future.exception()
            if exc is None:
                log.info("worker %s started", key, extra={"worker": key})
            else:
                self._start_failed(key, exc)

    def _start_failed(self, key: str, exc: BaseException) -> None:
        if isinstance(exc, StartFailed):
            log.error("worker %s failed to start: %s", key, exc, extra={"worker": key})
        else:
            log.error("worker %s failed to start with an unexpected error", key, exc_info=exc)
        self._failed[key] = WorkerStatus(
            key,
            FAILED_TO_START,
            exit_code=getattr(exc, "exit_code", None),
            finished_at=utc_iso(time.time()),
            detail=str(exc),
        )
        self._local[key] = self._failed[key]


def rotation_due_at(saved_at: float, max_age_s: float, hostname: str) -> float:
    """When a node token saved at `saved_at` is rotated: `max_age_s` later, less up to
    ROTATION_SPREAD of it, the same for a hostname every time (a stable hash, not
    Python's salted one), so a cluster registered in one go rotates over days, not in one
    beat interval."""
    digest = hashlib.sha256(hostname.encode()).digest()
    fraction = int.from_bytes(digest[:4], "big") / 2**32
    return saved_at + max_age_s * (1 - ROTATION_SPREAD * fraction)
