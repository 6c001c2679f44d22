"""What a lead reads on each page, and what each page costs in queries.

Every page is asserted twice for its query count: with the story's handful of
jobs and with many more of every kind, so a per-row query (N+1) fails the test.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.core.models import Gpu, Job, Worker
from tests.dashboard.story import make_job, start

# Page → most queries it may make (session, user, team, role and switcher included).
PAGES = {
    "/teams/alpha/": 22,  # +2: GPU-hour budgets and their usage
    "/teams/alpha/?fragment=live": 17,
    "/teams/alpha/queue/": 18,
    "/teams/alpha/queue/?fragment=live": 17,
    "/teams/alpha/cluster/": 9,
    "/teams/alpha/cluster/?fragment=live": 8,
    "/teams/alpha/submit/": 12,
    "/teams/alpha/usage.csv": 7,  # +2: GPU-hour budgets and their usage
    "/tokens/": 6,
}
JOB_PAGE_QUERIES = 13  # the full page also reads the job's notify and its deliveries, a query each


def grow(story, n: int = 40) -> None:
    """Many more jobs of every kind: pending, running with GPUs and logs, preempted, finished."""
    c, now = story.cluster, story.now
    for i in range(n):
        make_job(c, c.team_a, c.personas.member_a, f"pending-{i}", now, flavor=c.a100)
        job = make_job(c, c.team_a, c.personas.lead_a, f"done-{i}", now, state=Job.State.SUCCEEDED)
        Job.objects.filter(pk=job.pk).update(
            admitted_at=now - timedelta(days=i % 50), finished_at=now - timedelta(days=i % 50)
        )
    spare = c.nodes[2]  # h100-2 has six free GPUs
    for i in range(6):
        running = make_job(
            c,
            c.team_a,
            c.personas.member_a,
            f"small-{i}",
            now,
            state=Job.State.RUNNING,
            admitted_at=now - timedelta(hours=1),
            started_at=now - timedelta(hours=1),
        )
        start(running, [(spare, [2 + i])], util=50, log="step 1\n")


@pytest.mark.parametrize("url, limit", PAGES.items())
def test_page_query_count_is_bounded_and_does_not_grow_with_jobs(
    story, login, django_assert_max_num_queries, url, limit
):
    client = login(story.cluster.personas.lead_a)
    client.get("/teams/alpha/")  # the session remembers the team: a write, once per switch
    with django_assert_max_num_queries(limit):
        assert client.get(url).status_code == 200
    grow(story)
    with django_assert_max_num_queries(limit):
        assert client.get(url).status_code == 200


@pytest.mark.parametrize("which", ["training", "ablation", "notebook"])
def test_job_page_query_count_is_bounded(story, login, django_assert_max_num_queries, which):
    client = login(story.cluster.personas.lead_a)
    job = getattr(story, which)
    client.get("/teams/alpha/")
    grow(story)
    for url in (f"/jobs/{job.pk}/", f"/jobs/{job.pk}/?fragment=live"):
        with django_assert_max_num_queries(JOB_PAGE_QUERIES):
            assert client.get(url).status_code == 200


def test_overview_shows_quota_gauges_standing_counts_and_idle_jobs(story, login):
    page = login(story.cluster.personas.lead_a).get("/teams/alpha/")
    gauges = {g.usage.flavor: g for g in page.context["gauges"]}
    h100 = gauges["h100-80gb"].usage
    assert (h100.nominal, h100.used, h100.borrowed, h100.pending_gpus) == (16, 18, 2, 12)
    assert gauges["a100-40gb"].usage.used == 0
    assert [(r.standing.team, r.is_self) for r in page.context["standing"]] == [
        ("beta", False),
        ("alpha", True),
    ]
    assert page.context["counts"]["pending"] == 3
    assert [j.name for j in page.context["idle"]] == ["notebook-debug"]
    html = page.content.decode()
    assert 'aria-valuenow="18"' in html and "notebook-debug" in html
    assert 'hx-trigger="every 5.0s"' in html


def test_overview_showback_and_waits_are_charted_from_the_reports(story, login):
    page = login(story.cluster.personas.lead_a).get("/teams/alpha/")
    usage = page.context["usage"]
    assert len(usage.days) == 30 and usage.flavors == ["a100-40gb", "h100-80gb"]
    assert usage.total > 0
    chart = page.context["usage_chart"]
    assert [s["label"] for s in chart["series"]] == usage.flavors
    assert page.context["waits"] and all(
        w["p90_wait_s"] >= w["median_wait_s"] for w in page.context["waits"]
    )
    html = page.content.decode()
    assert 'id="usage-data"' in html and "/static/vendor/chartjs/chart.umd.min.js" in html
    sources = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
    assert sources and all(src.startswith("/static/") for src in sources), sources


def test_usage_csv_has_one_row_per_day_with_flavor_columns_and_a_total(story, login):
    response = login(story.cluster.personas.lead_a).get("/teams/alpha/usage.csv")
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="alpha-gpu-hours-' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["date", "a100-40gb", "h100-80gb", "total"]
    assert len(rows) == 31
    assert rows[-1][0] == timezone.now().date().isoformat()
    for _, a100, h100, total in rows[1:]:
        assert abs(float(a100) + float(h100) - float(total)) < 0.02
    page = login(story.cluster.personas.lead_a).get("/teams/alpha/")
    assert float(rows[1][3]) == page.context["usage"].table()[0][2]


def test_usage_csv_days_parameter_is_clamped(story, login):
    client = login(story.cluster.personas.lead_a)
    assert len(client.get("/teams/alpha/usage.csv?days=7").content.decode().splitlines()) == 8
    assert len(client.get("/teams/alpha/usage.csv?days=0").content.decode().splitlines()) == 2
    assert len(client.get("/teams/alpha/usage.csv?days=x").content.decode().splitlines()) == 31


def test_queue_lists_pending_in_scheduler_order_with_who_is_ahead(story, login):
    page = login(story.cluster.personas.lead_a).get("/teams/alpha/queue/")
    rows = page.context["pending"]
    assert [(r.job.name, r.position, r.queue_size) for r in rows] == [
        ("resnet-ablation", 1, 3),
        ("vit-sweep", 2, 3),
        ("bert-finetune", 3, 3),
    ]
    assert [r.ahead.name if r.ahead else None for r in rows] == [
        None,
        "resnet-ablation",
        "vit-sweep",
    ]
    assert rows[1].estimate == "in 2 h 19 min" or rows[1].estimate == "in 2 h 20 min"
    html = page.content.decode()
    assert "team alpha uses 18 of 16 nominal" in html


def test_queue_pages_keep_positions_and_the_job_ahead_across_pages(story, login):
    c = story.cluster
    for i in range(60):
        make_job(
            c,
            c.team_a,
            c.personas.member_a,
            f"bulk-{i:02d}",
            story.now,
            submitted_at=story.now - timedelta(minutes=20) + timedelta(seconds=i),
        )
    client = login(c.personas.lead_a)
    first = client.get("/teams/alpha/queue/").context
    second = client.get("/teams/alpha/queue/?page=2").context
    assert len(first["pending"]) == 50 and first["pending"][-1].position == 50
    head = second["pending"][0]
    assert head.position == 51 and head.ahead == first["pending"][-1].job
    assert "page=2" in second["live_url"] and "fragment=live" in second["live_url"]


def test_queue_shows_running_jobs_with_nodes_and_elapsed_against_max_runtime(story, login):
    page = login(story.cluster.personas.lead_a).get("/teams/alpha/queue/")
    running = {r.job.name: r for r in page.context["running"]}
    training = running["llm-pretrain"]
    assert training.nodes == ["h100-0", "h100-1"]
    assert training.elapsed == "4 h 39 min" and training.max_runtime == "24 h"
    assert 19 < training.pct < 20
    assert running["notebook-debug"].idle and not training.idle


def test_job_page_tells_why_pending_who_is_ahead_and_who_preempted_it(story, login):
    page = login(story.cluster.personas.lead_a).get(f"/jobs/{story.sweep.pk}/")
    ahead = page.context["ahead"]
    assert ahead.position == 2 and [j.name for j in ahead.jobs] == ["resnet-ablation"]
    page = login(story.cluster.personas.lead_a).get(f"/jobs/{story.ablation.pk}/")
    (preemption,) = page.context["history"].preemptions
    assert preemption.reason == "reclaim" and preemption.preemptor_team == "beta"
    assert preemption.preemptor_name == ""  # another team's job name stays hidden
    kinds = [e.kind for e in page.context["history"].events]
    assert kinds == ["submitted", "admitted", "running", "preempted", "requeued"]
    staff = login(story.cluster.personas.admin).get(f"/jobs/{story.ablation.pk}/")
    assert staff.context["history"].preemptions[0].preemptor_name == "beta-diffusion"


def test_job_page_shows_allocation_and_logs_of_the_latest_attempt(story, login):
    page = login(story.cluster.personas.lead_a).get(f"/jobs/{story.training.pk}/")
    history = page.context["history"]
    assert [(w.worker.rank, w.worker.node.hostname, len(w.gpus)) for w in history.workers] == [
        (0, "h100-0", 8),
        (1, "h100-1", 8),
    ]
    html = page.content.decode()
    assert "rank 1 step  3550" in html
    assert "python train.py --config llm-pretrain.yaml" in html
    assert page.context["elapsed_s"]["max"] == "24 h"


def test_job_page_of_a_stopping_job_says_when_it_is_killed(story, login):
    """Preempted (or cancelled) with its workers still running: its checkpoint signal now,
    a kill after its grace period (Job.stops_by); a job not told to stop says nothing."""
    training = story.training
    told = timezone.now() - timedelta(seconds=5)
    Job.objects.filter(pk=training.pk).update(
        state=Job.State.PREEMPTING, stop_requested_at=told, grace_period_seconds=45
    )
    client = login(story.cluster.personas.lead_a)
    page = client.get(f"/jobs/{training.pk}/")
    assert page.context["stops_by"] == told + timedelta(seconds=45)
    html = page.content.decode()
    stamp = (told + timedelta(seconds=45)).strftime("%H:%M:%S")
    assert "then a kill after its grace period, by about <time datetime=" in html
    assert f">{stamp} UTC<" in html
    Worker.objects.filter(job=training).update(state=Worker.State.EXITED)
    assert client.get(f"/jobs/{training.pk}/").context["stops_by"] is None  # all stopped
    assert 'id="stops-by"' not in client.get(f"/jobs/{story.sweep.pk}/").content.decode()


def test_live_fragment_is_only_the_polled_region(story, login):
    client = login(story.cluster.personas.lead_a)
    fragment = client.get("/teams/alpha/queue/?fragment=live").content.decode()
    assert fragment.lstrip().startswith('<div id="live"')
    assert "<html" not in fragment and "resnet-ablation" in fragment
    finished = client.get(f"/jobs/{story.training.pk}/?fragment=live").content.decode()
    assert "hx-trigger" in finished
    Job.objects.filter(pk=story.training.pk).update(
        state=Job.State.CANCELLED, finished_at=timezone.now()
    )
    stopping = client.get(f"/jobs/{story.training.pk}/?fragment=live").content.decode()
    assert "hx-trigger" in stopping  # its workers still hold the GPUs
    Worker.objects.filter(job=story.training).update(state=Worker.State.EXITED)
    ended = client.get(f"/jobs/{story.training.pk}/?fragment=live").content.decode()
    assert "hx-trigger" not in ended  # a finished job whose workers stopped stops polling


def test_cluster_colours_each_gpu_and_hides_other_teams_job_names(story, login):
    page = login(story.cluster.personas.lead_a).get("/teams/alpha/cluster/")
    racks = dict(page.context["racks"])
    assert sorted(racks) == ["r1", "r2", "r3"]
    cards = {card.node.hostname: card for cards in racks.values() for card in cards}
    assert {c.state for c in cards["h100-0"].cells} == {"ours"}
    beta_cell = cards["h100-3"].cells[0]
    assert (beta_cell.state, beta_cell.team, beta_cell.job_name) == ("other", "beta", "")
    assert [c.state for c in cards["h100-2"].cells[:3]] == ["ours", "ours", "free"]
    assert cards["h100-2"].cells[0].idle
    assert cards["a100-0"].cells[7].state == "unhealthy"
    assert {c.state for c in cards["a100-1"].cells} == {"unschedulable"}
    assert cards["a100-1"].state_label == "not ready"
    assert cards["h100-spare"].node.state == "cordoned"
    summary = {s.flavor: s for s in page.context["summary"]}
    h100 = summary["h100-80gb"]
    assert (h100.total, h100.free, h100.ours, h100.other, h100.idle) == (40, 6, 18, 8, 2)
    assert (summary["a100-40gb"].unhealthy, summary["a100-40gb"].nodes_down) == (1, 1)
    Gpu.objects.filter(allocations__job=story.beta_train).update(utilization_pct=1)
    Job.objects.filter(pk=story.beta_train.pk).update(started_at=timezone.now())
    fresh = login(story.cluster.personas.lead_a).get("/teams/alpha/cluster/").context["racks"]
    beta_cells = {c.node.hostname: c for cs in dict(fresh).values() for c in cs}["h100-3"].cells
    assert not any(c.idle for c in beta_cells)  # just started: within the grace period
    staff = login(story.cluster.personas.admin).get("/teams/alpha/cluster/")
    staff_cards = {c.node.hostname: c for cs in dict(staff.context["racks"]).values() for c in cs}
    assert staff_cards["h100-3"].cells[0].job_name == "beta-diffusion"


def test_home_opens_the_last_team_and_staff_switch_between_all_teams(story, login):
    client = login(story.cluster.personas.admin)
    assert client.get("/").url == "/teams/alpha/"
    client.get("/teams/beta/queue/")
    assert client.get("/").url == "/teams/beta/"
    switch = client.get("/teams/beta/queue/").context["switch_teams"]
    assert [(t.slug, url) for t, url in switch] == [("alpha", "/teams/alpha/queue/")]


def test_user_in_no_team_gets_a_friendly_page(db, client):
    from tests.factories import make_user

    client.force_login(make_user("newcomer"))
    response = client.get("/")
    assert response.status_code == 200 and b"not in a team yet" in response.content


def test_a_token_whose_teams_are_gone_is_not_listed_as_reaching_all_teams(story, login):
    """A scoped token whose teams are all deleted reaches none (ApiToken.scoped): the
    list said "all your teams" (a review's case)."""
    from portal.core.actions.tokens import create_api_token
    from portal.core.models import Membership
    from tests.factories import make_team

    lead = story.cluster.personas.lead_a
    sandbox = make_team("sandbox", cohort=story.cluster.cohort)
    Membership.objects.create(user=lead, team=sandbox, role=Membership.Role.LEAD)
    token, _ = create_api_token(lead, name="ci", teams=[sandbox])
    sandbox.delete()
    page = login(lead).get("/tokens/").content.decode()
    row = page[page.index(token.prefix) :]
    row = row[: row.index("</tr>")]
    assert "all your teams" not in row and "no team" in row, row
