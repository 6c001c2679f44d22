"""A Content-Security-Policy for every page, and templates that keep it (issue 18 item 12)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(
    [*ROOT.joinpath("templates").rglob("*.html"), *ROOT.joinpath("portal").rglob("*.html")]
)
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/(?:ld\+)?json)[^>]*>", re.I)
HANDLER_ATTR = re.compile(r"\son[a-z]+\s*=", re.I)
STYLE_ATTR = re.compile(r"\sstyle\s*=", re.I)


def _policy(response) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


@pytest.mark.parametrize("path", ["/login/", "/tokens/", "/teams/alpha/", "/api/docs/"])
def test_pages_carry_a_policy_without_inline_scripts_or_eval(path, story, login):
    client = Client() if path == "/login/" else login(story.cluster.personas.lead_a)
    response = client.get(path)
    assert response.status_code == 200
    policy = _policy(response)
    assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy["default-src"] + policy["script-src"] + policy["style-src"]
    assert "style-src-attr" not in policy and "style-src-elem" not in policy
    assert "unsafe" not in response["Content-Security-Policy"]


def test_json_answers_carry_no_page_policy(story, login):
    response = login(story.cluster.personas.lead_a).get("/api/v1/me/")
    assert "Content-Security-Policy" not in response


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_template_has_an_inline_script_style_element_or_handler(template):
    html = template.read_text()
    assert not INLINE_SCRIPT.search(html), "move the script to a static file"
    assert "<style" not in html.lower(), "move the styles to a static style sheet"
    assert not HANDLER_ATTR.search(html), "attach the handler from a static script"
    assert not STYLE_ATTR.search(html), "use a class (dashboard.css; pct.css for percentages)"


def test_percentages_are_classes_that_pct_css_defines():
    from portal.dashboard.templatetags.berth_pct import CSS_FILE, css, pct

    assert CSS_FILE.read_text() == css(), "run python -m portal.dashboard.templatetags.berth_pct"
    assert pct(37.4, "w") == "w-37" and pct("62.5", "l") == "l-62"
    assert pct(180, "w") == "w-100" and pct(-3, "ring-over") == "ring-over-0"
    assert pct(None, "w") == "w-0" and pct(float("nan"), "w") == "w-0"
    for prefix, prop in (("w", "width"), ("l", "left"), ("ring-in", "--within")):
        assert f".{prefix}-0 {{ {prop}: 0% !important; }}" in css()
        assert f".{prefix}-100 {{ {prop}: 100% !important; }}" in css()


def test_a_page_shows_its_bars_as_classes(story, login):
    page = login(story.cluster.personas.lead_a).get("/teams/alpha/").content.decode()
    assert "style=" not in page
    bars = re.findall(r'class="(?:[^"]*\s)?(w-\d+|ring-in-\d+)', page)
    assert bars, "the overview draws its quota ring or bars with pct classes"
    assert all(0 <= int(b.rsplit("-", 1)[1]) <= 100 for b in bars)


def test_htmx_runs_without_eval_or_script_tags():
    base = (ROOT / "templates" / "base.html").read_text()
    config = re.search(r'<meta name="htmx-config" content=\'([^\']+)\'', base)
    assert config is not None
    assert '"allowEval": false' in config.group(1)
    assert '"allowScriptTags": false' in config.group(1)
