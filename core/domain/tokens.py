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
from typing import Any

import asyncpg

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

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    @classmethod
    def from_row(cls, row: Any) -> Token:
        return cls(row["id"], row["name"], tuple(row["scopes"]), row["created_at"],
                   row["revoked_at"])


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
        row = await store.sql.fetchrow(_Q["create"], name, list(dict.fromkeys(scopes)),
                                        _hash(secret))
    except asyncpg.UniqueViolationError:
        raise errors.PropsError(f"a live token named {name!r} exists: revoke it first or "
                                f"choose another name") from None
    except asyncpg.CheckViolationError:
        raise errors.PropsError(f"token name {name!r} must be 1-100 letters, digits or "
                                f"_.@- (starting with a letter or digit)") from None
    return Token.from_row(row), secret


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
    row = await store.sql.fetchrow(_Q["verify"], _hash(secret))
    return None if row is None else Token.from_row(row)


async def all_tokens(store: EventStore) -> list[Token]:
    return [Token.from_row(r) for r in await store.sql.fetch(_Q["list"])]


async def revoke(store: EventStore, name_or_id: str) -> Token:
    row = await store.sql.fetchrow(_Q["revoke"], name_or_id)
    if row is None:
        raise errors.NotFound(f"no live token named (or with id) {name_or_id!r}: "
                                f"`props tokens list` shows them")
    return Token.from_row(row)
