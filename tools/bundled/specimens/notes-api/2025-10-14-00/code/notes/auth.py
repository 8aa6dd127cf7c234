"""Bearer tokens: one per user, from a file or the environment."""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

TOKENS_ENV = "NOTES_TOKENS"


def load_tokens(path: str | None = None) -> dict[str, str]:
    """user -> token, from lines `user:token` in a file or NOTES_TOKENS."""
    text = Path(path).read_text() if path else os.environ.get(TOKENS_ENV, "")
    tokens: dict[str, str] = {}
    for line in text.replace(",", "\n").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, _, token = line.partition(":")
        if user and token:
            tokens[user.strip()] = token.strip()
    return tokens


def user_for(header: str | None, tokens: dict[str, str]) -> str | None:
    """The user a request's Authorization header belongs to, if any."""
    if not header or not header.startswith("Bearer "):
        return None
    presented = header[len("Bearer "):].strip()
    for user, token in tokens.items():
        if hmac.compare_digest(presented.encode(), token.encode()):
            return user
    return None


def etag(body: bytes) -> str:
    """A weak ETag for a response body."""
    return 'W/"' + hashlib.md5(body).hexdigest() + '"'
