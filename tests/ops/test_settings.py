"""The ops settings fail loudly on bad values, like every other Berth setting."""

import pytest

from tests.portal.test_settings import _django


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "BERTH_METRICS_ALLOW_CIDRS",
            "10.0.0.0/8,not-a-net",
            "BERTH_METRICS_ALLOW_CIDRS must list",
        ),
        ("BERTH_METRICS_SETTLE_S", "5", "BERTH_METRICS_SETTLE_S must be ≥ 60"),
        ("BERTH_READY_PASS_MAX_AGE_S", "soon", "BERTH_READY_PASS_MAX_AGE_S must be a number"),
        ("BERTH_READY_BROKER_TIMEOUT_S", "0", "BERTH_READY_BROKER_TIMEOUT_S must be ≥ 0.1"),
    ],
)
def test_bad_ops_values_fail_with_the_variable_named(name, value, message):
    result = _django({name: value}, "check")
    assert result.returncode != 0
    assert message in result.stderr


def test_ops_defaults_and_none():
    code = (
        "from django.conf import settings as s; b = s.BERTH; "
        "print(b['METRICS_ALLOW_CIDRS'], b['READY_PASS_MAX_AGE_S'], b['METRICS_SETTLE_S'])"
    )
    result = _django({"BERTH_SCHEDULE_INTERVAL_S": "30"}, "shell", "-v", "0", "-c", code)
    assert result.stdout.split("\n")[0] == "['127.0.0.1/32', '::1/128'] 90.0 600.0", result.stderr
    result = _django({"BERTH_METRICS_ALLOW_CIDRS": "none"}, "shell", "-v", "0", "-c", code)
    assert result.stdout.startswith("[] 60.0 600.0"), result.stderr
