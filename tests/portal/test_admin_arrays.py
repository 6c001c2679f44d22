"""The admin lists job arrays with their tasks per state and cancels them through
actions.arrays (an event per task), as it does jobs."""

import pytest

from portal.core.models import Job, JobEvent
from tests.dashboard.test_arrays import array_of


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def test_the_admin_lists_arrays_and_cancels_them_with_events(admin_client, cluster):
    array = array_of(cluster, "0-3")
    listed = admin_client.get("/admin/core/jobarray/?q=shard")
    assert listed.status_code == 200 and "4 pending" in listed.content.decode()
    assert admin_client.get(f"/admin/core/jobarray/{array.pk}/change/").status_code == 200
    assert admin_client.get(f"/admin/core/job/?q={array.pk}").status_code == 200

    response = admin_client.post(
        "/admin/core/jobarray/", {"action": "cancel", "_selected_action": [array.pk]}
    )

    assert response.status_code == 302
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"cancelled"}
    events = JobEvent.objects.filter(job__array=array, kind="cancelled")
    assert events.count() == 4 and all("admin" in e.message for e in events)
