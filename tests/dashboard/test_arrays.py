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
