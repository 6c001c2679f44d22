"""Single submissions that arrive together are stored together (portal/core/actions/store.py):
one statement and one commit for the batch, each request answered only after it, and
every request gets the answer it would have got alone. Real threads, each with its
own database connection (a transactional database: nothing is rolled back under
them); the first batch is held until the others are queued behind it, so that they
are one batch for sure."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import IntegrityError, connection
from django.utils import timezone

from portal.core import statements
from portal.core.actions import jobs, store
from portal.core.jobspec import clean_job_spec
from portal.core.models import Job, JobEvent, Queue
from tests.api.conftest import bearer, error_of, job_body

JOBS = "/api/v1/jobs/"
WAIT = 30  # seconds a step may take at most on a loaded machine; never a measurement


@pytest.fixture
def live(transactional_db, cluster, monkeypatch):
    """The cluster in a database every thread sees, the batcher taking what is queued
    at once (no wait for requests on their way: the tests queue them themselves)."""
    monkeypatch.setattr(store.SUBMISSIONS, "max_wait_s", 0)
    assert not store.SUBMISSIONS._queue and not store.SUBMISSIONS._leading, "left by a test"
    yield cluster
    assert not store.SUBMISSIONS._queue and not store.SUBMISSIONS._leading


class Held:
    """Hold the first batch (the plug) until the requests are queued behind it, record
    every batch's size, and optionally replace the store of the second batch."""

    def __init__(self, monkeypatch, second=None):
        self.real, self.second = store.SUBMISSIONS.flush, second
        self.sizes = []
        self.entered, self.release = threading.Event(), threading.Event()
        monkeypatch.setattr(store.SUBMISSIONS, "flush", self)

    def __call__(self, items):
        self.sizes.append(len(items))
        if len(self.sizes) == 1:
            self.entered.set()
            assert self.release.wait(WAIT)
        elif len(self.sizes) == 2 and self.second is not None:
            return self.second(items)
        return self.real(items)


def in_thread(work, results: list, i: int) -> threading.Thread:
    def run():
        try:
            results[i] = work()
        except BaseException as exc:  # noqa: BLE001 — the test looks at what each got
            results[i] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def one_batch(held: Held, plug, requests) -> list:
    """Send `plug` alone, then `requests` from threads while it is held, so that they
    are queued and stored as one batch; their answers (or exceptions), in order."""
    results = [None] * (len(requests) + 1)
    threads = [in_thread(plug, results, 0)]
    assert held.entered.wait(WAIT)
    threads += [in_thread(r, results, i) for i, r in enumerate(requests, start=1)]
    deadline = time.monotonic() + WAIT
    # every request queued, or answered without being queued
    while len(store.SUBMISSIONS._queue) + sum(r is not None for r in results[1:]) < len(requests):
        assert time.monotonic() < deadline, "the requests never reached the batcher"
        time.sleep(0.002)
    held.release.set()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads), "a request never finished"
    return results


def test_requests_that_arrive_together_are_stored_in_one_batch(live, personas, monkeypatch):
    held = Held(monkeypatch)
    api = bearer(personas.member_a)
    answers = one_batch(
        held,
        lambda: api.post(JOBS, job_body(name="plug")),
        [lambda i=i: api.post(JOBS, job_body(name=f"job-{i}")) for i in range(5)],
    )
    assert [a.status_code for a in answers] == [201] * 6
    assert held.sizes == [1, 5]
    ids = [a.json()["id"] for a in answers]
    assert sorted(Job.objects.values_list("pk", flat=True)) == sorted(ids)
    assert {j.name for j in Job.objects.filter(pk__in=ids[1:])} == {f"job-{i}" for i in range(5)}
    assert JobEvent.objects.filter(job_id__in=ids, kind="submitted").count() == 6


def test_one_key_twice_in_a_batch_stores_one_job(live, personas, monkeypatch):
    """The same request twice with one Idempotency-Key: one 201, one replay of the
    same job; a different body with that key in the same batch: 409."""
    held = Held(monkeypatch)
    api = bearer(personas.member_a)
    same = [lambda: api.post(JOBS, job_body(name="once"), **{"Idempotency-Key": "k-1"})] * 2
    other = [lambda: api.post(JOBS, job_body(name="other"), **{"Idempotency-Key": "k-1"})]
    answers = one_batch(held, lambda: api.post(JOBS, job_body(name="plug")), same + other)
    assert held.sizes[:2] == [1, 3]
    by_body = answers[1:]
    statuses = sorted(a.status_code for a in by_body)
    created = Job.objects.get(idempotency_key="k-1")
    if created.name == "once":  # one of the same two came first
        assert statuses == [200, 201, 409]
        replay = next(a for a in by_body if a.status_code == 200)
        assert replay["Idempotent-Replayed"] == "true" and replay.json()["id"] == created.pk
        error_of(next(a for a in by_body if a.status_code == 409), 409, "idempotency_conflict")
    else:  # the other body came first: both of the same two conflict
        assert statuses == [201, 409, 409]
    assert Job.objects.filter(idempotency_key="k-1").count() == 1


