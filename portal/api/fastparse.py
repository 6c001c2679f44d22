"""The common case of `serializers.parse`, without DRF's per-field machinery.

A bulk submission runs a dozen DRF fields for each of up to 5,000 jobs, and DRF's
run_validation, its validators and its surrogate check (a Python loop over every
character) were a third of the request's cost. For a body whose values have
exactly the types JSON gives (str, int, bool, list of str, object of str) this
reads the same rules off the serializer's own fields (required, trimming, blank,
length and value bounds, other validators called as they are) and returns what
DRF would. Anything it is not sure of (a missing required field, an unknown key,
a number sent as a string, any value a check refuses) makes it answer None and
the caller goes the slow way, so every error message still comes from DRF.
tests/api/test_fastparse.py checks that both ways agree on generated bodies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.core import validators as dj
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import empty
from rest_framework.validators import ProhibitSurrogateCharactersValidator

MISS = object()  # "not sure": the slow way decides
_SURROGATES = re.compile("[\ud800-\udfff]")
# Larger ints than this are left to DRF (it turns them into text first, which
# Python refuses past 4,300 digits).
_INT_LIMIT = 10**18

Check = Callable[[Any], Any]  # a value → the parsed value, or MISS


def fast_parse(serializer: serializers.Serializer, data) -> dict | None:
    """The values DRF would parse from `data` when every field parses, else None."""
    plan = _plan(serializer)
    if plan is None or type(data) is not dict:
        return None
    fields, names = plan
    if not names.issuperset(data):
        return None  # unknown fields: the slow way names them
    values = {}
    for name, required, check in fields:
        if name not in data:
            if required is None:
                continue  # optional, no default: left out, as DRF's SkipField does
            return None
        value = check(data[name])
        if value is MISS:
            return None
        values[name] = value
    return values


def _plan(serializer) -> tuple[list, set] | None:
    """(name, required, check) per writable field, built once per serializer;
    None when a field is of a kind this does not know. `required` is True, or None
    for an optional field without a default (one with a default is not planned)."""
    cached = serializer.__dict__.get("_fast_plan", MISS)
    if cached is not MISS:
        return cached
    plan = []
    for field in serializer._writable_fields:
        check = _check_for(field)
        optional = not field.required and field.default is empty
        if check is None or not (field.required or optional):
            plan = None
            break
        plan.append((field.field_name, True if field.required else None, check))
    result = None if plan is None else (plan, {name for name, _, _ in plan})
    serializer.__dict__["_fast_plan"] = result
    return result


def _check_for(field) -> Check | None:
    """A check that parses as `field` does, or None for a kind of field this does not
    know, including a subclass that parses its own way (but a text field marked
    `strict` (serializers.Strict), which only refuses a value of another JSON type, is known)."""
    if isinstance(field, serializers.Serializer):
        return _nested(field)
    kind = type(field)
    if kind.run_validation is not _BASE.get(_family(field), {}).get("run_validation"):
        return None
    if kind.to_internal_value is not _BASE[_family(field)]["to_internal_value"] and not (
        getattr(field, "strict", False)
    ):
        return None
    if isinstance(field, serializers.BooleanField):
        return _exact(bool, _value_checks(field))
    if isinstance(field, serializers.IntegerField):
        return _integer(_value_checks(field))
    if isinstance(field, serializers.CharField):
        return _text(field, _value_checks(field))
    if isinstance(field, serializers.ListField):
        child = _check_for(field.child)
        return None if child is None else _list(child, field.allow_empty, _value_checks(field))
    if isinstance(field, serializers.DictField):
        child = _check_for(field.child)
        return None if child is None else _dict(child, field.allow_empty, _value_checks(field))
    return None


_FAMILIES = (
    serializers.BooleanField,
    serializers.IntegerField,
    serializers.CharField,
    serializers.ListField,
    serializers.DictField,
)
_BASE = {
    family: {"run_validation": family.run_validation, "to_internal_value": family.to_internal_value}
    for family in _FAMILIES
}


def _family(field) -> type | None:
    return next((family for family in _FAMILIES if isinstance(field, family)), None)


def _nested(serializer: serializers.Serializer) -> Check | None:
    """An object of known fields inside the body (a job's `notify`), parsed as a body is."""
    if _plan(serializer) is None:
        return None

    def check(value):
        values = fast_parse(serializer, value)
        return MISS if values is None else values

    return check


def _exact(kind: type, checks: list) -> Check:
    ok = _all(checks)

    def check(value):
        if type(value) is not kind or not ok(value):
            return MISS
        return value

    return check


def _integer(checks: list) -> Check:
    bounded = [lambda v: -_INT_LIMIT < v < _INT_LIMIT, *checks]
    return _exact(int, bounded)


def _text(field: serializers.CharField, checks: list) -> Check:
    trim, blank_ok, ok = field.trim_whitespace, field.allow_blank, _all(checks)

    def check(value):
        if type(value) is not str:
            return MISS
        if trim:
            value = value.strip()
        if value == "":
            return "" if blank_ok else MISS  # DRF returns "" before any validator
        return value if ok(value) else MISS

    return check


def _list(child: Check, allow_empty: bool, checks: list) -> Check:
    ok = _all(checks)

    def check(value):
        if type(value) is not list or (not value and not allow_empty):
            return MISS
        items = [child(item) for item in value]
        if _missed(items) or not ok(items):
            return MISS
        return items

    return check


def _dict(child: Check, allow_empty: bool, checks: list) -> Check:
    ok = _all(checks)

    def check(value):
        if type(value) is not dict or (not value and not allow_empty):
            return MISS
        items = {key: child(item) for key, item in value.items()}
        if _missed(items.values()) or not ok(items):
            return MISS
        return items

    return check


def _missed(items) -> bool:
    """Whether a child check missed. `in` finds MISS by identity: the other items are
    parsed JSON values (str, numbers, lists, dicts), none of them == a bare object."""
    return MISS in items


def _all(checks: list) -> Callable[[Any], bool]:
    """One predicate for all of `checks`, in order, stopping at the first that fails
    (what `all(ok(v) for ok in checks)` says, without a generator per value)."""
    checks = tuple(checks)
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda v: first(v) and second(v)
    if len(checks) == 3:
        first, second, third = checks
        return lambda v: first(v) and second(v) and third(v)

    def ok(v) -> bool:
        for each in checks:  # noqa: SIM110 — all(generator) is what this is faster than
            if not each(v):
                return False
        return True

    return ok


def _value_checks(field) -> list[Callable[[Any], bool]]:
    """The field's validators as predicates; the common ones written out, the rest
    called as they are. The two every text field has (no NUL, no surrogate) are one
    predicate, with its max_length when it has one."""
    checks = []
    kinds = [type(v) for v in field.validators]
    clean_text = {dj.ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator}
    fused = clean_text <= set(kinds)
    longest = None
    if fused and kinds.count(dj.MaxLengthValidator) == 1:  # a CharField's max_length
        longest = next(v for v in field.validators if type(v) is dj.MaxLengthValidator)
    if longest is not None:
        checks.append(
            lambda v, n=longest.limit_value: (
                len(v) <= n and "\x00" not in v and (v.isascii() or not _SURROGATES.search(v))
            )
        )
    elif fused:
        checks.append(lambda v: "\x00" not in v and (v.isascii() or not _SURROGATES.search(v)))
    for validator in field.validators:
        limit = getattr(validator, "limit_value", None)
        if (fused and type(validator) in clean_text) or validator is longest:
            continue
        if callable(limit):
            checks.append(_passes(validator))
        elif type(validator) is dj.MaxLengthValidator:
            checks.append(lambda v, n=limit: len(v) <= n)
        elif type(validator) is dj.MinLengthValidator:
            checks.append(lambda v, n=limit: len(v) >= n)
        elif type(validator) is dj.MaxValueValidator:
            checks.append(lambda v, n=limit: v <= n)
        elif type(validator) is dj.MinValueValidator:
            checks.append(lambda v, n=limit: v >= n)
        elif type(validator) is dj.ProhibitNullCharactersValidator:
            checks.append(lambda v: "\x00" not in v)
        elif type(validator) is ProhibitSurrogateCharactersValidator:
            checks.append(lambda v: v.isascii() or not _SURROGATES.search(v))
        elif type(validator) is dj.RegexValidator:
            checks.append(_matches(validator))
        else:
            checks.append(_passes(validator))
    return checks


def _matches(validator: dj.RegexValidator) -> Callable[[Any], bool]:
    """RegexValidator's test (a match of its regex anywhere in str(value), or none
    with inverse_match) as a predicate."""
    search, inverse = validator.regex.search, validator.inverse_match
    if inverse:
        return lambda v: search(str(v)) is None
    return lambda v: search(str(v)) is not None


def _passes(validator) -> Callable[[Any], bool]:
    def ok(value) -> bool:
        try:
            validator(value)
        except (DjangoValidationError, ValidationError):
            return False
        return True

    return ok
