"""Job dependencies through the API: a pipeline train → eval → report, each type of
dependency released or cancelled by its parent's state change, singleton, the
refusals at submit (another team's parent, a missing one, bad syntax), the safety
sweep, and the scheduling snapshot leaving held jobs out."""

from __future__ import annotations

import contextlib
import threading

import pytest
from django.db import connection
from django.utils import timezone

from portal.core.actions import dependencies
from portal.core.actions.jobs import transition
from portal.core.models import Job, JobDependency
from portal.core.scheduling.snapshot import build_snapshot
from scheduler import model as m
from tests.api.conftest import bearer, error_of, job_body, submit

JOBS = "/api/v1/jobs/"
ENDS = {"succeeded": {"exit_code": 0}, "failed": {"exit_code": 1}, "cancelled": {}}


def submitted(api, **overrides) -> dict:
    response = api.post(JOBS, job_body(**overrides))
    assert response.status_code == 201, response.content
    return response.json()


def job(api, pk: int) -> dict:
    response = api.get(f"{JOBS}{pk}/")
    assert response.status_code == 200, response.content
    return response.json()


def start(pk: int) -> None:
    transition([pk], from_states=["pending"], to_state="admitted", kind="admitted")
    transition([pk], from_states=["admitted"], to_state="running", kind="started",
               started_at=timezone.now())  # fmt: skip


def end(pk: int, state: str) -> None:
    """The parent ends the way the agent's report or a cancel ends it: a transition."""
    transition(
        [pk],
        from_states=Job.OPEN_STATES,
        to_state=state,
        kind=state,
        finished_at=timezone.now(),
        **ENDS[state],
    )


def test_pipeline_train_eval_report(cluster, personas, as_member_a):
    """The worked example of docs/api.md: eval after train succeeds, report after both
    ended whatever happened; each waits with a sentence naming its parent."""
    train = submitted(as_member_a, name="train")
    evaluate = submitted(as_member_a, name="eval", dependency=f"afterok:{train['id']}")
    report = submitted(
        as_member_a, name="report", dependency=f"afterany:{train['id']}:{evaluate['id']}"
    )
    assert evaluate["dependency"] == f"afterok:{train['id']}"

    held = job(as_member_a, evaluate["id"])
    assert (held["state"], held["reason_code"]) == ("pending", "dependency")
    assert held["reason"] == f"Waits for job {train['id']} (train) to succeed (it is pending)."
    assert "depends on" in held["remedy"] or "dependency" in held["remedy"]

    start(train["id"])
    assert job(as_member_a, evaluate["id"])["reason"].endswith("(it is running).")
    end(train["id"], "succeeded")
    released = job(as_member_a, evaluate["id"])
    assert (released["state"], released["reason_code"]) == ("pending", "new")
    assert [e["kind"] for e in released["events"]] == ["submitted", "dependency_met"]
    # in the queue from its release (the scheduler's Pass.passed counts from it)
    assert released["eligible_at"] == released["events"][1]["at"]
    assert held["eligible_at"] is None
    assert job(as_member_a, report["id"])["reason_code"] == "dependency"  # eval still open

    end(evaluate["id"], "failed")
    assert job(as_member_a, report["id"])["reason_code"] == "new"


# (type, how the parent ends) -> released, or cancelled with dependency_never_satisfied
OUTCOMES = [
    ("afterok", "succeeded", "released"),
    ("afterok", "failed", "cancelled"),
    ("afterok", "cancelled", "cancelled"),
    ("afternotok", "succeeded", "cancelled"),
    ("afternotok", "failed", "released"),
    ("afternotok", "cancelled", "released"),
    ("afterany", "succeeded", "released"),
    ("afterany", "failed", "released"),
    ("afterany", "cancelled", "released"),
    ("after", "cancelled", "released"),
]


@pytest.mark.parametrize(("kind", "ending", "outcome"), OUTCOMES)
def test_each_type_when_the_parent_ends(cluster, personas, as_member_a, kind, ending, outcome):
    parent = submitted(as_member_a, name="parent")
    child = submitted(as_member_a, name="child", dependency=f"{kind}:{parent['id']}")
    end(parent["id"], ending)
    now = job(as_member_a, child["id"])
    if outcome == "released":
        assert (now["state"], now["reason_code"]) == ("pending", "new")
        return
    assert (now["state"], now["reason_code"]) == ("cancelled", "dependency_never_satisfied")
    assert now["reason"] == (
        f"Dependency {kind}:{parent['id']} can never be met: job {parent['id']} (parent) {ending}."
    )
    event = now["events"][-1]
    assert event["kind"] == "dependency_never_satisfied"
    assert event["data"] == {"parent": parent["id"], "parent_state": ending}


