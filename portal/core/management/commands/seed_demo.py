"""Seed the zero-setup demo: 3 teams in a cohort, 2 GPU flavors, users with
printed passwords, a bootstrap token for the simulated agents, a few jobs.

Idempotent: a second run changes nothing and prints the same logins.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from portal.core.actions.jobs import submit_job
from portal.core.actions.nodes import issue_bootstrap_token
from portal.core.actions.quota import set_quota
from portal.core.jobspec import clean_job_spec
from portal.core.models import Cohort, GpuFlavor, Membership, Queue, Team

FLAVORS = [
    ("h100-80gb", "NVIDIA H100 80GB HBM3", 81559),
    ("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960),
]
TEAMS = [
    # slug, name, weight, {flavor: nominal}
    ("vision", "Vision", 1.0, {"h100-80gb": 16, "a100-40gb": 4}),
    ("nlp", "Language", 2.0, {"h100-80gb": 12, "a100-40gb": 4}),
    ("speech", "Speech", 1.0, {"h100-80gb": 4, "a100-40gb": 8}),
]
USERS = [
    # username, staff, [(team, role)]
    ("admin", True, []),
    ("alice", False, [("vision", "lead"), ("nlp", "viewer")]),
    ("bob", False, [("vision", "member")]),
    ("carol", False, [("nlp", "lead")]),
    ("dave", False, [("speech", "lead")]),
]
JOBS = [
    (
        "vision",
        "bob",
        {"name": "resnet-sweep-1", "workers": 1, "gpus_per_worker": 4, "flavor": "h100-80gb"},
    ),
    (
        "vision",
        "alice",
        {"name": "vit-large", "workers": 2, "gpus_per_worker": 8, "flavor": "h100-80gb"},
    ),
    (
        "nlp",
        "carol",
        {"name": "llm-pretrain", "workers": 2, "gpus_per_worker": 8, "flavor": "h100-80gb"},
    ),
    (
        "nlp",
        "carol",
        {"name": "tokenizer-eval", "workers": 1, "gpus_per_worker": 1, "flavor": "a100-40gb"},
    ),
    (
        "speech",
        "dave",
        {"name": "whisper-ft", "workers": 1, "gpus_per_worker": 2, "flavor": "a100-40gb"},
    ),
]
# A demo job's command: prints progress and finishes in about a minute.
DEMO_COMMAND = [
    "python3",
    "-c",
    'import os,time\nfor s in range(12):\n    print(f\'rank {os.environ["RANK"]}/{os.environ["WORLD_SIZE"]} step {s}\', flush=True)\n    time.sleep(5)',
]


class Command(BaseCommand):
    help = "Create the demo teams, users, quotas, bootstrap token and a few jobs (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--no-jobs", action="store_true", help="Do not submit the demo jobs.")

    def handle(self, *args, no_jobs=False, **options):
        state_file = Path(settings.VAR_DIR) / "demo.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        with transaction.atomic():
            admin = self._users(state)
            self._teams(admin)
            if "bootstrap_token" not in state:
                state["bootstrap_token"] = self._bootstrap_token(admin)
            if not no_jobs and not state.get("jobs_submitted"):
                self._jobs()
                state["jobs_submitted"] = True
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(state, indent=2))
        state_file.chmod(0o600)
        for username, password in state["passwords"].items():
            self.stdout.write(f"  {username:<6} {password}")

    def _users(self, state):
        User = get_user_model()
        passwords = state.setdefault("passwords", {})
        for username, staff, _ in USERS:
            if User.objects.filter(username=username).exists():
                continue
            passwords[username] = secrets.token_urlsafe(9)
            User.objects.create_user(
                username=username,
                password=passwords[username],
                email=f"{username}@example.com",
                is_staff=staff,
                is_superuser=staff,
            )
        return User.objects.get(username="admin")

    def _teams(self, admin):
        cohort, _ = Cohort.objects.get_or_create(
            name="research", defaults={"description": "All research teams"}
        )
        for name, display, memory in FLAVORS:
            GpuFlavor.objects.get_or_create(
                name=name,
                defaults={
                    "display_name": display,
                    "product_names": [display],
                    "memory_mib": memory,
                },
            )
        for slug, name, weight, quotas in TEAMS:
            team, created = Team.objects.get_or_create(
                slug=slug, defaults={"name": name, "weight": weight, "cohort": cohort}
            )
            Queue.objects.get_or_create(
                team=team, name="default", defaults={"max_runtime_seconds": 24 * 3600}
            )
            Queue.objects.get_or_create(
                team=team,
                name="urgent",
                defaults={
                    "default_priority": 100,
                    "preemptible_default": False,
                    "max_runtime_seconds": 4 * 3600,
                    "max_pending_jobs": 10,
                },
            )
            if created:
                for flavor, nominal in quotas.items():
                    set_quota(
                        team,
                        GpuFlavor.objects.get(name=flavor),
                        nominal=nominal,
                        acting_user=admin,
                        note="demo seed",
                    )
        User = get_user_model()
        for username, _, memberships in USERS:
            for slug, role in memberships:
                Membership.objects.get_or_create(
                    user=User.objects.get(username=username),
                    team=Team.objects.get(slug=slug),
                    defaults={"role": role},
                )

    def _bootstrap_token(self, admin) -> str:
        """One registration for each simulated node (portal.devstack), and only for them."""
        from portal.devstack import DEMO_NODES

        _, plaintext = issue_bootstrap_token(
            acting_user=admin,
            description="demo agents",
            hostname_pattern="demo-*",
            max_uses=len(DEMO_NODES),
        )
        return plaintext

    def _jobs(self):
        User = get_user_model()
        for slug, username, fields in JOBS:
            team = Team.objects.get(slug=slug)
            spec = clean_job_spec(
                team,
                {
                    "image": "python:3.11",
                    "command": DEMO_COMMAND,
                    "max_runtime_seconds": 600,
                    **fields,
                },
            )
            submit_job(team=team, spec=spec, user=User.objects.get(username=username))
