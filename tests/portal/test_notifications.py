"""Notifications (issue 17): state changes become outbox rows in their own transaction;
the sender POSTs them signed to a real local HTTP receiver, retries with backoff,
gives up after its limit, and refuses private targets unless allowed."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from datetime import timedelta

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from portal.core import outbound
from portal.core.actions.jobs import cancel_job, transition
from portal.core.actions.notifications import (
    backoff,
    create_webhook,
    deliver,
    due_deliveries,
    notify_team,
    redeliver,
    rotate_webhook_secret,
    team_secret,
)
from portal.core.jobspec import SpecError
from portal.core.models import AuditEntry, Delivery, Job
from tests.api.conftest import run_on, submit
from tests.receiver import start_receiver

State = Job.State


def verify(secret: str, headers, body: bytes, tolerance: int = 300) -> bool:
    """The receiver's check, as docs/api.md "Verifying a delivery" gives it."""
    timestamp = headers["Berth-Timestamp"]
    if abs(time.time() - int(timestamp)) > tolerance:
        return False  # too old, or from the future: a replay
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(f"v1={mac.hexdigest()}", headers["Berth-Signature"])


@pytest.fixture
def receiver():
    receiver, stop = start_receiver()
    yield receiver
    stop()


@pytest.fixture
def local_targets(settings):
    """The tests' receiver listens on 127.0.0.1: allow private targets, as `make run` does."""
    settings.BERTH = settings.BERTH | {
        "NOTIFY_ALLOW_PRIVATE": True,
        "NOTIFY_TIMEOUT_S": 1.0,
        "NOTIFY_BACKOFF_BASE_S": 10.0,
        "NOTIFY_BACKOFF_MAX_S": 60.0,
        "NOTIFY_MAX_ATTEMPTS": 3,
    }


def fail(job: Job) -> None:
    with transaction.atomic():
        transition(
            [job.pk],
            from_states=Job.RUNNING_STATES,
            to_state=State.FAILED,
            kind="failed",
            message="Worker rank 0 exited with code 3; the gang is stopped.",
            exit_code=3,
            reason="Worker rank 0 exited with code 3.",
        )


def test_a_failed_job_posts_a_signed_body_the_receiver_can_verify(
    cluster, personas, receiver, local_targets
):
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url, "on": ["failed"]})
    run_on(job, *cluster.nodes[:1])
    assert not Delivery.objects.exists()  # `started` was not chosen
    fail(job)

    (delivery,) = Delivery.objects.all()
    assert (delivery.event, delivery.state, delivery.job_id) == ("failed", "pending", job.pk)
    assert deliver([delivery.pk]) == {}

    (got,) = receiver.received
    assert got.path == "/hooks/berth"
    assert verify(team_secret(cluster.team_a), got.headers, got.body)
    assert not verify("whsec_another-teams-secret", got.headers, got.body)
    assert got.headers["Berth-Event"] == "failed"
    assert got.headers["Berth-Delivery"] == str(delivery.pk)
    assert got.headers["Content-Type"] == "application/json"
    body = json.loads(got.body)
    assert body["delivery"] == delivery.pk
    assert (body["event"], body["events"], body["team"]) == ("failed", ["failed", "ended"], "alpha")
    assert body["job"] | {} == body["job"] and body["job"]["id"] == job.pk
    assert (body["job"]["state"], body["job"]["previous_state"]) == ("failed", "running")
    assert body["job"]["exit_code"] == 3 and body["job"]["submitted_by"] == "member_a"
    assert body["message"].startswith("Worker rank 0 exited with code 3")
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert delivery.delivered_at is not None and delivery.last_error == ""


def test_a_tampered_or_replayed_body_fails_verification(cluster, personas, receiver, local_targets):
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    cancel_job(job, actor=personas.member_a)
    deliver(Delivery.objects.values_list("pk", flat=True))
    (got,) = receiver.received
    secret = team_secret(cluster.team_a)
    assert json.loads(got.body)["event"] == "ended"
    assert verify(secret, got.headers, got.body)
    assert not verify(secret, got.headers, got.body.replace(b"cancelled", b"succeeded"))
    old = got.headers | {"Berth-Timestamp": str(int(got.headers["Berth-Timestamp"]) - 3600)}
    assert not verify(secret, old, got.body)  # a new timestamp would need a new signature


