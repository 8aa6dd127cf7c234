"""The operator's decisions about models and grants, and the model gateway's record of calls.

`endpoint.registered` (stream `endpoint-<name>`): a model endpoint the operator registered: its
base URL, the name of the variable of the gateway's own environment that holds its key (never
the key), its prices and limits. A definition names an endpoint by name only.

`definition.granted` (stream `definition-<critic|grader>`, beside the pushes): what the
operator lets runs of one definition digest have: network, the host's binaries, endpoints,
the caps on what its agent reports and how far a plan may raise them.
An image's labels describe a critic; only this event grants it anything.

`gateway.called` (stream `gateway-<run id>`): one model call the gateway forwarded or refused
for a run: the endpoint's name, tokens, cost, latency and the closed outcome; never the key,
never a header.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import pydantic

from props.core.domain.catalog.parts import (
    REGISTRY,
    ByteCap,
    Digest,
    EventCap,
    Name,
    Tokens,
    Usd,
)
from props.core.domain.vocabulary import AgentType
from props.core.log.events import Event

# An endpoint's name: part of its stream's name, and what a definition's config says.
EndpointName = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]
# A variable of the gateway's environment (never one props or libpq reads: checked where
# an endpoint is registered, core/domain/endpoints.py).
VariableName = Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
BaseUrl = Annotated[str, pydantic.StringConstraints(
    pattern=r"^https?://[^\s/?#@]+(/[^\s?#]*)?$", max_length=2000)]
GatewayOutcome = Literal["answered", "upstream_error", "unreachable", "timeout", "reset",
                         "over_budget", "rate_limited", "not_granted", "refused"]


@REGISTRY.register
class EndpointRegistered(Event):
    """A model endpoint the gateway may forward to (the last registration of a name wins)."""

    type_name = "endpoint.registered"
    name: EndpointName
    base_url: BaseUrl
    key_env: VariableName | None = None
    price_in_per_mtok: Usd = 0.0
    price_out_per_mtok: Usd = 0.0
    max_tokens: int | None = pydantic.Field(default=None, ge=1, le=10**7)  # per answer
    requests_per_minute: int | None = pydantic.Field(default=None, ge=1, le=10**6)
    timeout_seconds: float = pydantic.Field(default=120.0, gt=0, le=3600,
                                            allow_inf_nan=False)


@REGISTRY.register
class DefinitionGranted(Event):
    """What runs of one definition digest may have, as the operator decided. The last grant
    of a digest wins (a grant of nothing revokes)."""

    type_name = "definition.granted"
    schema_version = 2
    agent_type: AgentType
    name: Name
    digest: Digest
    network: bool = False
    host_python: bool = False
    endpoints: list[EndpointName] = pydantic.Field(default_factory=list, max_length=64)
    reason: Annotated[str, pydantic.StringConstraints(max_length=2000)] | None = None
    # Its runs' caps (None: props' defaults, props.core.domain.caps) and the ceilings a
    # plan may raise them to for one critic.
    max_events: EventCap | None = None
    max_bytes: ByteCap | None = None
    ceiling_events: EventCap | None = None
    ceiling_bytes: ByteCap | None = None

    @pydantic.model_validator(mode="after")
    def _caps_under_ceilings(self) -> DefinitionGranted:
        for cap, ceiling in (("max_events", "ceiling_events"), ("max_bytes", "ceiling_bytes")):
            if None not in (low := getattr(self, cap), high := getattr(self, ceiling)) \
                    and low > high:
                raise ValueError(f"{cap} ({low:,}) is over {ceiling} ({high:,})")
        return self


@REGISTRY.upcaster("definition.granted", 1)
def _granted_v1(data: dict[str, Any]) -> dict[str, Any]:
    return data  # v2 only added the caps and their ceilings, with defaults


@REGISTRY.register
class GatewayCalled(Event):
    """One call a run made through the gateway, and what became of it."""

    type_name = "gateway.called"
    run_id: uuid.UUID
    endpoint: EndpointName | None = None  # None: the run named none it may use
    outcome: GatewayOutcome
    http_status: int | None = pydantic.Field(default=None, ge=100, le=599)
    tokens_in: Tokens = 0
    tokens_out: Tokens = 0
    cost_usd: Usd = 0.0
    latency_ms: float = pydantic.Field(default=0.0, ge=0, le=10**8, allow_inf_nan=False)
