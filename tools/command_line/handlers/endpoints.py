"""What `props endpoints` and `props definitions grant` do: the operator's decisions about
models and grants (core/domain/endpoints.py)."""

from __future__ import annotations

import argparse
from typing import Any, TypeVar

import pydantic

from props.core.domain import caps, catalog, definitions, endpoints
from props.core.log import errors
from props.core.log.events import describe_validation_error
from props.core.log.store import EventStore
from props.tools.command_line import render
from props.tools.command_line.render import Column, Console

out = Console(highlight=False)


E = TypeVar("E", bound=pydantic.BaseModel)


def _event(kind: type[E], type_name: str, **fields: Any) -> E:
    try:
        return kind(**fields)
    except pydantic.ValidationError as exc:
        raise errors.InvalidEvent(describe_validation_error(type_name, exc)) from exc


async def add_cmd(args: argparse.Namespace, store: EventStore) -> int:
    endpoint = _event(
        catalog.EndpointRegistered, "endpoint.registered", name=args.name,
        base_url=args.base_url, key_env=args.key_env, price_in_per_mtok=args.price_in,
        price_out_per_mtok=args.price_out, max_tokens=args.max_tokens,
        requests_per_minute=args.requests_per_minute, timeout_seconds=args.timeout)
    new = await endpoints.register(store, endpoint, actor="cli")
    key = f", key from {endpoint.key_env}" if endpoint.key_env else ", no key"
    out.print(f"endpoint {endpoint.name} = {endpoint.base_url}{key}"
              + ("" if new else " (already registered so)"), markup=False)
    return 0


async def list_cmd(args: argparse.Namespace, store: EventStore) -> int:
    rows = [{"name": e.name, "base_url": e.base_url, "key_env": e.key_env,
             "price_in_per_mtok": e.price_in_per_mtok,
             "price_out_per_mtok": e.price_out_per_mtok, "max_tokens": e.max_tokens,
             "requests_per_minute": e.requests_per_minute}
            for e in await endpoints.registered(store)]
    render.emit(args, rows, [
        Column("name", "name"), Column("base_url", "base URL"),
        Column("key_env", "key from", lambda v: v or "-"),
        Column("price_in_per_mtok", "$/Mtok in", lambda v: f"{v:g}"),
        Column("price_out_per_mtok", "$/Mtok out", lambda v: f"{v:g}", optional=True)],
        empty="no endpoints registered: `props endpoints add NAME --base-url URL` registers one")
    return 0


async def grant_cmd(args: argparse.Namespace, store: EventStore) -> int:
    name, _, ref = args.definition.partition("@")
    found = await definitions.resolve(store, args.agent_type, name, ref or "latest")
    if found is None:
        raise definitions.missing_definition(args.agent_type, name, ref or "latest")
    for named in args.endpoint or []:
        if await endpoints.resolve(store, named) is None:
            raise endpoints.EndpointRefused(
                f"endpoint {named} is not registered: props endpoints add {named} --base-url "
                f"URL first")
    granted = _event(
        catalog.DefinitionGranted, "definition.granted", agent_type=args.agent_type,
        name=found.name, digest=found.digest, network=args.network,
        host_python=args.host_python, endpoints=args.endpoint or [], reason=args.reason,
        max_events=args.max_events, max_bytes=args.max_bytes,
        ceiling_events=args.ceiling_events, ceiling_bytes=args.ceiling_bytes)
    await endpoints.grant(store, granted, actor="cli")
    what = [w for w, on in (("network", granted.network), ("the host's Python",
                                                          granted.host_python)) if on]
    what += [f"endpoint {e}" for e in granted.endpoints]
    in_force = caps.granted(granted)
    out.print(f"{granted.agent_type} {found.name} {found.digest[:19]}: granted "
              f"{', '.join(what) or 'no network, host Python or endpoint'}; its runs' caps "
              f"{in_force.max_events:,} events, {in_force.max_bytes:,} bytes (a plan may "
              f"raise them to {in_force.ceiling_events:,} and {in_force.ceiling_bytes:,})",
              markup=False)
    return 0
