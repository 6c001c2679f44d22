"""Seed the zero-setup demo: 3 teams in a cohort, 2 GPU flavors, users with
printed passwords, a bootstrap token for the simulated agents, 30 days of
finished jobs (portal.whatif.demo) and a few jobs running or waiting now.

Idempotent: a second run changes nothing and prints the same logins.
"""

from __future__ import annotations

import json
import random
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from portal.core.actions.budgets import set_budget
from portal.core.actions.history import import_finished_jobs
from portal.core.actions.jobs import submit_job
from portal.core.actions.nodes import issue_bootstrap_token
from portal.core.actions.quota import set_quota
from portal.core.jobspec import clean_job_spec
from portal.core.models import Cohort, GpuFlavor, Membership, Queue, Team
from portal.whatif import demo, history

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
# slug -> [(flavor, soft, limit GPU-hours per month)]: high enough that the demo's
# jobs never wait for it, so the overview shows the gauge without changing the story.
BUDGETS = {"vision": [("h100-80gb", 6000.0, 20000.0)]}
USERS = [
    # username, staff, [(team, role)]
    ("admin", True, []),
    ("alice", False, [("vision", "lead"), ("nlp", "viewer")]),
    ("bob", False, [("vision", "member")]),
    ("carol", False, [("nlp", "lead")]),
    ("dave", False, [("speech", "lead")]),
]
# (team, user, fields, command): the jobs running or waiting when the demo opens.
# Long jobs train for hours; short ones finish in about a minute; two hold GPUs and
# leave them idle (the fake NVML backend reads BERTH_FAKE_UTILIZATION), so the
# idle-GPU card has something to flag once they are past its 10-minute grace.
IDLE = {"BERTH_FAKE_UTILIZATION": "3"}
JOBS = [
    ("vision", "alice", {"name": "vit-large", "workers": 2, "gpus_per_worker": 8}, "long"),
    ("nlp", "carol", {"name": "llm-pretrain", "workers": 2, "gpus_per_worker": 8}, "long"),
    ("vision", "bob", {"name": "resnet-sweep-1", "workers": 1, "gpus_per_worker": 4}, "short"),
    ("nlp", "carol", {"name": "tokenizer-eval", "flavor": "a100-40gb"}, "short"),
    (
        "speech",
        "dave",
        {"name": "whisper-ft", "flavor": "a100-40gb", "gpus_per_worker": 4},
        "long",
    ),
    (
        "vision",
        "bob",
        {"name": "notebook-debug", "flavor": "a100-40gb", "gpus_per_worker": 2, "env": IDLE},
        "idle",
    ),
    (
        "speech",
        "dave",
        {"name": "tts-demo-server", "flavor": "a100-40gb", "env": IDLE},
        "idle",
    ),
]
# Commands by kind: print progress; "short" ends in about a minute, the others run for hours.
_STEPS = (
    "import os,time\n"
    "r, w = os.environ['RANK'], os.environ['WORLD_SIZE']\n"
    "for s in range({steps}):\n"
    "    print(f'rank {{r}}/{{w}} step {{s}} loss {{2.5 * 0.999 ** s:.3f}}', flush=True)\n"
    "    time.sleep({pause})"
)
COMMANDS = {
    "short": (["python3", "-c", _STEPS.format(steps=12, pause=5)], 600),
    "long": (["python3", "-c", _STEPS.format(steps=1400, pause=10)], 4 * 3600),
    "idle": (["python3", "-c", _STEPS.format(steps=480, pause=30)], 4 * 3600),
}


class Command(BaseCommand):
    help = "Create the demo teams, users, quotas, bootstrap token and a few jobs (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-jobs",
            action="store_true",
            help="Do not seed the 30 days of finished jobs nor submit the demo jobs.",
        )

    def handle(self, *args, no_jobs=False, **options):
        state_file = Path(settings.VAR_DIR) / "demo.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        with transaction.atomic():
            admin = self._users(state)
            self._teams(admin)
            if "bootstrap_token" not in state:
                state["bootstrap_token"] = self._bootstrap_token(admin)
            if not no_jobs and not state.get("history_seeded"):
                self._history(admin)
                state["history_seeded"] = True
            if not no_jobs and not state.get("jobs_submitted"):
                self._jobs()
                state["jobs_submitted"] = True
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(state, indent=2))
        state_file.chmod(0o600)
        for line in login_lines(state["passwords"]):
            self.stdout.write(line)

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
                for flavor, soft, limit in BUDGETS.get(slug, ()):
                    set_budget(
                        team,
                        GpuFlavor.objects.get(name=flavor),
                        acting_user=admin,
                        soft_gpu_hours=soft,
                        limit_gpu_hours=limit,
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

    def _history(self, admin) -> None:
        """30 days of finished jobs: a Philly slice replayed on the demo's cluster."""
        now = timezone.now()
        nodes, teams = demo.cluster_nodes(), history.cluster_teams()
        rng = random.Random(16)
        jobs = demo.trace_jobs(teams, now.timestamp() - 3600, rng)
        replayed = demo.replay(jobs, nodes, teams)
        users = {
            slug: [
                u for u, _, teams in USERS for t, role in teams if t == slug and role != "viewer"
            ]
            for slug, *_ in TEAMS
        }
        finished = demo.finished_jobs(replayed, users, now.timestamp(), rng)
        import_finished_jobs(
            finished,
            acting_user=admin,
            now=now,
            half_life=settings.BERTH["FAIRSHARE_HALF_LIFE_S"],
        )

    def _jobs(self):
        User = get_user_model()
        for slug, username, fields, kind in JOBS:
            team = Team.objects.get(slug=slug)
            command, max_runtime = COMMANDS[kind]
            spec = clean_job_spec(
                team,
                {
                    "image": "python:3.11",
                    "command": command,
                    "max_runtime_seconds": max_runtime,
                    "flavor": "h100-80gb",
                    **fields,
                },
            )
            submit_job(team=team, spec=spec, user=User.objects.get(username=username))


def login_lines(passwords: dict[str, str]) -> list[str]:
    """One line per demo login: user, password, and what the user is in the demo
    (staff, or each team with the role), so a visitor knows whom to log in as."""
    rank = {role: i for i, role in enumerate(Membership.Role.values)}  # lead, member, viewer
    rows = Membership.objects.filter(user__username__in=list(passwords)).values_list(
        "user__username", "team__slug", "role"
    )
    roles: dict[str, list[str]] = {}
    for username, team, role in sorted(rows, key=lambda r: (rank.get(r[2], 9), r[1])):
        roles.setdefault(username, []).append(f"{role} of {team}")
    staff = set(
        get_user_model()
        .objects.filter(username__in=list(passwords), is_staff=True)
        .values_list("username", flat=True)
    )
    width = max(map(len, passwords), default=0)
    lines = []
    for username, password in passwords.items():
        what = roles.get(username, [])
        if username in staff:
            what.insert(0, "staff: every team and the admin site")
        lines.append(f"  {username:<{width}}  {password:<12}  {', '.join(what) or 'no team'}")
    return lines
