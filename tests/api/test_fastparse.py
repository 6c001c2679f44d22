"""serializers.parse takes a fast path for plain valid bodies (portal.api.fastparse);
whenever it does, DRF's field-by-field parse must give the same values and no error."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from portal.api.fastparse import fast_parse
from portal.api.serializers import (
    JobSpecSerializer,
    JobSubmitSerializer,
    SlugField,
    TextField,
    parse,
    parse_fields,
)
from tests.api.conftest import job_body

RANDOM = os.environ.get("BERTH_FUZZ_RANDOM", "") == "1"
EXAMPLES = int(os.environ.get("BERTH_FUZZ_EXAMPLES", "400"))
SUBMIT, SPEC = JobSubmitSerializer(), JobSpecSerializer()


def test_an_ordinary_job_takes_the_fast_path_with_drfs_values():
    for body in (
        job_body(),
        job_body(team="alpha", env={"SEED": "1", "EMPTY": ""}, command=[" spaced ", ""]),
        job_body(name="  padded name  ", priority=-5, preemptible=False, queue="batch"),
    ):
        fast = fast_parse(SUBMIT, body)
        assert fast is not None, body
        assert parse_fields(SUBMIT, body) == (fast, {})
        assert parse(SUBMIT, body) == (fast, {})
    assert fast_parse(SUBMIT, job_body())["name"] == "train-llm"
    assert fast_parse(SUBMIT, job_body(name="  padded  "))["name"] == "padded"  # trimmed


def test_anything_unusual_goes_the_slow_way_and_keeps_drfs_messages():
    unusual = [
        job_body(workers="2"),  # refused by the strict fields: a number sent as text
        job_body(workers=2.0),
        job_body(preemptible="yes"),
        job_body(workers=True),
        job_body(name=""),
        job_body(name="a\x00b"),
        job_body(name="a\ud800b"),
        job_body(gpu_per_worker=1),  # unknown field
        {k: v for k, v in job_body().items() if k != "image"},  # required field missing
        job_body(command=[]),
        job_body(env={"A": 1}),
        job_body(flavor="h100 80gb"),
        job_body(max_runtime_seconds=10**30),
        ["not", "an", "object"],
    ]
    for body in unusual:
        assert fast_parse(SUBMIT, body) is None, body
        assert parse(SUBMIT, body) == parse_fields(SUBMIT, body)
    for strict in ({"workers": "2"}, {"workers": 2.0}, {"preemptible": "yes"}, {"preemptible": 1}):
        assert set(parse(SUBMIT, job_body(**strict))[1]) == set(strict), strict
    assert "name" in parse(SUBMIT, job_body(name="a\x00b"))[1]


def test_a_field_kind_it_does_not_know_turns_the_fast_path_off():
    class WithDate(serializers.Serializer):
        name = TextField()
        when = serializers.DateTimeField()

    class CustomText(serializers.CharField):
        def to_internal_value(self, data):
            return super().to_internal_value(data).upper()

    class WithCustom(serializers.Serializer):
        name = CustomText()

    assert fast_parse(WithDate(), {"name": "x", "when": "2026-01-01T00:00:00Z"}) is None
    assert fast_parse(WithCustom(), {"name": "x"}) is None
    assert parse(WithCustom(), {"name": "x"}) == ({"name": "X"}, {})


class Bounded(serializers.Serializer):
    """Every kind the fast path knows, with the options it reads."""

    slug = SlugField(max_length=8)
    text = TextField(max_length=5, min_length=2, required=False)
    loose = serializers.CharField(required=False, allow_blank=True, max_length=6)
    count = serializers.IntegerField(min_value=-3, max_value=1000, required=False)
    flag = serializers.BooleanField(required=False)
    argv = serializers.ListField(child=TextField(trim_whitespace=False), max_length=3)
    env = serializers.DictField(child=TextField(allow_blank=True), required=False)


TRICKY = st.sampled_from(
    ["", " ", "  x ", "\x00", "\ud800", "\udfff", "é", "ok", "a-b_c", "toolongvalue", "\n", "x\n"]
)
TEXT = st.one_of(TRICKY, st.text(max_size=9), st.builds(str.__add__, TRICKY, TRICKY))
SCALAR = st.one_of(
    TEXT,
    st.integers(min_value=-(10**20), max_value=10**20),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
VALUE = st.one_of(
    SCALAR,
    st.lists(st.one_of(TEXT, st.integers(-5, 5)), max_size=4),
    st.dictionaries(TEXT, st.one_of(TEXT, st.integers(-5, 5)), max_size=3),
)
SHORT = st.text(alphabet="ab -_\x00\ud800é\n", max_size=9)  # near misses


def leaning(valid):
    """Mostly values inside the field's rules, some near misses, a few anything at all."""
    return st.integers(0, 5).flatmap(lambda i: valid if i < 4 else SHORT if i == 4 else VALUE)


BOUNDED_BODY = st.fixed_dictionaries(
    {
        "slug": leaning(st.from_regex(r"[-a-zA-Z0-9_]{1,8}", fullmatch=True)),
        "argv": leaning(st.lists(st.text(alphabet="ab é\n", min_size=1, max_size=5), max_size=3)),
    },
    optional={
        "text": leaning(st.from_regex(r"\s?[a-zé]{2,5}\s?", fullmatch=True)),
        "loose": leaning(st.text(alphabet="ab é\t", max_size=7)),
        "count": leaning(st.integers(-4, 1001)),
        "flag": leaning(st.booleans()),
        "env": leaning(st.dictionaries(st.text("AB_", min_size=1), st.text("ab ", max_size=4))),
    },
)
JOB_FIELDS = sorted(JobSubmitSerializer().fields)
JOB_BODY = st.builds(
    lambda base, changes, dropped: {k: v for k, v in (base | changes).items() if k not in dropped},
    st.just(job_body(team="alpha", env={"A": "1"}, priority=3, preemptible=True)),
    st.dictionaries(
        st.sampled_from([*JOB_FIELDS, "x"]),
        leaning(st.one_of(st.from_regex(r"[a-z0-9-]{1,9}", fullmatch=True), st.integers(1, 8))),
        max_size=3,
    ),
    st.sets(st.sampled_from(JOB_FIELDS), max_size=2),
)


def _agrees(serializer, body) -> None:
    fast = fast_parse(serializer, body)
    if fast is not None:
        assert parse_fields(serializer, body) == (fast, {}), body


@settings(max_examples=EXAMPLES, derandomize=not RANDOM, deadline=None)
@given(BOUNDED_BODY)
def test_the_fast_path_agrees_with_drf_on_every_kind_of_field(body):
    _agrees(Bounded(), body)


@settings(max_examples=EXAMPLES, derandomize=not RANDOM, deadline=None)
@given(JOB_BODY)
def test_the_fast_path_agrees_with_drf_on_job_bodies(body):
    _agrees(SUBMIT, body)
    _agrees(SPEC, {k: v for k, v in body.items() if k != "team"})
