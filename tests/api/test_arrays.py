"""Job arrays (Slurm's --array): N tasks from one spec, all or none, one handle."""

from __future__ import annotations

import pytest

from portal.core.models import Job, JobArray, JobEvent
from portal.core.scheduling import run_pass
from tests.api.conftest import error_of, job_body

ARRAYS = "/api/v1/arrays/"


def array_body(spec: str, **overrides) -> dict:
    return job_body(
        name="shard-{index}",
        command=["python", "eval.py", "--shard", "{index}"],
        gpus_per_worker=1,
        **overrides,
    ) | {"array": spec}


def test_an_array_is_one_job_per_index_with_its_index_everywhere(as_member_a):
    response = as_member_a.post(ARRAYS, array_body("1,3,5-9", env={"SEED": "7"}))

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["size"], body["limit"], body["array"]) == (7, None, "1,3,5-9")
    assert body["indices"] == [1, 3, 5, 6, 7, 8, 9]
    tasks = list(Job.objects.filter(pk__in=body["ids"]).order_by("array_index"))
    assert [t.pk for t in tasks] == body["ids"]
    assert {t.array_id for t in tasks} == {body["id"]}
    five = tasks[2]
    assert (five.array_index, five.name) == (5, "shard-5")
    assert five.command == ["python", "eval.py", "--shard", "5"]
    assert five.env == {
        "SEED": "7",
        "BERTH_ARRAY_ID": str(body["id"]),
        "BERTH_ARRAY_INDEX": "5",
        "BERTH_ARRAY_SIZE": "7",
        "SLURM_ARRAY_JOB_ID": str(body["id"]),
        "SLURM_ARRAY_TASK_ID": "5",
        "SLURM_ARRAY_TASK_COUNT": "7",
        "SLURM_ARRAY_TASK_MIN": "1",
        "SLURM_ARRAY_TASK_MAX": "9",
    }
    assert JobEvent.objects.filter(job__in=tasks, kind="submitted").count() == 7
    listed = as_member_a.get("/api/v1/jobs/", {"array": body["id"]}).json()
    assert listed["count"] == 7
    assert {(j["array"], j["array_index"]) for j in listed["results"]} == {
        (body["id"], i) for i in body["indices"]
    }


@pytest.mark.parametrize(
    ("spec", "indices", "limit"),
    [
        ("0-9", list(range(10)), None),
        ("0-99:4", list(range(0, 100, 4)), None),
        ("0-9%2", list(range(10)), 2),
        (" 7 ", [7], None),
        ("1, 3 ,5-6 %2", [1, 3, 5, 6], 2),
        ("10-12,0,3", [0, 3, 10, 11, 12], None),
    ],
)
def test_the_spec_grammar(as_member_a, spec, indices, limit):
    body = as_member_a.post(ARRAYS, array_body(spec)).json()
    assert (body["indices"], body["limit"]) == (indices, limit)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "Give the task indices"),
        ("abc", "'abc' is not an index or a range"),
        ("9-3", "ends before it starts"),
        ("0-9:0", "step in 0-9:0 must be at least 1"),
        ("1,1", "Index 1 appears twice"),
        ("0-9%0", "After % give how many"),
        ("0-9%x", "After % give how many"),
        ("0-20000", "At most 10,000 tasks"),
        ("0-1000000", "below 1,000,000"),
        ("1,,2", "'' is not an index"),
        ("-1-3", "is not an index or a range"),
        ("\u0663", "is not an index or a range"),  # an Arabic-Indic 3: ASCII digits only
        ("0-9%\u00b2", "After % give how many"),
        # above the task_limit column's range: a 500 before (a security review's case)
        ("0-9%99999999999", "at most 10,000"),
        ("0-9%10001", "at most 10,000"),
        ("0-9998,9998", "Index 9998 appears twice"),  # found in one pass, not per index
        ("5,1-9", "Index 5 appears twice"),
    ],
)
def test_a_bad_spec_is_a_400_on_the_array_field(as_member_a, spec, says):
    error = error_of(as_member_a.post(ARRAYS, array_body(spec)), 400, "invalid")
    assert says in error["fields"]["array"][0], error
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_a_missing_or_non_text_spec_is_a_400(as_member_a):
    body = array_body("0-3")
    del body["array"]
    assert "array" in error_of(as_member_a.post(ARRAYS, body), 400, "invalid")["fields"]
    error = error_of(as_member_a.post(ARRAYS, array_body("x") | {"array": 5}), 400, "invalid")
    assert "array" in error["fields"]


def test_a_bad_job_spec_is_said_once_not_per_task(as_member_a):
    body = array_body("0-99", flavor="tpu-v5", workers=0)
    error = error_of(as_member_a.post(ARRAYS, body), 400, "invalid")
    assert set(error["fields"]) == {"flavor", "workers"}, error
    assert len(error["fields"]["flavor"]) == 1
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_a_name_too_long_only_for_big_indices_names_the_first_such_task(as_member_a):
    name = "n" * 60 + "{index}"  # 61 characters at index 0-9, 63 at 100: 64 at 1000
    error = error_of(as_member_a.post(ARRAYS, array_body("998-1001") | {"name": name}), 400)
    assert error["fields"]["name"][0].endswith("(checked on task 1001, the longest)"), error


def test_the_array_names_are_berths_to_set(as_member_a):
    body = array_body("0-3", env={"SLURM_ARRAY_TASK_ID": "9"})
    error = error_of(as_member_a.post(ARRAYS, body), 400, "invalid")
    assert "SLURM_ARRAY_TASK_ID" in error["fields"]["env"][0]


