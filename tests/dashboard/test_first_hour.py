"""What a new team lead hit in the first hour (issue 16), each pinned by a test.

Why pending with what would change it; where a user lands and what "(you)"
means for staff; overcommitted quotas; the job page's counts, logs and command.
"""

from __future__ import annotations

import shlex

import pytest

from berthcli import output as cli_output
from portal.core.models import Job, Membership, Quota, Worker
from portal.dashboard.format import command_line
from portal.dashboard.queries import LOG_TAIL_LINES
from portal.dashboard.shortcuts import TEAM_COOKIE
from tests.dashboard.story import make_job
from tests.factories import make_team

Role = Membership.Role


# --- 4: why pending, and what would change it ----------------------------------------


def test_queue_and_job_page_say_what_would_change_a_pending_jobs_wait(story, login):
    client = login(story.cluster.personas.lead_a)
    queue = client.get("/teams/alpha/queue/").content.decode()
    quota_hint = "Your team&#x27;s running jobs finishing, a smaller gang, or more quota"
    assert "What would change it:" in queue and quota_hint in queue
    job = client.get(f"/jobs/{story.sweep.pk}/").content.decode()
    assert "What would change it:" in job and quota_hint in job
    running = client.get(f"/jobs/{story.training.pk}/").content.decode()
    assert "What would change it" not in running  # only pending jobs wait


def test_a_job_no_pass_has_seen_yet_is_told_the_next_pass_decides(story, login):
    c = story.cluster
    fresh = make_job(c, c.team_a, c.personas.lead_a, "fresh", story.now)
    html = login(c.personas.lead_a).get(f"/jobs/{fresh.pk}/").content.decode()
    assert "Nothing: the next scheduling pass" in html


# --- 5: landing team, "(you)" ---------------------------------------------------------


@pytest.mark.parametrize("persona", ["lead_a", "member_a"])
def test_users_land_on_a_team_they_lead_or_work_in_not_one_they_only_view(cluster, client, persona):
    # 'aaa' sorts first, but they only view it: a lead lands where she leads, a member
    # where he is a member.
    viewed = make_team("aaa", cohort=cluster.cohort)
    user = getattr(cluster.personas, persona)
    Membership.objects.create(user=user, team=viewed, role=Role.VIEWER)
    client.force_login(user)
    assert client.get("/").url == "/teams/alpha/"


def test_the_last_team_opened_is_remembered_across_logout(cluster, client):
    viewed = make_team("aaa", cohort=cluster.cohort)
    lead = cluster.personas.lead_a
    Membership.objects.create(user=lead, team=viewed, role=Role.VIEWER)
    client.force_login(lead)
    assert client.get("/teams/aaa/").status_code == 200
    assert TEAM_COOKIE in client.cookies
    client.post("/logout/")
    client.force_login(lead)
    assert client.get("/").url == "/teams/aaa/"
    # Someone else logging in on the same browser is not sent to her team.
    client.post("/logout/")
    client.force_login(cluster.personas.lead_b)
    assert client.get("/").url == "/teams/beta/"


def test_staff_are_not_you_in_a_team_they_do_not_belong_to(story, login):
    staff = login(story.cluster.personas.admin)
    overview = staff.get("/teams/alpha/").content.decode()
    assert "(you)" not in overview and "(this team)" in overview
    assert "(you)" not in staff.get("/teams/alpha/cluster/").content.decode()
    lead = login(story.cluster.personas.lead_a).get("/teams/alpha/").content.decode()
    assert "(you)" in lead


# --- 12: nominal quotas above the cluster's GPUs ---------------------------------------


def test_overcommitted_quotas_warn_on_the_overview_and_in_the_admin(story, login):
    c = story.cluster
    lead = login(c.personas.lead_a)
    assert 'id="overcommit"' not in lead.get("/teams/alpha/").content.decode()
    Quota.objects.filter(team=c.team_a, flavor=c.h100).update(nominal=40)
    html = lead.get("/teams/alpha/").content.decode()
    assert 'id="overcommit"' in html
    # 40 + 16 nominal against the 40 H100s of the story's five nodes.
    assert "h100-80gb: the teams&#x27; nominal quotas add up to 56 GPUs" in html
    assert "cluster has 40" in html and "a100-40gb: the teams" not in html
    admin = login(c.personas.admin)
    for url in ("/admin/core/quota/", f"/admin/core/team/{c.team_a.pk}/change/"):
        messages = [str(m) for m in admin.get(url).context["messages"]]
        assert any("add up to 56 GPUs" in m for m in messages), url


