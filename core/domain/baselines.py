"""Baseline critics: well-known static analyzers as critics, one definition each.

A baseline's definition names the analyzer, its exact installed version and its rule set
(all three are in its config, so in its digest): a run reports what that version with those
rules finds, and a report compares an LLM critic with it on the same defects. The analyzers
come with `props[baselines]`; the critic itself is `props.reactors.agents.baseline_critic`.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from props.core.domain import catalog, definitions
from props.core.log import errors

MODULE = "props.reactors.agents.baseline_critic"

# Each tool's rules: pyflakes, pycodestyle's errors, bugbear and bandit's checks as ruff has
# them; every test bandit ships; pylint's errors and warnings.
RULES: dict[str, tuple[str, ...]] = {"ruff": ("E", "F", "B", "S"), "bandit": ("all",),
                                     "pylint": ("E", "W")}


def config(tool: str) -> dict[str, Any]:
    """The definition's config for `tool` as installed here: its exact version and rules."""
    if tool not in RULES:
        raise errors.ConfigurationError(f"unknown baseline {tool!r}; known: {', '.join(RULES)}")
    try:
        version = importlib.metadata.version(tool)
    except importlib.metadata.PackageNotFoundError:
        raise errors.ConfigurationError(
            f"{tool} is not installed: pip install 'props[baselines]'") from None
    # "pragmas": the example's own noqa, nosec and pylint comments are ignored (in
    # the digest: a definition that honoured them reported other findings).
    return {"tool": tool, "version": version, "rules": list(RULES[tool]), "pragmas": "ignored"}


def command() -> list[str]:
    return definitions.reference_command(MODULE)


def local(tool: str) -> catalog.DefinitionPushed:
    """The baseline critic `tool` as a local command (definition `baseline-<tool>`)."""
    settings = config(tool)
    run = command()
    return catalog.DefinitionPushed(
        agent_type="critic", name=f"baseline-{tool}", tag="local", runtime="local",
        image=f"local:{MODULE}", command=run, config=settings,
        digest=definitions.local_digest(run, settings))