def test_all_or_none_against_the_queues_room(as_member_a, cluster):
    cluster.queue_a.max_pending_jobs = 10
    cluster.queue_a.save()
    assert as_member_a.post(ARRAYS, array_body("0-5")).status_code == 201

    response = as_member_a.post(ARRAYS, array_body("0-4"))  # 6 + 5 > 10: counted as 5 jobs

    error_of(response, 429, "queue_full")
    assert Job.objects.count() == 6 and JobArray.objects.count() == 1
    error = error_of(as_member_a.post(ARRAYS, array_body("0-10")), 400, "invalid")
    assert "at most 10 pending jobs" in error["fields"]["array"][0]
    assert JobArray.objects.count() == 1


def test_idempotent_with_the_key(as_member_a):
    first = as_member_a.post(ARRAYS, array_body("0-4%2"), **{"Idempotency-Key": "ci-eval-9"})
    again = as_member_a.post(ARRAYS, array_body("0-4%2"), **{"Idempotency-Key": "ci-eval-9"})

    assert (first.status_code, again.status_code) == (201, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Job.objects.count() == 5 and JobArray.objects.count() == 1
    other = as_member_a.post(ARRAYS, array_body("0-5%2"), **{"Idempotency-Key": "ci-eval-9"})
    error_of(other, 409, "idempotency_conflict")
    assert Job.objects.count() == 5


def test_a_viewer_cannot_replay_an_array_either(as_member_a, as_viewer_a):
    key = {"Idempotency-Key": "ci-eval-3"}
    assert as_member_a.post(ARRAYS, array_body("0-2"), **key).status_code == 201
    error_of(as_viewer_a.post(ARRAYS, array_body("0-2"), **key), 403)


def test_viewer_and_outsider_cannot_submit_an_array(as_viewer_a, as_lead_b):
    error_of(as_viewer_a.post(ARRAYS, array_body("0-3") | {"team": "alpha"}), 403)
    error_of(as_lead_b.post(ARRAYS, array_body("0-3") | {"team": "alpha"}), 404, "not_found")
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_the_pass_keeps_to_the_limit(as_member_a):
    body = as_member_a.post(ARRAYS, array_body("0-9%3")).json()

    run_pass()

    tasks = Job.objects.filter(array_id=body["id"]).order_by("array_index")
    assert [t.state for t in tasks].count("admitted") == 3
    assert [t.array_index for t in tasks if t.state == "admitted"] == [0, 1, 2]
    held = tasks.get(array_index=3)
    assert held.reason_code == "array_limit"
    assert f"array {body['id']} already has 3 tasks running, its limit (%3)" in held.reason
    shown = as_member_a.get(f"{ARRAYS}{body['id']}/").json()
    assert shown["counts"]["admitted"] == 3 and shown["counts"]["pending"] == 7
    assert (shown["state"], shown["display"]) == ("running", f"{body['id']}_[3-9%3]")
    assert shown["pending_indices"] == "3-9"


def test_one_id_cancels_the_array(as_member_a, as_lead_a, as_lead_b, as_viewer_a):
    body = as_member_a.post(ARRAYS, array_body("0-4%2")).json()
    run_pass()
    url = f"{ARRAYS}{body['id']}/cancel/"
    error_of(as_lead_b.post(url), 404, "not_found")
    error_of(as_viewer_a.post(url), 403)

    response = as_lead_a.post(url, {"reason": "wrong data"})

    assert response.status_code == 200, response.content
    shown = response.json()
    assert shown["counts"]["cancelled"] == 5 and shown["state"] == "cancelled"
    stopping = Job.objects.filter(array_id=body["id"], stop_requested_at__isnull=False)
    assert stopping.count() == 2  # the admitted ones stop their workers
    assert JobEvent.objects.filter(kind="cancelled", message="wrong data").count() == 5
    error_of(as_lead_a.post(url), 409, "invalid_state")


def test_the_state_is_succeeded_only_if_every_task_succeeded(as_member_a):
    body = as_member_a.post(ARRAYS, array_body("0-2")).json()
    tasks = Job.objects.filter(array_id=body["id"])
    tasks.update(state="succeeded")
    assert as_member_a.get(f"{ARRAYS}{body['id']}/").json()["state"] == "succeeded"
    tasks.filter(array_index=1).update(state="failed")
    assert as_member_a.get(f"{ARRAYS}{body['id']}/").json()["state"] == "failed"


def test_arrays_are_listed_per_team_and_hidden_from_outsiders(as_member_a, as_lead_b):
    body = as_member_a.post(ARRAYS, array_body("0-2")).json()
    listed = as_member_a.get(ARRAYS).json()
    assert [a["id"] for a in listed["results"]] == [body["id"]]
    assert listed["results"][0]["counts"]["pending"] == 3
    assert as_lead_b.get(ARRAYS).json()["count"] == 0
    error_of(as_lead_b.get(f"{ARRAYS}{body['id']}/"), 404, "not_found")


def test_the_job_list_collapses_an_arrays_pending_tasks_on_request(as_member_a):
    body = as_member_a.post(ARRAYS, array_body("0-9%2")).json()
    run_pass()  # tasks 0 and 1 start
    plain = as_member_a.post("/api/v1/jobs/", job_body(name="plain")).json()

    listed = as_member_a.get("/api/v1/jobs/", {"collapse": "true", "ordering": "queue"}).json()

    rows = [(j["array_index"], j["state"]) for j in listed["results"] if j["array"]]
    assert rows == [(0, "admitted"), (1, "admitted"), (2, "pending")]  # 2 stands for 2-9
    assert plain["id"] in [j["id"] for j in listed["results"]] and listed["count"] == 4
    assert as_member_a.get("/api/v1/jobs/").json()["count"] == 11
    assert as_member_a.get(f"{ARRAYS}{body['id']}/").json()["counts"]["pending"] == 8
