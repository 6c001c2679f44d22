"""Shared fixtures: a small cluster and named personas.

Team A ("alpha") has a lead, a member and a viewer; team B ("beta") has its own
lead, who is the outsider for everything of team A. Both teams share a cohort.
"""

from __future__ import annotations

import pytest

from tests.factories import Personas, make_cluster


@pytest.fixture
def cluster(db):
    return make_cluster()


@pytest.fixture
def personas(cluster) -> Personas:
    return cluster.personas