def test_a_batch_fills_the_queue_in_order_and_refuses_the_rest(live, personas, monkeypatch):
    Queue.objects.filter(pk=live.queue_a.pk).update(max_pending_jobs=3)  # the plug + 2
    held = Held(monkeypatch)
    api = bearer(personas.member_a)
    answers = one_batch(
        held,
        lambda: api.post(JOBS, job_body(name="plug")),
        [lambda i=i: api.post(JOBS, job_body(name=f"job-{i}")) for i in range(4)],
    )
    statuses = sorted(a.status_code for a in answers[1:])
    assert statuses == [201, 201, 429, 429]
    for refused in (a for a in answers if a.status_code == 429):
        assert error_of(refused, 429, "queue_full") and int(refused["Retry-After"]) > 0
    assert Job.objects.filter(queue=live.queue_a, state="pending").count() == 3


def test_a_full_batcher_queue_answers_429_busy_with_retry_after(live, personas, monkeypatch):
    monkeypatch.setattr(store.SUBMISSIONS, "max_queue", 2)
    held = Held(monkeypatch)
    api = bearer(personas.member_a)
    answers = one_batch(
        held,
        lambda: api.post(JOBS, job_body(name="plug")),
        [lambda i=i: api.post(JOBS, job_body(name=f"job-{i}")) for i in range(3)],
    )
    statuses = sorted(a.status_code for a in answers[1:])
    assert statuses == [201, 201, 429]
    busy = next(a for a in answers if a.status_code == 429)
    assert error_of(busy, 429, "busy") and busy["Retry-After"] == "1"
    assert Job.objects.count() == 3


def test_a_process_stopped_before_the_commit_answers_no_201_and_stores_nothing(
    live, personas, monkeypatch
):
    """The leader is stopped (SystemExit, as when gunicorn stops a worker) before the
    batch's statement commits: nobody in that batch gets a 201, nothing is stored."""

    plug_answered = threading.Event()

    def stopped(items):
        # Django's test client re-raises an exception of any thread's request in every
        # request in flight (a global signal): let the plug's answer be out first.
        assert plug_answered.wait(WAIT)
        raise SystemExit(1)

    def plug():
        try:
            return api.post(JOBS, job_body(name="plug"))
        finally:
            plug_answered.set()

    held = Held(monkeypatch, second=stopped)
    api = bearer(personas.member_a)
    answers = one_batch(
        held,
        plug,
        [lambda i=i: api.post(JOBS, job_body(name=f"job-{i}")) for i in range(3)],
    )
    assert answers[0].status_code == 201
    # no answer (the leader's thread stops), or an error: never a 2xx
    assert all(getattr(a, "status_code", 500) >= 500 for a in answers[1:]), answers
    assert list(Job.objects.values_list("name", flat=True)) == ["plug"]


def test_a_row_that_breaks_a_constraint_fails_alone(live, personas, monkeypatch):
    """A batch whose statement fails (one job's queue is gone: a foreign key checked
    at the commit) is stored again job by job: only that one fails."""
    team, user = live.team_a, personas.member_a
    spec = clean_job_spec(team, job_body(name="ok"))
    gone = Queue(pk=10**9, team=team, name="gone", max_pending_jobs=10)

    def storing(name, queue):
        now = timezone.now()
        row = jobs._job_fields(team, spec, user, None, "", now) | {"name": name, "queue": queue}
        job = Job(**row)
        event = jobs._submitted_event_fields(team, spec, user, now)
        return store.Storing(
            statements.NewJob(row, event), lambda: jobs._insert_with_orm(job, user, spec)
        )

    held = Held(monkeypatch)
    items = [storing("a", spec.queue), storing("bad", gone), storing("b", spec.queue)]
    answers = one_batch(
        held,
        lambda: store.store_job(storing("plug", spec.queue)),
        [lambda item=item: store.store_job(item) for item in items],
    )
    assert held.sizes[:2] == [1, 3]
    if connection.vendor == "postgresql":
        assert isinstance(answers[2], IntegrityError)
    else:  # the ORM insert answers "not stored" for any IntegrityError, as it did alone
        assert answers[2] is None
    assert all(isinstance(a, int) for a in (answers[0], answers[1], answers[3]))
    assert sorted(Job.objects.values_list("name", flat=True)) == ["a", "b", "plug"]
