"""The settings of `props serve`: a TOML file, environment variables over it, flags over both.

The file is `--config FILE` or `$PROPS_CONFIG_FILE`; every key can be overridden by
`PROPS_<KEY>` in the environment (e.g. `PROPS_HTTP=0.0.0.0:8080`, `PROPS_AUTO_MIGRATE=true`,
`PROPS_ONLY=launcher,grader`), and by the command's flags. See tools/props.example.toml.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import pydantic

from props.core.domain.vocabulary import ServiceName
from props.core.log import errors
from props.core.log.events import validation_problems


class ServiceConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    dsn: str | None = None  # the database; PROPS_DSN overrides it like any key
    only: list[ServiceName] | None = None  # every service when unset
    # "auto", or a registered runtime's name (props.reactors.runtimes.runtime_registry checks
    # it is one)
    runtime: str = pydantic.Field("auto", pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    max_concurrent: int = pydantic.Field(8, ge=1, le=1000)  # the launcher's capacity
    # Several launchers share the queue, each with its name, engine and capacity.
    launcher_name: str = pydantic.Field("launcher", pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    engine: str | None = pydantic.Field(None, pattern=r"^(unix|tcp|http|https)://[^\s@]+$")
    lease_seconds: float = pydantic.Field(30.0, ge=1, le=86_400)
    # How long a run waits for a container engine that does not answer before it fails as
    # engine_unreachable (retryable), giving back its slot meanwhile.
    engine_wait: float = pydantic.Field(120.0, ge=1, le=86_400)
    # Agents over TCP, for a launcher not on the database's host: HOST:PORT they connect
    # to, the TLS they require, the engine network their containers join.
    agent_database: str | None = None
    agent_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca",
                           "verify-full"] = "require"
    agent_network: str = pydantic.Field("bridge", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    # Gone: no variable of this environment reaches a run. Kept to refuse old settings with
    # what to do instead (a key is an endpoint's, held by the model gateway).
    agent_env: list[str] = pydantic.Field(default_factory=list, max_length=64)
    # Local definitions whose command is not one of props' own agents run as this service's
    # user on this host: only when the operator wrote those commands.
    trust_local_commands: bool = False
    # The engine's host network gives an agent every loopback service of the host.
    unsafe_agent_network: bool = False
    http: str | None = None  # HOST:PORT of the JSON API
    # Each API token's share: its runs requested and not finished, the cases of its open
    # evaluations, its open evaluations (over one: 429, nothing written).
    quota_runs_in_flight: int = pydantic.Field(100, ge=1, le=1_000_000)
    quota_cases_queued: int = pydantic.Field(2_000, ge=1, le=1_000_000)
    quota_evaluations_open: int = pydantic.Field(5, ge=1, le=10_000)
    registry: str | None = None  # HOST:PORT of the registry proxy
    registry_upstream: str | None = None  # URL of the registry it forwards to
    registry_pull_from: str | None = None  # where engines pull images (default: upstream)
    # What one token may upload to the registry in 24 h (blobs and manifests).
    registry_upload_quota_mb: int = pydantic.Field(8192, ge=1, le=10**9)
    # Of that, blobs no manifest of the token names yet (a push's layers before its manifest).
    registry_unreferenced_mb: int = pydantic.Field(2048, ge=1, le=10**9)
    auto_migrate: bool = False  # apply pending migrations at start
    auto_sync_specimens: Path | None = None  # sync this specimens directory at start
    log_format: Literal["text", "json"] = "text"
    # Seconds to wait for the database at start (a server still booting) before giving up
    # with exit 69; once connected, outages are ridden out however long they last.
    connect_wait: float = pydantic.Field(60.0, ge=0, le=86_400)
    # Seconds a stop (SIGTERM, Ctrl-C) may take: what is in hand then is left (and said so)
    # for a restart to take up again.
    stop_seconds: float = pydantic.Field(10.0, ge=0.1, le=3_600)

    @pydantic.field_validator("agent_env")
    @classmethod
    def _gone(cls, names: list[str]) -> list[str]:
        if names:
            raise ValueError("agent_env is gone: no key enters a run any more; register the "
                             "model's endpoint with its key's variable (props endpoints add "
                             "NAME --base-url URL --key-env VARIABLE) and the launcher's "
                             "gateway attaches the key; remove agent_env")
        return names

    @pydantic.model_validator(mode="after")
    def _host_network_is_unsafe(self) -> ServiceConfig:
        if self.agent_network == "host" and not self.unsafe_agent_network:
            raise ValueError("agent_network host gives every agent every loopback service of "
                             "this host (a trust-auth database, the registry): use a network "
                             "whose egress reaches only the database, or set "
                             "unsafe_agent_network to accept it")
        return self

    @pydantic.model_validator(mode="after")
    def _registry_needs_upstream(self) -> ServiceConfig:
        if self.registry and not self.registry_upstream:
            raise ValueError("registry needs registry_upstream (the registry to forward to)")
        return self


# Each setting's flag has its name (with - for _), but one: `--sync-specimens`.
FLAG_NAMES = {"auto_sync_specimens": "sync_specimens"}


def _from_env(field: str) -> Any:
    value = os.environ.get(f"PROPS_{field.upper()}")
    if value is None or value == "":
        return None
    if field in ("only", "agent_env"):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def load(args: argparse.Namespace) -> ServiceConfig:
    path = args.config or (Path(p) if (p := os.environ.get("PROPS_CONFIG_FILE")) else None)
    settings: dict[str, Any] = {}
    where = "the flags and PROPS_* variables"
    if path is not None:
        where = f"{path} (with the flags and PROPS_* variables over it)"
        try:
            settings = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise errors.ConfigurationError(f"cannot read the config file {path}: {exc}") \
                from exc
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise errors.ConfigurationError(f"the config file {path} is not TOML: {exc}") \
                from exc
    for field in ServiceConfig.model_fields:
        if (value := _from_env(field)) is not None:
            settings[field] = value
    for field in ServiceConfig.model_fields:
        if (value := getattr(args, FLAG_NAMES.get(field, field), None)) is not None:
            settings[field] = value
    try:
        return ServiceConfig.model_validate(settings)
    except pydantic.ValidationError as exc:
        raise errors.ConfigurationError(
            f"bad service settings in {where}: {validation_problems(exc)}") from exc
