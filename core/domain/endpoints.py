"""Model endpoints and grants: the operator's decisions, recorded as events.

No secret enters a run. A run reaches its model through props's gateway
(props.reactors.gateway), which forwards only to an endpoint registered here, attaches the
key itself (read from the gateway's environment by the variable the registration names) and
charges each call to the run's budget. A definition names an endpoint by name
(`endpoint = "NAME"` in its config); a config that carries a URL or a key variable is refused
where it enters (`check_config`).

What a definition's author describes (its command, its config) grants nothing: network, the
host's binaries, endpoints and the caps on what its runs report (core/domain/caps.py) are
granted per definition digest by `definition.granted`,
which only the operator records (`props definitions grant`, or a push through the operator's
own CLI, which grants what it asks). A push through the registry proxy, whoever holds the
token, is recorded without grants and says what its labels asked for. Grants and endpoints
are read from this database's own events only: an import's are another database's history.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Mapping
from typing import Any

from props.core.domain import catalog, streams, vocabulary
from props.core.log import errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.schema import queries

_Q = queries.load("endpoints")
# Variables whose values are props' or libpq's own secrets: never a key an endpoint may name.
PROPS_OWN = re.compile(r"^(PROPS_|PG)|^DATABASE_URL$")
# Config keys that would carry a destination or a secret: the operator's, never a definition's.
# (matched on the key as `_carries_a_destination` reads it: no case, no `-` or `_`)
_FORBIDDEN_KEY = re.compile(
    r"(url|uri|apibase|host|hostname|proxy|apikey|keyenv|key|secret|password|passwd|token|"
    r"authorization|credential|credentials)$")
_URL_VALUE = re.compile(r"^\s*([a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


class EndpointRefused(errors.PropsError):
    """An endpoint, a grant or a definition's config that props does not accept."""

    exit_code = 65  # EX_DATAERR


def check_config(config: Mapping[str, Any]) -> None:
    """A definition's config describes a critic: it may name an endpoint (`endpoint`), never
    carry a URL or a key variable (where the model is and which key pays for it are the
    operator's, registered with `props endpoints add`)."""
    if (where := _carries_a_destination(config, "")) is not None:
        raise EndpointRefused(
            f"the definition's config names {where[:64]!r}: a config never carries a URL or "
            f"a key; the operator registers the model's endpoint (props endpoints add NAME "
            f"--base-url URL --key-env VARIABLE) and the config names it "
            f"(\"endpoint\": \"NAME\")")
    named = config.get("endpoint")
    if named is not None and not (isinstance(named, str) and _valid_name(named)):
        raise EndpointRefused(f"the definition's endpoint {str(named)[:64]!r} is not an "
                              f"endpoint name (lowercase letters, digits, '.', '_', '-')")


def _carries_a_destination(value: Any, where: str, depth: int = 0) -> str | None:
    """Where in `value` (nested objects and lists too) a key names a URL, a host or a secret,
    or a string is a URL; None if nowhere. Keys are compared as a person reads them (NFKC,
    case, `-` and `_` ignored): `baseUrl`, `api-key`, a fullwidth URL all count."""
    if depth > 64:
        return where or "(nested too deep)"
    if isinstance(value, Mapping):
        for key, item in value.items():
            plain = unicodedata.normalize("NFKC", str(key)).casefold().replace("-", "") \
                .replace("_", "")
            if _FORBIDDEN_KEY.search(plain):
                return f"{where}{key}"
            if (found := _carries_a_destination(item, f"{where}{key}.", depth + 1)):
                return found
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            if (found := _carries_a_destination(item, f"{where}{n}.", depth + 1)):
                return found
    elif isinstance(value, str) and _URL_VALUE.match(unicodedata.normalize("NFKC", value)):
        return where.rstrip(".") or value[:64]
    return None


def _valid_name(name: str) -> bool:
    return re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", name) is not None


def endpoint_named(config: Mapping[str, Any]) -> str | None:
    named = config.get("endpoint")
    return named if isinstance(named, str) and _valid_name(named) else None


# -- endpoints ----------------------------------------------------------------------------------


async def register(store: EventStore, endpoint: catalog.EndpointRegistered, *,
                   actor: str | None = None) -> bool:
    """Record `endpoint` unless the registration in force here is the same; whether it was
    recorded. Every change is an event of its own (an id of its own: a registration never
    collides with an earlier one of this database, nor with one an import brought)."""
    if endpoint.key_env is not None and PROPS_OWN.match(endpoint.key_env):
        raise EndpointRefused(f"--key-env {endpoint.key_env}: props and libpq read that "
                              f"variable (it may hold a password of the service's); name the "
                              f"variable that holds the model's key")
    if await resolve(store, endpoint.name) == endpoint:
        return False
    metadata = {"actor": actor} if actor else {}
    await store.append(streams.endpoint(endpoint.name),
                       [NewEvent(endpoint, uuid.uuid4(), metadata)])
    return True


