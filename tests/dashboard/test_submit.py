"""The submit form: the API's validation, errors next to fields, one job per form."""

from __future__ import annotations

import pytest

from portal.core.jobspec import SpecError, clean_job_spec
from portal.core.models import Job
from tests.dashboard.test_permissions import valid_form


def errors(response) -> dict[str, list[str]]:
    form = response.context["form"]
    return {name: list(errs) for name, errs in form.errors.items()}


def test_member_submits_a_job_and_lands_on_its_page(story, login):
    client = login(story.cluster.personas.member_a)
    response = client.post(
        "/teams/alpha/submit/",
        valid_form(
            command='python train.py --name "big run"',
            env="SEED=1\n# comment\nWANDB_MODE=offline",
            max_runtime_seconds="2h30m",
            preemptible="no",
            priority="5",
        ),
    )
    job = Job.objects.get(name="resnet-50")
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.command == ["python", "train.py", "--name", "big run"]
    assert job.env == {"SEED": "1", "WANDB_MODE": "offline"}
    assert (job.max_runtime_seconds, job.preemptible, job.priority) == (9000, False, 5)
    assert (job.state, job.submitted_by, job.flavor.name) == (
        Job.State.PENDING,
        story.cluster.personas.member_a,
        "a100-40gb",
    )
    assert job.idempotency_key == "web-" + "f" * 32


def test_blank_optional_fields_take_the_queues_defaults(story, login):
    login(story.cluster.personas.lead_a).post("/teams/alpha/submit/", valid_form())
    job = Job.objects.get(name="resnet-50")
    queue = story.cluster.queue_a
    assert job.max_runtime_seconds == queue.default_runtime_seconds
    assert job.priority == queue.default_priority
    assert job.preemptible == queue.preemptible_default


def test_a_json_command_list_is_accepted(story, login):
    login(story.cluster.personas.lead_a).post(
        "/teams/alpha/submit/", valid_form(command='["bash", "-c", "echo hi && sleep 1"]')
    )
    assert Job.objects.get(name="resnet-50").command == ["bash", "-c", "echo hi && sleep 1"]


def test_a_resent_form_does_not_submit_a_second_job(story, login):
    client = login(story.cluster.personas.lead_a)
    first = client.post("/teams/alpha/submit/", valid_form())
    second = client.post("/teams/alpha/submit/", valid_form())
    assert first.url == second.url
    assert Job.objects.filter(name="resnet-50").count() == 1
    changed = client.post("/teams/alpha/submit/", valid_form(gpus_per_worker="4"))
    assert "already submitted as job" in " ".join(errors(changed)["__all__"])


@pytest.mark.parametrize(
    "overrides, field, text",
    [
        ({"gpus_per_worker": "64"}, "gpus_per_worker", "No a100-40gb node has 64 GPUs"),
        ({"workers": "40"}, "workers", "team alpha can get at most"),
        ({"env": "RANK=1"}, "env", "Set by Berth"),
        ({"env": "NOT A PAIR"}, "env", "KEY=VALUE"),
        ({"command": 'python "unclosed'}, "command", "Could not split"),
        ({"command": "[1, 2"}, "command", "Not a valid JSON list"),
        ({"max_runtime_seconds": "soon"}, "max_runtime_seconds", "duration"),
        ({"max_runtime_seconds": "3d"}, "max_runtime_seconds", "allows at most"),
        ({"checkpoint_signal": "SIGNOPE"}, "checkpoint_signal", "Unknown signal"),
        ({"priority": "5000"}, "priority", "between"),
        ({"image": ""}, "image", "required"),
        ({"flavor": "tpu-v5"}, "flavor", "Select a valid choice"),
    ],
)
def test_field_errors_are_shown_next_to_their_fields(story, login, overrides, field, text):
    response = login(story.cluster.personas.lead_a).post(
        "/teams/alpha/submit/", valid_form(**overrides)
    )
    assert response.status_code == 200
    assert text in " ".join(errors(response).get(field, [])), errors(response)
    html = response.content.decode()
    assert f'id="id_{field}-errors"' in html
    assert not Job.objects.filter(name="resnet-50").exists()


def test_the_form_and_the_api_validation_agree(story, login):
    """Whatever clean_job_spec rejects, the form shows under the same field names."""
    data = {"name": "x", "image": "i", "command": ["c"], "flavor": "a100-40gb", "workers": 40}
    with pytest.raises(SpecError) as api:
        clean_job_spec(story.cluster.team_a, data)
    response = login(story.cluster.personas.lead_a).post(
        "/teams/alpha/submit/",
        valid_form(name="x", image="i", command="c", workers="40", gpus_per_worker="1"),
    )
    form_errors = errors(response)
    for name, messages in api.value.fields.items():
        assert set(messages) <= set(form_errors[name])


def test_a_full_queue_is_reported_above_the_form(story, login):
    queue = story.cluster.queue_a
    queue.max_pending_jobs = 3
    queue.save()
    response = login(story.cluster.personas.lead_a).post("/teams/alpha/submit/", valid_form())
    assert "already holds its limit of 3 pending jobs" in " ".join(errors(response)["__all__"])


def test_submit_page_offers_only_the_teams_queues(story, login):
    form = login(story.cluster.personas.lead_a).get("/teams/alpha/submit/").context["form"]
    assert [name for name, _ in form.fields["queue"].choices] == ["default"]
    assert [name for name, _ in form.fields["flavor"].choices] == ["a100-40gb", "h100-80gb"]


def test_a_deeply_nested_json_command_is_a_field_error(story, login):
    client = login(story.cluster.personas.member_a)
    response = client.post("/teams/alpha/submit/", valid_form(command="[" * 5000))
    assert response.status_code == 200
    assert "Nested deeper" in " ".join(errors(response)["command"])
    assert not Job.objects.filter(name="resnet-50").exists()
