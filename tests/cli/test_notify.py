"""`berth submit --notify URL --notify-on EVENTS --mail` (Slurm's --mail-type), shown by
`berth status`; a refused URL is the API's 400 with the field named."""

from __future__ import annotations

from berthcli import exitcodes
from portal.core.models import Job, JobNotify
from tests.cli.test_cli import JOB

HOOK = "https://hooks.example.com/ci"


def test_submit_with_notify_and_mail_and_status_shows_it(berth, logged_in, personas):
    logged_in(personas.member_a)
    result = berth(
        "submit", *JOB, "--notify", HOOK, "--notify-on", "failed,ended", "--mail", "--", "x"
    )
    assert result.code == 0, result.err
    job = Job.objects.get()
    assert JobNotify.objects.get(job=job).as_dict() == {
        "url": HOOK,
        "on": ["failed", "ended"],
        "email": True,
    }
    status = berth("status", job.pk)
    assert f"Notify:      {HOOK} and e-mail on failed, ended" in status.out


def test_a_private_notify_url_is_refused_with_the_field_named(berth, logged_in, personas):
    logged_in(personas.member_a)
    result = berth("submit", *JOB, "--notify", "http://127.0.0.1:8080/hook", "--", "x")
    assert result.code == exitcodes.REFUSED, result.err
    assert "notify.url" in result.err and "loopback" in result.err
    assert not Job.objects.exists()


def test_notify_on_without_a_target_says_what_is_missing(berth, logged_in, personas):
    logged_in(personas.member_a)
    result = berth("submit", *JOB, "--notify-on", "started", "--", "x")
    assert result.code == exitcodes.REFUSED
    assert "Name a url, or set email to true" in result.err
