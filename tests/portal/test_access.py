"""Tenant access helpers on the submission path: one query, the same refusals as the slow path."""

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.core import access


def test_submit_target_resolves_team_role_and_queue_in_one_query(cluster, personas):
    with CaptureQueriesContext(connection) as q:
        team, queue = access.get_submit_target(personas.lead_a, None, "default")
    assert team == cluster.team_a and queue == cluster.queue_a and queue.team is team
    assert len(q.captured_queries) == 1, q.captured_queries
    team, queue = access.get_submit_target(personas.member_a, "alpha", "nope")
    assert team == cluster.team_a and queue is None
    with pytest.raises(access.NotFound):
        access.get_submit_target(personas.lead_b, "alpha", "default")
    with pytest.raises(PermissionDenied):
        access.get_submit_target(personas.viewer_a, "alpha", "default")
    with pytest.raises(access.NotFound):
        access.get_submit_target(personas.lead_a, "alpha", "default", scope={cluster.team_b.pk})
    t, qq = access.get_submit_target(personas.admin, "beta", "default")
    assert t == cluster.team_b and qq == cluster.queue_b
