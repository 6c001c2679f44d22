"""Builders for test data, used by portal tests (not by scheduler tests, which
build frozen snapshots with their own helpers)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model

from portal.core.models import Cohort, Gpu, GpuFlavor, Membership, Node, Queue, Quota, Team

PASSWORD = "correct-horse-battery-staple"


@dataclass
class Personas:
    lead_a: object
    member_a: object
    viewer_a: object
    lead_b: object
    admin: object


@dataclass
class Cluster:
    cohort: Cohort
    h100: GpuFlavor
    a100: GpuFlavor
    team_a: Team
    team_b: Team
    queue_a: Queue
    queue_b: Queue
    nodes: list[Node]
    personas: Personas


def make_user(username: str, *, staff: bool = False):
    User = get_user_model()
    return User.objects.create_user(
        username=username,
        password=PASSWORD,
        email=f"{username}@example.com",
        is_staff=staff,
        is_superuser=staff,
    )


def make_team(slug: str, *, cohort=None, weight: float = 1.0, quotas=None) -> Team:
    team = Team.objects.create(slug=slug, name=slug.title(), cohort=cohort, weight=weight)
    for flavor, nominal in (quotas or {}).items():
        Quota.objects.create(team=team, flavor=flavor, nominal=nominal)
    return team


def make_node(
    hostname: str,
    flavor: GpuFlavor,
    *,
    gpus: int = 8,
    rack: str = "r1",
    block: str = "b1",
    ready: bool = True,
) -> Node:
    node = Node.objects.create(
        hostname=hostname,
        flavor=flavor,
        rack=rack,
        block=block,
        condition=Node.Condition.READY if ready else Node.Condition.UNKNOWN,
    )
    Gpu.objects.bulk_create(
        Gpu(
            node=node,
            index=i,
            uuid=f"GPU-{hostname}-{i}",
            product_name=flavor.display_name,
            memory_mib=81920,
        )
        for i in range(gpus)
    )
    return node


def make_cluster() -> Cluster:
    cohort = Cohort.objects.create(name="research")
    h100 = GpuFlavor.objects.create(
        name="h100-80gb",
        display_name="NVIDIA H100 80GB HBM3",
        product_names=["NVIDIA H100 80GB HBM3"],
        memory_mib=81559,
    )
    a100 = GpuFlavor.objects.create(
        name="a100-40gb",
        display_name="NVIDIA A100-SXM4-40GB",
        product_names=["NVIDIA A100-SXM4-40GB"],
        memory_mib=40960,
    )
    team_a = make_team("alpha", cohort=cohort, quotas={h100: 16, a100: 8})
    team_b = make_team("beta", cohort=cohort, quotas={h100: 16, a100: 8})
    queue_a = Queue.objects.create(team=team_a, name="default", max_runtime_seconds=24 * 3600)
    queue_b = Queue.objects.create(team=team_b, name="default", max_runtime_seconds=24 * 3600)
    nodes = [
        make_node(f"h100-{i}", h100, rack=f"r{1 + i // 2}", block=f"b{1 + i // 2}")
        for i in range(4)
    ]
    nodes += [make_node(f"a100-{i}", a100, rack="r3", block="b3") for i in range(2)]
    personas = Personas(
        lead_a=make_user("lead_a"),
        member_a=make_user("member_a"),
        viewer_a=make_user("viewer_a"),
        lead_b=make_user("lead_b"),
        admin=make_user("admin", staff=True),
    )
    Role = Membership.Role
    Membership.objects.bulk_create(
        [
            Membership(user=personas.lead_a, team=team_a, role=Role.LEAD),
            Membership(user=personas.member_a, team=team_a, role=Role.MEMBER),
            Membership(user=personas.viewer_a, team=team_a, role=Role.VIEWER),
            Membership(user=personas.lead_b, team=team_b, role=Role.LEAD),
        ]
    )
    return Cluster(cohort, h100, a100, team_a, team_b, queue_a, queue_b, nodes, personas)


def other_connection():
    """A second PostgreSQL connection beside Django's (autocommit): it sees only what
    is committed, and can act on Django's session from outside."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)