# --- 13: the job page -----------------------------------------------------------------


def test_one_event_is_not_one_events(story, login):
    c = story.cluster
    fresh = make_job(c, c.team_a, c.personas.lead_a, "fresh", story.now)
    html = login(c.personas.lead_a).get(f"/jobs/{fresh.pk}/").content.decode()
    assert ">1 event<" in html and "1 events" not in html


def test_log_box_keeps_a_tail_and_shows_all_on_request(story, login):
    lines = [f"step {i}" for i in range(200)]
    Worker.objects.filter(job=story.training, rank=0).update(log_tail="\n".join(lines) + "\n")
    html = login(story.cluster.personas.lead_a).get(f"/jobs/{story.training.pk}/").content.decode()
    tail = html.split('class="log log-tail" data-rank="0">')[1].split("</pre>")[0]
    assert tail.splitlines() == lines[-LOG_TAIL_LINES:]
    assert "Show all 200 lines" in html and "step 0\n" in html  # the whole log, folded


def test_command_is_shown_as_typed_not_with_shell_quote_soup(story, login):
    argv = ["python", "-c", "print('hello world')"]
    Job.objects.filter(pk=story.training.pk).update(command=argv)
    html = login(story.cluster.personas.lead_a).get(f"/jobs/{story.training.pk}/").content.decode()
    assert "python -c &quot;print(&#x27;hello world&#x27;)&quot;" in html
    assert "&#x27;&quot;&#x27;&quot;&#x27;" not in html


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "train.py", "--lr", "3e-4"],
        ["python", "-c", "print('hi')"],
        ["sh", "-c", 'echo "$HOME" it\'s'],
        ["echo", "a b", "", 'back\\slash "and" quote\'s'],
        ["python3", "-c", "import os\nprint(f'rank {os.environ[\"RANK\"]}')"],
        ["echo", "it's done!"],
    ],
)
def test_command_line_parses_back_to_the_same_argv(argv):
    line = command_line(argv)
    assert shlex.split(line) == argv
    assert "'\"'\"'" not in line or set("$!") & set("".join(argv))
    assert cli_output.command_line(argv) == line  # `berth status` shows the same line


# --- 10: names and image references as an engine takes them; all errors in one round ---


def test_form_reports_parse_and_range_errors_in_one_round(story, login):
    from tests.dashboard.test_permissions import valid_form

    client = login(story.cluster.personas.member_a)
    response = client.post(
        "/teams/alpha/submit/",
        valid_form(
            name="x" * 130 + " with spaces",
            image="not an image ref !!",
            env="NOT A PAIR",  # a parse error
            max_runtime_seconds="soon",  # a parse error
            workers="0",  # a range error
            priority="5000",  # a range error
        ),
    )
    errors = response.context["form"].errors
    assert {"name", "image", "env", "max_runtime_seconds", "workers", "priority"} <= set(errors)
    assert "At most 63 characters" in " ".join(errors["name"])
    assert "no spaces" in " ".join(errors["name"])
    assert "Not an image reference" in " ".join(errors["image"])
    assert not Job.objects.filter(image="not an image ref !!").exists()


@pytest.mark.parametrize(
    "image, ok",
    [
        ("python:3.11", True),
        ("busybox", True),
        ("nvcr.io/nvidia/pytorch:24.01-py3", True),
        ("localhost:5000/team/img@sha256:" + "a" * 64, True),
        ("not an image ref !!", False),
        ("ghcr.io/Acme/trainer:1", False),  # repository path in upper case
        ("python:", False),
        ("a//b", False),
        ("img@sha256:abc", False),  # digest too short
        ("python:3.11\n", False),
    ],
)
def test_image_reference_grammar(image, ok):
    from portal.core.jobspec import IMAGE_REFERENCE

    assert bool(IMAGE_REFERENCE.match(image)) is ok