def test_after_is_released_when_the_parent_starts(cluster, as_member_a):
    parent = submitted(as_member_a, name="server")
    child = submitted(as_member_a, name="client", dependency=f"after:{parent['id']}")
    transition([parent["id"]], from_states=["pending"], to_state="admitted", kind="admitted")
    assert job(as_member_a, child["id"])["reason_code"] == "dependency"  # admitted, not started
    transition([parent["id"]], from_states=["admitted"], to_state="running", kind="started")
    assert job(as_member_a, child["id"])["reason_code"] == "new"


def test_a_requeued_parent_keeps_afterok_waiting_for_its_final_end(cluster, as_member_a):
    parent = submitted(as_member_a, name="train")
    child = submitted(as_member_a, name="eval", dependency=f"afterok:{parent['id']}")
    start(parent["id"])
    transition([parent["id"]], from_states=["running"], to_state="preempting", kind="preempted")
    transition([parent["id"]], from_states=["preempting"], to_state="pending", kind="requeued")
    assert job(as_member_a, child["id"])["reason_code"] == "dependency"
    start(parent["id"])
    end(parent["id"], "succeeded")
    assert job(as_member_a, child["id"])["reason_code"] == "new"


def test_a_never_satisfied_dependency_cascades_down_the_pipeline(cluster, as_member_a):
    train = submitted(as_member_a, name="train")
    evaluate = submitted(as_member_a, name="eval", dependency=f"afterok:{train['id']}")
    report = submitted(as_member_a, name="report", dependency=f"afterok:{evaluate['id']}")
    cleanup = submitted(as_member_a, name="cleanup", dependency=f"afterany:{report['id']}")
    end(train["id"], "failed")
    assert job(as_member_a, evaluate["id"])["state"] == "cancelled"
    assert job(as_member_a, report["id"])["reason"] == (
        f"Dependency afterok:{evaluate['id']} can never be met: job {evaluate['id']} (eval) "
        "cancelled."
    )
    assert job(as_member_a, cleanup["id"])["reason_code"] == "new"


def test_several_types_must_all_hold(cluster, as_member_a):
    a = submitted(as_member_a, name="a")
    b = submitted(as_member_a, name="b")
    child = submitted(as_member_a, name="c", dependency=f"afterok:{a['id']},afternotok:{b['id']}")
    end(a["id"], "succeeded")
    held = job(as_member_a, child["id"])
    assert held["reason"] == f"Waits for job {b['id']} (b) to fail (it is pending)."
    end(b["id"], "failed")
    assert job(as_member_a, child["id"])["reason_code"] == "new"


def test_a_parent_that_already_ended_settles_the_job_at_submit(cluster, as_member_a):
    done = submitted(as_member_a, name="train")
    end(done["id"], "succeeded")
    ok = submitted(as_member_a, name="eval", dependency=f"afterok:{done['id']}")
    never = submitted(as_member_a, name="rerun", dependency=f"afternotok:{done['id']}")
    assert job(as_member_a, ok["id"])["reason_code"] == "new"
    assert job(as_member_a, never["id"])["state"] == "cancelled"


def test_singleton_runs_one_job_of_a_name_and_user_at_a_time(
    cluster, personas, as_member_a, as_lead_a
):
    first = submitted(as_member_a, name="nightly", dependency="singleton")
    second = submitted(as_member_a, name="nightly", dependency="singleton")
    third = submitted(as_member_a, name="nightly", dependency="singleton")
    other_user = submitted(as_lead_a, name="nightly", dependency="singleton")
    assert job(as_member_a, first["id"])["reason_code"] == "new"  # nothing before it
    assert job(as_member_a, other_user["id"])["reason_code"] == "new"
    held = job(as_member_a, second["id"])
    assert held["reason"] == (
        f"Waits for job {first['id']} of the same name and user to end (singleton)."
    )
    start(first["id"])
    end(first["id"], "succeeded")
    assert job(as_member_a, second["id"])["reason_code"] == "new"
    assert job(as_member_a, third["id"])["reason_code"] == "dependency"  # second goes first
    end(second["id"], "cancelled")
    assert job(as_member_a, third["id"])["reason_code"] == "new"