def test_a_failing_endpoint_is_retried_with_backoff_until_it_answers(
    cluster, personas, receiver, local_targets
):
    receiver.answer(500, 503)
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url, "on": ["ended"]})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    now = timezone.now()

    assert deliver([delivery.pk], now=now) == {delivery.pk: 10.0}
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("pending", 1, 500)
    assert delivery.last_error == "HTTP 500: receiver says no"
    assert delivery.next_attempt_at == now + timedelta(seconds=10)
    assert deliver([delivery.pk], now=now + timedelta(seconds=5)) == {}  # not due yet
    assert len(receiver.received) == 1

    assert deliver([delivery.pk], now=now + timedelta(seconds=10)) == {delivery.pk: 20.0}
    assert deliver([delivery.pk], now=now + timedelta(seconds=30)) == {}
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 3, 200)
    assert len(receiver.received) == 3
    assert len({r.headers["Berth-Delivery"] for r in receiver.received}) == 1  # one id to dedupe


def test_the_sender_gives_up_after_its_attempts(cluster, personas, receiver, local_targets):
    receiver.answer(500, 500, 500, 500)
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    later = timezone.now()
    for _ in range(3):
        deliver([delivery.pk], now=later)
        later += timedelta(hours=1)
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.next_attempt_at) == ("failed", 3, None)
    assert deliver([delivery.pk], now=later) == {} and len(receiver.received) == 3


def test_a_slow_endpoint_costs_one_timeout_and_is_retried(
    cluster, personas, receiver, local_targets, settings
):
    settings.BERTH = settings.BERTH | {"NOTIFY_TIMEOUT_S": 0.3}
    receiver.answer(200, delay=2.0)
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    started = time.monotonic()
    assert deliver([delivery.pk]) == {delivery.pk: 10.0}
    assert time.monotonic() - started < 1.5
    delivery.refresh_from_db()
    assert delivery.state == "pending" and "timed out" in delivery.last_error


def test_a_410_gone_is_not_retried(cluster, personas, receiver, local_targets):
    receiver.answer(410)
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    assert deliver([delivery.pk]) == {}
    delivery.refresh_from_db()
    assert (delivery.state, delivery.last_status_code) == ("failed", 410)


def test_deliveries_are_written_in_the_state_changes_transaction(cluster, personas):
    job = submit(cluster.team_a, personas.member_a, notify={"url": "https://hooks.example.com/x"})
    with pytest.raises(RuntimeError), transaction.atomic():
        cancel_job(job, actor=personas.lead_a)
        assert Delivery.objects.count() == 1
        raise RuntimeError("the transaction rolls back")
    job.refresh_from_db()
    assert job.state == State.PENDING and not Delivery.objects.exists()


def test_the_sweep_finds_what_is_due_and_not_held(cluster, personas):
    job = submit(cluster.team_a, personas.member_a, notify={"url": "https://hooks.example.com/x"})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    now = timezone.now()
    assert due_deliveries(now) == [delivery.pk]  # e.g. the broker was down at commit
    Delivery.objects.update(claimed_until=now + timedelta(seconds=30))  # a sender holds it
    assert due_deliveries(now) == []
    assert due_deliveries(now + timedelta(seconds=31)) == [delivery.pk]  # that sender died
    Delivery.objects.update(state="delivered", claimed_until=None)
    assert due_deliveries(now) == []


def test_team_webhooks_get_the_events_they_chose(cluster, personas, receiver, local_targets):
    failures = create_webhook(
        cluster.team_a, url=receiver.url, events=["failed"], acting_user=personas.lead_a
    )
    every = create_webhook(
        cluster.team_a,
        url=receiver.url + "?all",
        events=["started", "ended"],
        acting_user=personas.lead_a,
    )
    create_webhook(
        cluster.team_b, url=receiver.url + "?b", events=["failed"], acting_user=personas.lead_b
    )
    job = submit(cluster.team_a, personas.member_a)
    run_on(job, *cluster.nodes[:1])
    fail(job)

    rows = sorted(Delivery.objects.values_list("event", "target", "webhook_id"))
    assert rows == [
        ("ended", receiver.url + "?all", every.pk),
        ("failed", receiver.url, failures.pk),
        ("started", receiver.url + "?all", every.pk),
    ]
    assert AuditEntry.objects.filter(target_type="teamwebhook", action="create").count() == 3
    deliver(Delivery.objects.values_list("pk", flat=True))
    assert sorted(r.headers["Berth-Event"] for r in receiver.received) == [
        "ended",
        "failed",
        "started",
    ]


