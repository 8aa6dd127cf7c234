"""The signers whose export files this deployment trusts, and what a file none of them signed
may do here.

Trust is the operator's decision, recorded as events (`signer.trusted`, `signer.distrusted`
in `signers-trusted`; `props keys trust|distrust`); an imported one is history and trusts
nobody. A deployment that trusts no one takes every verified file as before. Once it trusts
a signer, the trusted signer wins: a file that none of its trusted signers signed is refused,
or taken with `props import --untrusted` whole as `import.inert` history that nothing reads.
Such a file takes no stream, run id, evaluation or model name, so it can never shadow or
block what a trusted file brings later (an unsigned file that first took the id of a run a
signed export holds would otherwise refuse that export, and the run would read as the
squatter's). What came in before the first trust stays as it came (the log is append-only):
a trusted file that meets it is refused naming the stream, as any other origin's is
(docs/reference/imports.md).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from props.core.domain import catalog, streams
from props.core.domain.archive import signing
from props.core.log.store import EventStore

Trust = Literal["open", "trusted", "untrusted"]


@dataclasses.dataclass(frozen=True)
class Signer:
    fingerprint: str
    name: str


async def trusted(store: EventStore) -> list[Signer]:
    """The signers this deployment trusts now, by fingerprint (its own decisions only)."""
    now: dict[str, Signer] = {}
    for rec in await store.read_stream(streams.trusted_signers()):
        if rec.imported:
            continue
        if isinstance(rec.event, catalog.SignerTrusted):
            now[rec.event.fingerprint] = Signer(rec.event.fingerprint, rec.event.name)
        elif isinstance(rec.event, catalog.SignerDistrusted):
            now.pop(rec.event.fingerprint, None)
    return sorted(now.values(), key=lambda s: s.fingerprint)


async def trust(store: EventStore, key: signing.PublicKey, *, actor: str) -> bool:
    """Trust `key`'s files; whether that changed anything."""
    if key.fingerprint in {s.fingerprint for s in await trusted(store)}:
        return False
    await store.append(streams.trusted_signers(), [catalog.SignerTrusted(
        fingerprint=key.fingerprint, name=key.name)], metadata={"actor": actor})
    return True


async def distrust(store: EventStore, fingerprint: str, *, actor: str) -> bool:
    """No longer trust the key `fingerprint`; whether it was trusted."""
    if fingerprint not in {s.fingerprint for s in await trusted(store)}:
        return False
    await store.append(streams.trusted_signers(), [catalog.SignerDistrusted(
        fingerprint=fingerprint)], metadata={"actor": actor})
    return True


def decide(signer: str | None, deployment: list[Signer], *, untrusted: bool) -> Trust:
    """What a verified file signed by `signer` (None: unsigned) may do here: `open` (this
    deployment trusts no one: taken as it comes), `trusted`, or `untrusted` (taken as inert
    history only, as `--untrusted` asked); refused otherwise."""
    if not deployment:
        return "open"
    if signer in {s.fingerprint for s in deployment}:
        return "trusted"
    if untrusted:
        return "untrusted"
    names = ", ".join(f"{s.name} ({s.fingerprint})" for s in deployment[:5])
    raise signing.SignatureError(
        f"the file is {'signed by key ' + signer if signer else 'not signed'}, and this "
        f"deployment trusts only files signed by {names} (props keys trusted): nothing was "
        f"written. `props import --untrusted FILE` keeps it as inert history that nothing "
        f"reads, taking no run id, evaluation or name a trusted file may bring")
