"""Who is asking: the token in `Authorization` (Bearer, or Basic with the token as password,
which is what `docker login` sends), checked against props.api_tokens."""

from __future__ import annotations

import base64
import binascii

from props.core.domain import tokens, vocabulary
from props.core.log.store import EventStore


class Denied(Exception):
    """401 (no valid token) or 403 (a valid token without the scope)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def secret_of(header: str | None) -> str | None:
    if not header:
        return None
    kind, _, value = header.strip().partition(" ")
    if kind.lower() == "bearer":
        return value.strip() or None
    if kind.lower() == "basic":
        try:
            _user, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return password or None
    return None


async def authorize(store: EventStore, header: str | None, scope: vocabulary.Scope) -> tokens.Token:
    secret = secret_of(header)
    if secret is None:
        raise Denied(401, "a token is required: send `Authorization: Bearer <token>` "
                          "(props tokens create makes one)")
    token = await tokens.verify(store, secret)
    if token is None:
        raise Denied(401, "the token is unknown or revoked")
    if not token.allows(scope):
        raise Denied(403, f"token {token.name!r} lacks the {scope!r} scope "
                          f"(it has: {', '.join(token.scopes)})")
    return token