def test_notify_team_reaches_webhooks_that_take_team_events(
    cluster, personas, receiver, local_targets
):
    create_webhook(cluster.team_a, url=receiver.url, events=[], acting_user=personas.lead_a)
    create_webhook(
        cluster.team_a,
        url=receiver.url + "?jobs-only",
        events=["failed"],
        team_events=False,
        acting_user=personas.lead_a,
    )
    with transaction.atomic():
        ids = notify_team(
            cluster.team_a, "budget.soft_threshold", {"flavor": "h100-80gb", "used": 4100}
        )
    assert len(ids) == 1
    deliver(ids)
    (got,) = receiver.received
    assert got.path == "/hooks/berth" and verify(team_secret(cluster.team_a), got.headers, got.body)
    body = json.loads(got.body)
    assert (body["event"], body["team"], body["data"]["used"]) == (
        "budget.soft_threshold",
        "alpha",
        4100,
    )


def test_a_rotated_secret_signs_from_then_on(cluster, personas, receiver, local_targets):
    before = team_secret(cluster.team_a)
    assert before.startswith("whsec_") and team_secret(cluster.team_a) == before
    after = rotate_webhook_secret(cluster.team_a, acting_user=personas.lead_a)
    assert after != before and team_secret(cluster.team_a) == after
    assert AuditEntry.objects.filter(action="rotate_webhook_secret", actor=personas.lead_a).exists()
    with transaction.atomic():
        create_webhook(cluster.team_a, url=receiver.url, events=[], acting_user=personas.lead_a)
        deliver(notify_team(cluster.team_a, "test", {}))
    assert verify(after, receiver.received[0].headers, receiver.received[0].body)


def test_a_lead_redelivers_a_failed_delivery(cluster, personas, receiver, local_targets):
    receiver.answer(410)
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    cancel_job(job, actor=personas.lead_a)
    (first,) = Delivery.objects.all()
    deliver([first.pk])
    copy = redeliver(Delivery.objects.get(pk=first.pk), acting_user=personas.lead_a)
    assert deliver([copy.pk]) == {}
    copy.refresh_from_db()
    assert copy.state == "delivered" and copy.payload == first.payload
    assert [json.loads(r.body)["job"]["id"] for r in receiver.received] == [job.pk, job.pk]


def test_the_submitter_gets_an_email_when_asked(cluster, personas):
    job = submit(cluster.team_a, personas.member_a, notify={"email": True, "on": ["failed"]})
    run_on(job, *cluster.nodes[:1])
    fail(job)
    (delivery,) = Delivery.objects.all()
    assert (delivery.channel, delivery.target) == ("email", "member_a@example.com")
    assert deliver([delivery.pk]) == {}
    (message,) = mail.outbox
    assert message.to == ["member_a@example.com"]
    assert message.subject == f"[Berth] job {job.pk} train-llm: failed"
    assert "exited with code 3" in message.body


def test_jobs_without_notify_in_teams_without_webhooks_cost_nothing(
    cluster, personas, django_assert_num_queries
):
    job = submit(cluster.team_a, personas.member_a)
    # lock, update, event, the one subscription query, and the one query for held
    # dependents (actions/dependencies: a job that ends may release or cancel some)
    with django_assert_num_queries(5):
        transition(
            [job.pk], from_states=[State.PENDING], to_state=State.CANCELLED, kind="cancelled"
        )
    assert not Delivery.objects.exists()


# --- the URL rules (docs/security.md "Outbound webhooks") -----------------------------


