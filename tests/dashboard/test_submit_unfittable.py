"""The submit form refuses a gang the flavor's topology can never host (issue 16, item 1)."""

from __future__ import annotations

from portal.core.models import Job
from tests.dashboard.test_permissions import valid_form


def test_a_gang_no_block_can_host_is_refused_under_workers(story, login):
    # h100: two blocks of two 8-GPU nodes; alpha's quota alone would allow 32 GPUs.
    response = login(story.cluster.personas.lead_a).post(
        "/teams/alpha/submit/",
        valid_form(flavor="h100-80gb", workers="3", gpus_per_worker="8"),
    )

    assert response.status_code == 200
    (why,) = response.context["form"].errors["workers"]
    assert "can host is 2 workers" in why and "inside one block" in why
    assert why in response.content.decode()
    assert not Job.objects.filter(name="resnet-50").exists()
