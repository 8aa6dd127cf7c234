"""A run's environment is declared, never inherited.

A container (or a local process) gets the variables props sets for it and, of the launcher's
own environment, only those an operator allow-lists by name (`agent_env` in the service's
settings). A definition picks from that list by naming a variable (`api_key_env`); it cannot
name anything else. Nothing props itself reads is ever passable: no `PROPS_*` (the service's
and the owner's connection strings, its home), no `PG*` (libpq's password and service file),
and no value that holds one of props' own passwords, whatever the variable is called. A
definition that names anything else fails its run at launch (`secret_refused`), so an author
learns why instead of getting a run that quietly had no key. A secret passed is recorded by
its name only: the value never enters the log, the container's labels or its spec on disk.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from props.core.log import embedded, errors

# Variables whose values are props' or libpq's secrets (connection strings, passwords).
HOLDS_SECRETS = re.compile(r"^(PROPS_|PG)|^DATABASE_URL$")
# Names no allow-list may hold: those, and what changes how the run's interpreter or loader
# behaves (props sets the few of these a run gets).
NEVER_PASSED = re.compile(HOLDS_SECRETS.pattern + r"|^(PYTHON\w*|LD_\w+|PATH|HOME)$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class SecretRefused(errors.PropsError):
    """A definition names an environment variable the service does not pass to runs."""

    exit_code = 77


def check_allow_list(names: Iterable[str]) -> tuple[str, ...]:
    """The operator's allow-list, each name checked: a name props itself reads is refused
    here, at start, rather than at the first run that names it."""
    out = []
    for name in names:
        if not NAME.match(name):
            raise errors.ConfigurationError(f"agent_env: {name!r} is not a variable name")
        if NEVER_PASSED.match(name):
            raise errors.ConfigurationError(
                f"agent_env: {name} can never be passed to a run (props and libpq read it: "
                f"it may hold a password of the service's); remove it from agent_env")
        out.append(name)
    return tuple(sorted(set(out)))


def _props_secrets(environ: Mapping[str, str], service_dsn: str) -> list[str]:
    """Values that must never reach a run: the service's password, the embedded server's
    passwords, and every value of a variable props or libpq reads (at least 8 characters: a
    shorter value such as PGPORT's would match keys by chance, and is no secret)."""
    found = [v for k, v in environ.items() if HOLDS_SECRETS.match(k) and len(v) >= 8]
    password = re.match(r"^[a-z]+://[^:/@]*:([^@]+)@", service_dsn)
    if password:
        found.append(password.group(1))
    try:
        stored = json.loads(embedded.credentials_path(embedded.default_home()).read_text())
    except (OSError, ValueError):
        stored = {}
    if isinstance(stored, dict):
        found += [v for v in stored.values() if isinstance(v, str) and len(v) >= 8]
    return found


@dataclasses.dataclass(frozen=True)
class AgentEnvironment:
    """What of the launcher's environment runs may be given: the allow-listed names."""

    allowed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed", check_allow_list(self.allowed))

    def secrets_for(self, config: Mapping[str, Any], service_dsn: str,
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables a definition's config asks for (`api_key_env`), from the launcher's
        environment; refused (SecretRefused, no value read) unless allow-listed."""
        environ = os.environ if environ is None else environ
        wanted = config.get("api_key_env")
        if wanted is None or wanted == "":
            return {}
        if not isinstance(wanted, str) or wanted not in self.allowed:
            allowed = ", ".join(self.allowed) or "none"
            raise SecretRefused(
                f"the definition names api_key_env {str(wanted)[:64]!r}, which the service "
                f"does not pass to runs (allowed: {allowed}; an operator adds a name to "
                f"agent_env in the service's settings)")
        value = environ.get(wanted)
        if value is None:
            return {}
        if any(secret in value for secret in _props_secrets(environ, service_dsn)):
            raise SecretRefused(f"{wanted} holds a password of props' own: it is never "
                                f"passed to a run")
        return {wanted: value}