@pytest.mark.parametrize(
    "url, refused",
    [
        ("https://hooks.example.com/berth", None),
        ("http://203.0.113.7:8080/x", "reserved"),  # TEST-NET-3 is not global
        ("http://8.8.8.8/hook", None),
        ("ftp://hooks.example.com/", "Only http"),
        ("file:///etc/passwd", "Only http"),
        ("javascript:alert(1)", "Only http"),
        ("https://user:pw@hooks.example.com/", "No user name"),
        ("https:///nohost", "no host"),
        ("http://10.1.2.3/", "private"),
        ("http://192.168.0.1/", "private"),
        ("http://127.0.0.1:8000/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "127.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://100.64.0.1/", "private"),
        ("http://0.0.0.0/", "private"),
        ("http://224.0.0.1/", "private"),
        ("http://localhost:8000/", "localhost"),
        ("http://api.localhost/", "localhost"),
        ("http://hooks.example.com:99999/", "Not a URL"),
        ("https://hooks.example.com/a b", "no spaces"),
        ("http://[fe80::1%25eth0]/", "link-local"),
    ],
)
def test_url_rules(url, refused):
    problem = outbound.url_problem(url, allow_private=False)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused.lower() in problem.lower(), problem


def test_private_addresses_pass_only_when_allowed():
    assert outbound.url_problem("http://127.0.0.1:9/", allow_private=True) is None
    assert "Only http" in outbound.url_problem("gopher://127.0.0.1/", allow_private=True)


def test_a_name_that_resolves_to_a_private_address_is_refused_and_not_retried(
    cluster, personas, receiver, monkeypatch, settings
):
    """DNS is the network edge: a public-looking name whose answer is loopback."""
    port = int(receiver.url.split(":")[2].split("/")[0])
    answers = fake_dns(monkeypatch, {"hooks.example.com": "127.0.0.1"})
    job = submit(
        cluster.team_a, personas.member_a, notify={"url": f"http://hooks.example.com:{port}/x"}
    )
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    assert deliver([delivery.pk]) == {}
    delivery.refresh_from_db()
    assert delivery.state == "failed" and "resolves to 127.0.0.1" in delivery.last_error
    assert receiver.received == [] and answers == ["hooks.example.com"]


def test_the_connection_goes_to_the_address_that_was_checked(
    cluster, personas, receiver, monkeypatch, local_targets
):
    """Resolve once and pin: the name is looked up once, the socket goes to that address,
    and the name travels in the Host header (a second, rebound answer is never asked for)."""
    port = int(receiver.url.split(":")[2].split("/")[0])
    answers = fake_dns(monkeypatch, {"hooks.example.com": "127.0.0.1"})
    job = submit(
        cluster.team_a, personas.member_a, notify={"url": f"http://hooks.example.com:{port}/x"}
    )
    cancel_job(job, actor=personas.lead_a)
    deliver(Delivery.objects.values_list("pk", flat=True))
    (got,) = receiver.received
    assert got.headers["Host"] == f"hooks.example.com:{port}"
    assert answers == ["hooks.example.com"]


def fake_dns(monkeypatch, names: dict[str, str]) -> list[str]:
    asked = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in names:
            asked.append(host)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (names[host], port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_a_webhook_with_a_refused_url_or_unknown_event_is_not_created(cluster, personas):
    with pytest.raises(SpecError) as exc:
        create_webhook(
            cluster.team_a,
            url="http://169.254.169.254/",
            events=["finished"],
            acting_user=personas.lead_a,
        )
    assert set(exc.value.fields) == {"url", "events"}
    assert "link-local" in exc.value.fields["url"][0]
    assert "finished" in exc.value.fields["events"][0]


def test_backoff_doubles_up_to_its_cap(local_targets):
    assert [backoff(n) for n in (1, 2, 3, 4, 5)] == [10.0, 20.0, 40.0, 60.0, 60.0]


def test_the_pass_and_the_agents_state_changes_are_notified(client, cluster, personas):
    """Through the real writers: the pass admits (no event), the agent reports the gang
    running (`started`), the pass preempts (`preempted`), the agent's exit requeues it
    (no event), a cancel ends it (`ended`)."""
    from portal.core.scheduling import run_pass
    from tests.portal.test_requeue_backoff import preempt_and_stop
    from tests.portal.test_scheduling_pass import submit as submit_to_pass

    job = submit_to_pass(
        cluster,
        personas.lead_a,
        workers=1,
        gpus_per_worker=8,
        notify={"url": "https://hooks.example.com/x", "on": ["started", "preempted", "ended"]},
    )
    run_pass()
    job.refresh_from_db()
    assert job.state == State.ADMITTED and not Delivery.objects.exists()
    preempt_and_stop(client, cluster, job)  # reports it running first, then stopped
    assert job.state == State.PENDING
    cancel_job(job, actor=personas.lead_a)
    assert list(Delivery.objects.order_by("pk").values_list("event", flat=True)) == [
        "started",
        "preempted",
        "ended",
    ]


def test_the_task_sent_by_name_attempts_and_queues_its_retry(
    cluster, personas, receiver, local_targets
):
    from portal.celery import app
    from portal.core import tasks
    from portal.core.actions.notifications import DELIVER_TASK

    assert app.tasks[DELIVER_TASK].name == tasks.deliver_notifications.name == DELIVER_TASK
    assert app.amqp.router.route({}, DELIVER_TASK)["queue"].name == "notifications"
    receiver.answer(500)
    job = submit(cluster.team_a, personas.member_a, notify={"url": receiver.url})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    eager, app.conf.task_always_eager = app.conf.task_always_eager, True  # retries in-process
    try:
        assert tasks.deliver_notifications.apply(args=[[delivery.pk]]).get() == {"retry": 1}
    finally:
        app.conf.task_always_eager = eager
    assert len(receiver.received) == 1  # the queued retry found it not yet due
    delivery.refresh_from_db()
    assert delivery.state == "pending" and delivery.attempts == 1


def test_the_sweep_forgets_deliveries_that_ended_long_ago(cluster, personas, settings):
    from portal.core.actions.notifications import prune

    settings.BERTH = settings.BERTH | {"NOTIFY_KEEP_DAYS": 30}
    job = submit(cluster.team_a, personas.member_a, notify={"url": "https://hooks.example.com/x"})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    later = timezone.now() + timedelta(days=31)
    assert prune(later) == 0  # still pending: kept, whatever its age
    Delivery.objects.update(state="delivered")
    assert prune(later - timedelta(days=2)) == 0
    assert prune(later) == 1 and not Delivery.objects.exists()


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "127.1", "0177.0.0.1"])
def test_other_spellings_of_loopback_are_refused_when_called(cluster, personas, receiver, host):
    """Not address literals to ipaddress, so judged at the call on what they resolve
    to (the C library reads them all as 127.0.0.1)."""
    port = int(receiver.url.split(":")[2].split("/")[0])
    job = submit(cluster.team_a, personas.member_a, notify={"url": f"http://{host}:{port}/"})
    cancel_job(job, actor=personas.lead_a)
    (delivery,) = Delivery.objects.all()
    assert deliver([delivery.pk]) == {}
    delivery.refresh_from_db()
    assert delivery.state == "failed" and "resolves to 127.0.0.1" in delivery.last_error
    assert receiver.received == []


