"""A job's fingerprint is the digest an Idempotency-Key's jobs were stored with: it must
never change, or a retry of a request made before the change would be a 409."""

from __future__ import annotations

import pytest

from portal.core.jobspec import JobSpec
from portal.core.models import GpuFlavor, Queue

NOTIFY = {"url": "https://hooks.example.com/x", "on": ["ended"], "email": False}


@pytest.mark.parametrize(
    ("extra", "digest"),
    [
        ({}, "0d34d2de59ba38d189e13e2d2d4d221aef58b944976f9bf9aeb8afb7bb649d5b"),
        (
            {"env": {"LR": "1e-3", "Ä": "ü"}, "notify": NOTIFY | {"url": "https://x"}},
            "bfd450b7b1c982787055f538de0712df4f83986c5baba2544e0f6c592c4ed244",
        ),
        (
            {"depends_on": (("afterok", 12),), "singleton": True, "array_id": 4, "array_index": 7},
            "5cbf6b11f0d010a6eedfe7aaf25a2e62ba8d250bcebe8e32c9f0a77a6d0e9e2c",
        ),
    ],
    ids=["plain", "env-and-notify", "dependencies-and-array-task"],
)
def test_the_fingerprint_of_a_spec_is_the_digest_stored_before(extra, digest):
    spec = JobSpec(
        name="n",
        queue=Queue(name="default"),
        flavor=GpuFlavor(name="h100-80gb"),
        image="python:3.11",
        command=["a", "b"],
        **extra,
    )
    assert spec.fingerprint() == digest