def test_cancelling_a_held_job_works_and_ends_its_afterok_dependents(cluster, as_member_a):
    parent = submitted(as_member_a, name="train")
    child = submitted(as_member_a, name="eval", dependency=f"afterok:{parent['id']}")
    grandchild = submitted(as_member_a, name="report", dependency=f"afterok:{child['id']}")
    response = as_member_a.post(f"{JOBS}{child['id']}/cancel/", {})
    assert response.status_code == 200, response.content
    assert job(as_member_a, grandchild["id"])["reason_code"] == "dependency_never_satisfied"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("afterok", "afterok needs job ids: afterok:12 or afterok:12:13."),
        ("afterok:x", "'x' in 'afterok:x' is not a job id (a positive number)."),
        ("afterok:0", "'0' in 'afterok:0' is not a job id (a positive number)."),
        ("afterok:1+5", "Delays such as afterok:1+5 are not supported."),
        ("afterok:99999999999999999999", None),
        ("afterok:1,", "An empty dependency between commas: write afterok:12,singleton."),
        (
            "afterok:1?afterany:2",
            "Use ',' between dependencies (all must hold); '?' (any) is not supported.",
        ),
        ("aftercorr:1", None),
        ("singleton:1", None),
    ],
)
def test_bad_syntax_is_a_400_on_the_field(cluster, as_member_a, spec, message):
    error = error_of(as_member_a.post(JOBS, job_body(dependency=spec)), 400, "invalid")
    [text] = error["fields"]["dependency"]
    if message:
        assert text == message
    elif spec.startswith("afterok:9"):
        assert text.endswith("is not a job id (a positive number).")
    else:
        assert text.startswith("Unknown dependency") and "afterok:12:13,singleton" in text


def test_a_blank_dependency_is_none(cluster, as_member_a):
    assert submitted(as_member_a, dependency="  ")["dependency"] == ""


def test_a_parent_of_another_team_or_none_at_all_is_refused_alike(cluster, personas, as_member_a):
    beta = submit(cluster.team_b, personas.lead_b, name="beta-secret")
    own = submitted(as_member_a, name="train")
    for missing in (beta.pk, own["id"] + 1000):  # a future id: the only way to a cycle
        error = error_of(
            as_member_a.post(JOBS, job_body(dependency=f"afterok:{own['id']}:{missing}")),
            400,
            "invalid",
        )
        assert error["fields"]["dependency"] == [
            f"Team alpha has no job {missing}; a job can depend only on jobs of its own team."
        ]
    assert not JobDependency.objects.exists()
    assert Job.objects.filter(team=cluster.team_a).count() == 1