def test_https_is_pinned_and_checks_the_certificate_for_the_name(
    cluster, personas, monkeypatch, local_targets, tmp_path
):
    """The socket goes to the checked address while TLS verifies the URL's name (SNI and
    the certificate); a certificate for another name is refused, and retried."""
    from tests.receiver import start_tls_receiver

    tls, stop, cert = start_tls_receiver(tmp_path, "hooks.example.com")
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the test's CA, for the default context
        fake_dns(monkeypatch, {"hooks.example.com": "127.0.0.1", "other.example.com": "127.0.0.1"})
        job = submit(cluster.team_a, personas.member_a, notify={"url": tls.url})
        cancel_job(job, actor=personas.lead_a)
        assert deliver(Delivery.objects.values_list("pk", flat=True)) == {}
        (got,) = tls.received
        assert verify(team_secret(cluster.team_a), got.headers, got.body)

        wrong = tls.url.replace("hooks.example.com", "other.example.com")
        other = submit(cluster.team_a, personas.member_a, name="other", notify={"url": wrong})
        cancel_job(other, actor=personas.lead_a)
        delivery = Delivery.objects.get(job=other)
        assert deliver([delivery.pk]) == {delivery.pk: 10.0}
        delivery.refresh_from_db()
        assert "CERTIFICATE_VERIFY_FAILED" in delivery.last_error and len(tls.received) == 1
    finally:
        stop()
