"""Schemathesis hooks for the fuzz run (tests/api/test_schema.py, `make fuzz`).

The run authenticates with one token; a generated or linked revoke of *that*
token would leave every later request unauthenticated. Only those calls are
filtered out: the fuzzer still revokes the tokens it creates itself.
"""

from __future__ import annotations

import os

import schemathesis

OWN_TOKEN_ID = os.environ.get("BERTH_FUZZ_OWN_TOKEN_ID", "")


@schemathesis.hook
def filter_path_parameters(context, path_parameters) -> bool:
    return str((path_parameters or {}).get("token_id")) != OWN_TOKEN_ID