def test_a_retry_with_the_same_key_returns_the_same_held_job(cluster, as_member_a):
    parent = submitted(as_member_a, name="train")
    body = job_body(name="eval", dependency=f"afterok:{parent['id']}")
    first = as_member_a.post(JOBS, body, **{"Idempotency-Key": "eval-1"})
    again = as_member_a.post(JOBS, body, **{"Idempotency-Key": "eval-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    other = job_body(name="eval", dependency=f"afterany:{parent['id']}")
    error_of(as_member_a.post(JOBS, other, **{"Idempotency-Key": "eval-1"}), 409)
    assert JobDependency.objects.count() == 1


def test_bulk_jobs_may_depend_on_existing_jobs(cluster, as_member_a):
    parent = submitted(as_member_a, name="train")
    body = {
        "jobs": [job_body(name=f"eval-{i}", dependency=f"afterok:{parent['id']}") for i in range(3)]
    }
    response = as_member_a.post(f"{JOBS}bulk/", body)
    assert response.status_code == 201, response.content
    ids = response.json()["ids"]
    assert set(Job.objects.filter(pk__in=ids).values_list("reason_code", flat=True)) == {
        "dependency"
    }
    end(parent["id"], "succeeded")
    assert set(Job.objects.filter(pk__in=ids).values_list("reason_code", flat=True)) == {"new"}


def test_held_jobs_are_not_in_the_scheduling_snapshot(cluster, as_member_a):
    parent = submitted(as_member_a, name="train")
    child = submitted(as_member_a, name="eval", dependency=f"afterok:{parent['id']}")
    snapshot, _ = build_snapshot(timezone.now(), m.PolicyConfig())
    assert [j.id for j in snapshot.pending] == [parent["id"]]
    end(parent["id"], "succeeded")
    snapshot, _ = build_snapshot(timezone.now(), m.PolicyConfig())
    assert [j.id for j in snapshot.pending] == [child["id"]]


def test_the_sweep_releases_what_a_race_left_held(cluster, as_member_a):
    """A parent that ended without the hook seeing its child (a submit racing it)."""
    parent = submitted(as_member_a, name="train")
    child = submitted(as_member_a, name="eval", dependency=f"afterok:{parent['id']}")
    Job.objects.filter(pk=parent["id"]).update(state="succeeded")  # as if the hook missed it
    assert job(as_member_a, child["id"])["reason_code"] == "dependency"
    assert dependencies.sweep_held_jobs() == {"released": 1, "cancelled": 0, "waiting": 0}
    assert job(as_member_a, child["id"])["reason_code"] == "new"
    assert dependencies.sweep_held_jobs() == {"released": 0, "cancelled": 0, "waiting": 0}


def test_the_job_list_shows_the_dependency(cluster, as_member_a):
    parent = submitted(as_member_a, name="train")
    submitted(
        as_member_a,
        name="eval",
        dependency=f" afterany:{parent['id']} , singleton ,afterok:{parent['id']}",
    )
    rows = as_member_a.get(JOBS).json()["results"]
    assert [r["dependency"] for r in rows] == [
        f"afterok:{parent['id']},afterany:{parent['id']},singleton",
        "",
    ]


def test_many_dependents_are_settled_by_a_task_after_the_commit(
    cluster, as_member_a, monkeypatch, django_capture_on_commit_callbacks
):
    """A parent with more held children than SETTLE_INLINE_MAX: its transition only
    queues them (the broker is the network edge: the sent task is recorded), and the
    task releases them."""
    from portal.celery import app as celery_app
    from portal.core import tasks

    monkeypatch.setattr(dependencies, "SETTLE_INLINE_MAX", 1)
    sent = []
    monkeypatch.setattr(celery_app, "send_task", lambda name, **kw: sent.append((name, kw)))
    parent = submitted(as_member_a, name="train")
    children = [
        submitted(as_member_a, name=f"eval-{i}", dependency=f"afterok:{parent['id']}")["id"]
        for i in range(3)
    ]
    with django_capture_on_commit_callbacks(execute=True):
        end(parent["id"], "succeeded")
    assert sent == [(dependencies.SETTLE_TASK, {"args": [children], "retry": False})]
    assert {job(as_member_a, pk)["reason_code"] for pk in children} == {"dependency"}

    assert tasks.dependency_settle(children) == {"released": 3, "cancelled": 0, "waiting": 0}
    assert {job(as_member_a, pk)["reason_code"] for pk in children} == {"new"}


def test_an_array_may_depend_on_a_job_and_its_tasks_are_released_together(cluster, as_member_a):
    """Pipelines combine: an eval array after training, every task held, then released."""
    from tests.api.test_arrays import ARRAYS, array_body

    train = submitted(as_member_a, name="train")
    response = as_member_a.post(ARRAYS, array_body("0-3%2", dependency=f"afterok:{train['id']}"))
    assert response.status_code == 201, response.content
    ids = response.json()["ids"]
    tasks = Job.objects.filter(pk__in=ids)
    assert set(tasks.values_list("reason_code", flat=True)) == {"dependency"}
    assert all(t.awaiting_dependency for t in tasks)
    end(train["id"], "succeeded")
    assert not Job.objects.filter(pk__in=ids, awaiting_dependency=True).exists()
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"pending"}


@pytest.mark.django_db(transaction=True)
def test_two_singletons_submitted_at_once_release_only_one(cluster, personas, monkeypatch):
    """Each submission judges its singleton before the other commits (forced here: both
    read their namesakes, then wait for each other): only one may be released."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL (SQLite serializes the two)")
    both_read = threading.Barrier(2, timeout=3)
    real = dependencies._namesakes

    def namesakes(held, *, lock):
        found = real(held, lock=lock)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_read.wait()  # broken: the other waits for this one to commit, no race
        return found

    monkeypatch.setattr(dependencies, "_namesakes", namesakes)
    apis = [bearer(personas.member_a) for _ in range(2)]
    codes = []

    def one(api):
        try:
            codes.append(
                api.post(JOBS, job_body(name="nightly", dependency="singleton")).status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(api,)) for api in apis]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert codes == [201, 201]
    held = (
        Job.objects.filter(name="nightly")
        .order_by("pk")
        .values_list("awaiting_dependency", flat=True)
    )
    assert list(held) == [False, True]  # the first released, the second waits for it
