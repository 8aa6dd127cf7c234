"""The closed sets of words props uses, as types and as tuples, and the limits a user may set.

They cost nothing to import (no pydantic, no driver), so the command line offers them as
choices without loading the catalog; the catalog's models, the API and the services use the
same ones.
"""

from __future__ import annotations

from typing import Literal, get_args

AgentType = Literal["critic", "grader"]
# A run's statuses, declared once: the terminal ones are those a run.finished may carry.
TerminalStatus = Literal["completed", "failed", "timed_out", "budget_exceeded", "cancelled"]
OpenStatus = Literal["requested", "running"]
RunStatus = Literal[OpenStatus, TerminalStatus]
Severity = Literal["info", "low", "medium", "high", "critical"]
Scope = Literal["read", "request", "push", "review", "admin"]  # what an API token may do

# The reactors (each is its `name`) and the services `props serve --only` names.
ReactorName = Literal["launcher", "grader", "supervisor", "evaluations"]
ServiceName = Literal[ReactorName, "projections"]

# A snapshot's file over this many bytes is refused (`props specimens ... --max-file-bytes`).
MAX_SPECIMEN_FILE_BYTES = 1024 * 1024
# A snapshot's distinct file contents, summed, over this many bytes are refused: what a
# snapshot folder may hold on disk (identical files are one file, hard-linked at every path)
# and what writing, validating or syncing it holds in memory. Past it, `from-git`,
# `from-dataset` and `from-diff` write nothing, and `validate`/`sync` refuse the folder.
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024

# What one run's agent may report: the catalog's bounds (a run's sums fit by construction),
# and the caps a run gets unless the operator's grant says otherwise (props.core.domain.caps,
# where the defaults' measurement is), with the ceilings a plan may raise them to.
MAX_RUN_EVENTS = 1_000_000
MAX_RUN_BYTES = 2**40
DEFAULT_MAX_EVENTS = 100_000
DEFAULT_MAX_BYTES = 64 * 2**20
DEFAULT_CEILING_EVENTS = MAX_RUN_EVENTS
DEFAULT_CEILING_BYTES = 2**30

RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
TERMINAL_STATUSES: tuple[TerminalStatus, ...] = get_args(TerminalStatus)
SCOPES: tuple[Scope, ...] = get_args(Scope)
REACTORS: tuple[ReactorName, ...] = get_args(ReactorName)
SERVICES: tuple[ServiceName, ...] = get_args(ServiceName)

# The reference critic's checks, by the names its `config.checks` takes (the critic's own
# table, `reference_critic.CHECKS`, has the same keys: `tests/test_first_hour.py` holds it).
REFERENCE_CHECKS: tuple[str, ...] = (
    "open-without-with", "swallowed-exception", "bare-except", "mutable-default",
    "truncated-product", "slice-minus-one", "zip-without-strict", "compare-to-none")
