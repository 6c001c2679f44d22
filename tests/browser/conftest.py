"""Playwright against the live server: Debian's Chromium, never a downloaded build.

pytest-playwright provides `browser` / `page`; these fixtures point it at
/usr/bin/chromium (BERTH_CHROMIUM overrides), make live updates poll every
second, log personas in through the real login form and save screenshots
under test-artifacts/screenshots/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.factories import PASSWORD

# Playwright's sync API runs an event loop in the test thread; the ORM calls the
# tests make between browser steps are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("BERTH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "headless": True,
        "args": CHROMIUM_ARGS,
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {
        **browser_context_args,
        "viewport": {"width": 1360, "height": 900},
        "timezone_id": "UTC",
        "locale": "en-GB",
    }


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The personas' passwords are hashed once per test; PBKDF2 would dominate the run."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fast_polling(settings):
    """Live fragments refresh every second, so a test sees a change within a second or two."""
    settings.BERTH = {**settings.BERTH, "DASHBOARD_POLL_S": 1}


@pytest.fixture
def log_in(live_server):
    """log_in(page, user): fill in the real login form and land on the user's dashboard."""

    def _log_in(page, user):
        page.goto(f"{live_server.url}/login/")
        page.get_by_label("Username").fill(user.username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_load_state("domcontentloaded")
        return page

    return _log_in


@pytest.fixture
def shoot():
    """shoot(page, name): save a full-page screenshot as test-artifacts/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def _shoot(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return _shoot


def pytest_terminal_summary(terminalreporter):
    if SCREENSHOTS.is_dir() and any(SCREENSHOTS.glob("*.png")):
        terminalreporter.write_line(f"dashboard screenshots: {SCREENSHOTS}")
