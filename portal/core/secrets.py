"""Bearer secrets (API tokens, node tokens, bootstrap tokens): random, shown
once, stored as a SHA-256 digest. They carry 256 bits of entropy, so a fast
hash is enough (as GitHub's tokens); a slow KDF would only cost latency."""

import hashlib
import secrets
from dataclasses import dataclass


@dataclass(frozen=True)
class NewSecret:
    plaintext: str  # show once, never store
    prefix: str  # stored, shown in lists to tell tokens apart
    digest: str  # stored, looked up on every request


def new_secret(kind: str) -> NewSecret:
    """A token like `bat_3hF9…`; `kind` is a short tag such as "bat" (Berth API token)."""
    body = secrets.token_urlsafe(32)
    plaintext = f"{kind}_{body}"
    return NewSecret(
        plaintext=plaintext, prefix=plaintext[: len(kind) + 7], digest=digest(plaintext)
    )


def digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()
