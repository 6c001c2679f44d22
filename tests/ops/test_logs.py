"""Log lines carry job / team / node ids, as JSON keys or key=value, without costing queries."""

from __future__ import annotations

import json
import logging

import pytest

from portal.core.models import Job, Worker
from portal.logging import JsonFormatter
from portal.ops.logs import TextFormatter, log_fields


@pytest.fixture
def job(cluster):
    return Job.objects.create(
        team=cluster.team_a,
        queue=cluster.queue_a,
        flavor=cluster.h100,
        name="train",
        image="img",
        max_runtime_seconds=60,
    )


def record(extra: dict, message: str = "job admitted") -> logging.LogRecord:
    logger = logging.getLogger("berth.test")
    return logger.makeRecord(
        "berth.test", logging.INFO, __file__, 1, message, (), None, extra=extra
    )


def test_fields_from_instances_without_queries(cluster, job, django_assert_num_queries):
    node = cluster.nodes[0]
    worker = Worker.objects.create(job=job, attempt=0, rank=1, node=node)
    job = Job.objects.get(pk=job.pk)  # nothing related loaded
    worker = Worker.objects.get(pk=worker.pk)
    with django_assert_num_queries(0):
        fields = log_fields(job=job, node=node, team=cluster.team_a)
        worker_fields = log_fields(worker=worker)
    assert fields == {
        "job_id": job.pk,
        "team_id": cluster.team_a.pk,
        "queue_id": cluster.queue_a.pk,
        "team": "alpha",
        "node": node.hostname,
        "node_id": node.pk,
    }
    assert worker_fields == {"worker": f"{job.pk}.0.1", "job_id": job.pk, "node_id": node.pk}


def test_plain_ids_and_extra_fields():
    assert log_fields(job=7, node="gpu-3", team=2, borrowed=4) == {
        "job_id": 7,
        "node": "gpu-3",
        "team_id": 2,
        "borrowed": 4,
    }


def test_names_that_clash_with_log_record_attributes_are_renamed():
    fields = log_fields(name="train", message="hi", levelname="x")
    assert fields == {"x_name": "train", "x_message": "hi", "x_levelname": "x"}
    record(fields)  # logging would raise KeyError on a clash


def test_json_lines_carry_the_fields(job):
    line = JsonFormatter().format(record(log_fields(job=job, node="gpu-3")))
    entry = json.loads(line)
    assert entry["message"] == "job admitted"
    assert entry["job_id"] == job.pk and entry["node"] == "gpu-3"


def test_text_lines_append_the_fields():
    formatter = TextFormatter("%(levelname)s %(name)s %(message)s")
    line = formatter.format(record(log_fields(job=7, node="gpu 3", reason="")))
    assert line == 'INFO berth.test job admitted job_id=7 node="gpu 3" reason=""'
    assert formatter.format(record({})) == "INFO berth.test job admitted"


def test_text_fields_stay_on_the_first_line_of_a_traceback():
    formatter = TextFormatter("%(message)s")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        rec = logging.getLogger("t").makeRecord(
            "t", logging.ERROR, __file__, 1, "failed", (), sys.exc_info(), extra={"job_id": 3}
        )
    first, *rest = formatter.format(rec).splitlines()
    assert first == "failed job_id=3"
    assert rest[0].startswith("Traceback")
