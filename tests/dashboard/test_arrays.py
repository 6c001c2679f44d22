"""The queue page shows a job array as one row with its tasks counted per state."""

from __future__ import annotations

from portal.core.actions.arrays import submit_array
from portal.core.actions.submit import Caller
from portal.core.models import Job, JobArray
from tests.api.conftest import job_body
from tests.dashboard.test_pages import PAGES


def array_of(cluster, spec: str) -> JobArray:
    values = job_body(name="shard-{index}", gpus_per_worker=1)
    return submit_array(Caller(cluster.personas.member_a), "alpha", values, spec).array


def test_the_queue_collapses_an_array_into_one_row(story, login):
    array = array_of(story.cluster, "0-29%5")
    Job.objects.filter(array=array, array_index__in=[0, 1]).update(state="running")
    Job.objects.filter(array=array, array_index=2).update(state="failed")

    page = login(story.cluster.personas.lead_a).get("/teams/alpha/queue/").content.decode()

    assert page.count(f'data-array="{array.pk}"') == 1
    assert f"Array {array.pk}_[3-29%5] shard-{{index}}" in page
    for text in ("27 pending", "2 running", "1 failed"):
        assert f">{text}</span>" in page, text
    assert "shard-4<" not in page  # its other pending tasks have no row of their own


def test_the_queue_page_costs_the_same_queries_with_arrays_of_any_size(
    story, login, django_assert_max_num_queries
):
    client = login(story.cluster.personas.lead_a)
    client.get("/teams/alpha/")
    array_of(story.cluster, "0-2")
    limit = PAGES["/teams/alpha/queue/"] + 2  # the arrays' counts: two queries for all of them
    with django_assert_max_num_queries(limit):
        assert client.get("/teams/alpha/queue/").status_code == 200
    array_of(story.cluster, "0-199%4")
    with django_assert_max_num_queries(limit):
        assert client.get("/teams/alpha/queue/").status_code == 200


def test_the_submit_form_submits_an_array_once(story, login):
    from tests.dashboard.test_permissions import valid_form

    client = login(story.cluster.personas.member_a)
    form = valid_form(name="eval-{index}", command="python eval.py --shard {index}", array="0-3%2")

    response = client.post("/teams/alpha/submit/", form)
    again = client.post("/teams/alpha/submit/", form)  # a double click

    assert response.status_code == 302 and response.url == "/teams/alpha/queue/"
    assert again.status_code == 302
    (array,) = JobArray.objects.all()
    tasks = Job.objects.filter(array=array).order_by("array_index")
    assert [(t.name, t.command[-1]) for t in tasks] == [(f"eval-{i}", str(i)) for i in range(4)]
    assert array.task_limit == 2 and array.submitted_by == story.cluster.personas.member_a


def test_a_bad_array_spec_is_shown_next_to_its_field(story, login):
    from tests.dashboard.test_permissions import valid_form

    client = login(story.cluster.personas.member_a)
    response = client.post("/teams/alpha/submit/", valid_form(array="9-3"))
    assert response.status_code == 200
    assert response.context["form"].errors["array"] == ["The range 9-3 ends before it starts."]
    response = client.post(
        "/teams/alpha/submit/", valid_form(array="0-3", gpus_per_worker="64", request_id="e" * 32)
    )
    assert "gpus_per_worker" in response.context["form"].errors
    assert not JobArray.objects.exists()
