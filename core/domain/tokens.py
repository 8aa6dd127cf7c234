"""Tokens of the HTTP API and the registry proxy: made, checked, listed and revoked.

A token is `props_` and 43 URL-safe characters (256 random bits). Only its sha256 is stored
(`props.api_tokens`), so a token is shown once, when it is made, and a copy of the database
does not hand out access. Scopes: `read` (runs, scores, health, image pulls), `request`
(request runs), `push` (push agent images: they become definitions), `admin` (everything,
including tokens). Tokens never enter the log: events name the token's name, never its value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import secrets
import uuid

from props.core.domain.vocabulary import SCOPES, Scope
from props.core.log import errors, leadership
from props.core.log.store import EventStore
from props.schema import queries

PREFIX = "props_"
_Q = queries.load("tokens")


@dataclasses.dataclass(frozen=True)
class Token:
    id: uuid.UUID
    name: str
    scopes: tuple[Scope, ...]
    created_at: dt.datetime
    revoked_at: dt.datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", tuple(self.scopes))  # the column is an array

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or "admin" in self.scopes


_CREATE = queries.typed("tokens", "create", Token)
_VERIFY = queries.typed("tokens", "verify", Token)
_LIST = queries.typed("tokens", "list", Token)
_REVOKE = queries.typed("tokens", "revoke", Token)


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


async def create(store: EventStore, name: str, scopes: tuple[Scope, ...]) -> tuple[Token, str]:
    """Make a token; returns it with its secret, which exists nowhere else from now on."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if not scopes or unknown:
        raise errors.PropsError(f"scopes must be some of {', '.join(SCOPES)}"
                                + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    secret = _new_secret()
    try:
        token = await store.sql.row(_CREATE, name, list(dict.fromkeys(scopes)),
                                    _hash(secret))
    except errors.AlreadyExists:
        raise errors.PropsError(f"a live token named {name!r} exists: revoke it first or "
                                f"choose another name") from None
    except errors.ValueRefused:
        raise errors.PropsError(f"token name {name!r} must be 1-100 letters, digits or "
                                f"_.@- (starting with a letter or digit)") from None
    assert token is not None  # INSERT ... RETURNING
    return token, secret


async def create_first_admin(store: EventStore) -> str | None:
    """The admin token of a first start, or None when tokens were made before."""
    secret = _new_secret()
    row = await store.sql.fetchrow(_Q["create_first_admin"], _hash(secret),
                                   leadership.FIRST_TOKEN)
    return None if row is None else secret


async def verify(store: EventStore, secret: str) -> Token | None:
    """The live token with this secret, or None (unknown, malformed or revoked)."""
    if not secret.startswith(PREFIX) or len(secret) > 200:
        return None
    return await store.sql.row(_VERIFY, _hash(secret))


async def all_tokens(store: EventStore) -> list[Token]:
    return await store.sql.rows(_LIST)


async def revoke(store: EventStore, name_or_id: str) -> Token:
    token = await store.sql.row(_REVOKE, name_or_id)
    if token is None:
        raise errors.NotFound(f"no live token named (or with id) {name_or_id!r}: "
                                f"`props tokens list` shows them")
    return token