async def resolve(store: EventStore, name: str) -> catalog.EndpointRegistered | None:
    """The endpoint's last registration in this database (None: never registered here)."""
    found = None
    for rec in await store.read_stream(streams.endpoint(name)):
        if isinstance(rec.event, catalog.EndpointRegistered) and not rec.imported:
            found = rec.event
    return found


async def registered(store: EventStore) -> list[catalog.EndpointRegistered]:
    """Every endpoint's last registration, by name."""
    names = await store.sql.fetch(_Q["endpoint_streams"])
    out = [await resolve(store, str(r[0]).removeprefix("endpoint-")) for r in names]
    return sorted((e for e in out if e is not None), key=lambda e: e.name)


# -- grants -------------------------------------------------------------------------------------


def asked(definition: catalog.DefinitionPushed) -> catalog.DefinitionGranted:
    """The grant a definition asks for: what the operator's own push grants (its caps too,
    with ceilings no lower: props.core.domain.caps)."""
    named = endpoint_named(definition.config)
    limits = definition.limits
    return catalog.DefinitionGranted(
        agent_type=definition.agent_type, name=definition.name, digest=definition.digest,
        network=limits.network, host_python=definition.host_python,
        endpoints=[named] if named else [], max_events=limits.max_events,
        max_bytes=limits.max_bytes,
        ceiling_events=None if limits.max_events is None
        else max(limits.max_events, vocabulary.DEFAULT_CEILING_EVENTS),
        ceiling_bytes=None if limits.max_bytes is None
        else max(limits.max_bytes, vocabulary.DEFAULT_CEILING_BYTES))


async def grant(store: EventStore, granted: catalog.DefinitionGranted, *,
                actor: str | None = None) -> bool:
    """Record the operator's grant of a digest unless the grant in force is the same (a
    revoke after a grant after a revoke is three events: each decision takes effect); whether
    it was recorded."""
    def same(a: catalog.DefinitionGranted | None) -> bool:
        return a is not None and _decided(a) == _decided(granted)

    in_force = await grant_of(store, granted.agent_type, granted.digest)
    if same(in_force) or (in_force is None and not asks_anything(granted)):
        return False
    metadata = {"actor": actor} if actor else {}
    await store.append(streams.definition(granted.agent_type),
                       [NewEvent(granted, uuid.uuid4(), metadata)])
    return True


def _decided(g: catalog.DefinitionGranted) -> tuple[object, ...]:
    """What a grant decides (its reason aside)."""
    return (g.network, g.host_python, sorted(g.endpoints), g.max_events, g.max_bytes,
            g.ceiling_events, g.ceiling_bytes)


def asks_anything(granted: catalog.DefinitionGranted) -> bool:
    return _decided(granted) != _decided(catalog.DefinitionGranted(
        agent_type=granted.agent_type, name=granted.name, digest=granted.digest))


async def grant_of(store: EventStore, agent_type: str,
                   digest: str) -> catalog.DefinitionGranted | None:
    """The last grant of `digest` recorded in this database (None: nothing granted)."""
    found = None
    for rec in await store.read_stream(streams.definition(agent_type)):
        e = rec.event
        if isinstance(e, catalog.DefinitionGranted) and e.digest == digest and not rec.imported:
            found = e
    return found


def as_granted(definition: catalog.DefinitionPushed,
               granted: catalog.DefinitionGranted | None) -> catalog.DefinitionPushed:
    """The definition as its runs get it: network and the host's Python as granted, never
    as described."""
    network = granted is not None and granted.network
    host_python = granted is not None and granted.host_python
    return definition.model_copy(update={
        "host_python": host_python,
        "limits": definition.limits.model_copy(update={"network": network})})


def asks(definition: catalog.DefinitionPushed) -> list[str]:
    """What a definition describes that only a grant gives: network, the host's Python, an
    endpoint."""
    wanted = asked(definition)
    return (["network"] if wanted.network else []) \
        + (["host-python"] if wanted.host_python else []) \
        + [f"endpoint {e}" for e in wanted.endpoints]


def asked_caps(definition: catalog.DefinitionPushed) -> list[str]:
    """The caps a definition asks for (only a grant gives them; without one its runs get
    the operator's defaults, and a run that reaches one fails `event_cap`)."""
    return [f"{key.replace('_', '-')} {value}" for key in ("max_events", "max_bytes")
            if (value := getattr(definition.limits, key)) is not None]


def ungranted(definition: catalog.DefinitionPushed,
              granted: catalog.DefinitionGranted | None) -> list[str]:
    """What the definition asks that its digest was not granted (empty: it may run)."""
    have = [] if granted is None else asks(catalog.DefinitionPushed(
        agent_type=definition.agent_type, name=definition.name, tag=definition.tag,
        digest=definition.digest, host_python=granted.host_python,
        limits=catalog.AgentLimits(network=granted.network),
        config={"endpoint": e} if (e := endpoint_named(definition.config)) is not None
        and e in granted.endpoints else {}))
    return [a for a in asks(definition) if a not in have]
