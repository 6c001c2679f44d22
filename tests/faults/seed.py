"""Fill a scenario's database through the product's own actions; run as a subprocess
(`python -m tests.faults.seed`, the JSON spec on stdin) with DATABASE_URL set, so the
test process never needs a Django connection to the system under test.

Spec (every key optional):

    {"teams": [{"slug": "t0", "nominal": 64, "borrowing_limit": null,
                "max_pending": 100000, "max_restarts": 3}],
     "nodes": {"count": 100, "gpus": 8, "per_rack": 16},   # registered, ready, no agent
     "pending": {"count": 5000, "shapes": [[1, 1], [1, 8], [2, 8]], "seed": 7},
     "bootstrap": true,                                    # a node bootstrap token
     "measure_pass": true}                                 # time one pass, rolled back

Prints one JSON line: {"tokens": {slug: api_token}, "bootstrap": …, "pass_ms": …,
"pending": n}.
"""

from __future__ import annotations

import json
import os
import random
import sys

PRODUCT = "NVIDIA H100 80GB HBM3"
FLAVOR = "h100-80gb"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    spec = json.loads(sys.stdin.read() or "{}")
    out: dict = {}
    flavor = _flavor()
    teams = _teams(spec.get("teams", []), flavor, out)
    if spec.get("nodes"):
        _nodes(flavor, **spec["nodes"])
    if spec.get("bootstrap"):
        out["bootstrap"] = _bootstrap()
    if spec.get("pending"):
        out["pending"] = _pending(teams, **spec["pending"])
    if spec.get("measure_pass"):
        out["pass_ms"] = _measure_pass()
    print(json.dumps(out))


class _Undo(Exception):
    pass


def _measure_pass() -> float:
    """Milliseconds of one full pass (writes included), rolled back afterwards."""
    from django.db import transaction

    from portal.core.scheduling import run_pass

    took = 0.0
    try:
        with transaction.atomic():
            took = run_pass().duration_ms
            raise _Undo
    except _Undo:
        pass
    return took


def _flavor():
    from portal.core.models import GpuFlavor

    return GpuFlavor.objects.create(
        name=FLAVOR, display_name=PRODUCT, product_names=[PRODUCT], memory_mib=81559
    )


def _teams(specs: list[dict], flavor, out: dict) -> list:
    from django.contrib.auth import get_user_model

    from portal.core.actions.tokens import create_api_token
    from portal.core.models import Cohort, Membership, Queue, Quota, Team

    cohort = Cohort.objects.create(name="faults")
    teams, out["tokens"] = [], {}
    for t in specs:
        team = Team.objects.create(slug=t["slug"], name=t["slug"].title(), cohort=cohort)
        Quota.objects.create(
            team=team,
            flavor=flavor,
            nominal=t.get("nominal", 64),
            borrowing_limit=t.get("borrowing_limit"),
        )
        Queue.objects.create(
            team=team,
            name="default",
            max_pending_jobs=t.get("max_pending", 100_000),
            max_restarts=t.get("max_restarts", 3),
        )
        user = get_user_model().objects.create_user(f"ci-{team.slug}", password=None)
        Membership.objects.create(user=user, team=team, role=Membership.Role.LEAD)
        out["tokens"][team.slug] = create_api_token(user, name="faults")[1]
        teams.append(team)
    return teams


def _nodes(flavor, count: int, gpus: int = 8, per_rack: int = 16) -> None:
    from django.utils import timezone

    from portal.core.models import Gpu, Node

    nodes = Node.objects.bulk_create(
        Node(
            hostname=f"n{i:04d}",
            flavor=flavor,
            rack=f"r{i // per_rack}",
            block=f"b{i // per_rack}",
            condition=Node.Condition.READY,
            last_heartbeat_at=timezone.now(),
        )
        for i in range(count)
    )
    Gpu.objects.bulk_create(
        Gpu(node=n, index=g, uuid=f"GPU-{n.hostname}-{g}", product_name=PRODUCT, memory_mib=81559)
        for n in nodes
        for g in range(gpus)
    )


def _bootstrap() -> str:
    from portal.core.actions.nodes import issue_bootstrap_token

    # The fault suites' simulated clusters (sim-NNNN) and agents (node-x) register with it.
    _, plaintext = issue_bootstrap_token(
        acting_user=None, description="fault suite", hostname_pattern="*", max_uses=10_000
    )
    return plaintext


def _pending(teams: list, count: int, shapes: list, seed: int = 7, chunk: int = 1000) -> int:
    """Pending jobs submitted with the bulk action (the API's bulk path without HTTP)."""
    from portal.core.actions.jobs import submit_jobs
    from portal.core.jobspec import SpecLookups, clean_job_spec

    rng = random.Random(seed)
    lookups = {team.pk: SpecLookups(team) for team in teams}
    by_team: dict[int, list] = {team.pk: [] for team in teams}
    for i in range(count):
        team = teams[i % len(teams)]
        workers, per = rng.choice(shapes)
        data = {
            "name": f"seed-{i}",
            "image": "none",
            "command": ["true"],
            "flavor": FLAVOR,
            "workers": workers,
            "gpus_per_worker": per,
            "priority": rng.choice([0, 0, 0, 10]),
            "max_runtime_seconds": 3600,
        }
        by_team[team.pk].append(clean_job_spec(team, data, lookups[team.pk]))
    user_of = {team.pk: team.memberships.first().user for team in teams}
    for team in teams:
        specs = by_team[team.pk]
        for start in range(0, len(specs), chunk):
            submit_jobs(team=team, specs=specs[start : start + chunk], user=user_of[team.pk])
    return count


if __name__ == "__main__":
    main()
