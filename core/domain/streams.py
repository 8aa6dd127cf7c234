"""The names of the log's streams, and of scorers (NAME@VERSION): each written once.

A stream is `<category>-<id>`; the category says which module of the catalog its events come
from. SQL that selects streams by name (`stream_id LIKE 'run-%'`) follows the same patterns.
"""

from __future__ import annotations

import uuid

MAX_VERSION = 2**31 - 1  # a scorer's version is a PostgreSQL integer

RunId = uuid.UUID | str
# A run named by people: its id, or the start of it (4 hex digits at least; tables show 8),
# as git takes a commit's. The CLI, the API and the viewer's URLs all take these
# (run_requests.resolve finds the run).
RUN_REF = r"^[0-9a-fA-F-]{4,36}$"
SHORTEST_PREFIX = 4


RUN = "run"  # the category of the runs' streams
GRADING = "grading"  # the category of the grades' streams


def run(run_id: RunId) -> str:
    """A critic's or grader's run: request, container, prompt, LLM calls, issues, finish."""
    return f"{RUN}-{run_id}"


def run_id_of(stream_id: str) -> uuid.UUID:
    """The run a run's stream is of (`run`'s inverse); ValueError for another stream."""
    category, _, rest = stream_id.partition("-")
    if category != RUN:
        raise ValueError(f"{stream_id!r} is not a run's stream")
    return uuid.UUID(rest)


def grading(run_id: RunId, scorer: str) -> str:
    """The grades of one run under one scorer (NAME@VERSION)."""
    return f"{GRADING}-{run_id}-{scorer}"


def is_grading(stream_id: str) -> bool:
    """Whether the stream holds grades (`grading`'s)."""
    return stream_id.startswith(f"{GRADING}-")


def scorer_of_grading(stream_id: str, run_id: RunId) -> str:
    """The scorer (NAME@VERSION) whose grades of `run_id` a grading stream holds."""
    return stream_id.removeprefix(grading(run_id, ""))


def judge(run_id: RunId, scorer: str) -> str:
    """An LLM judge's requests and answers while grading one run."""
    return f"judge-{run_id}-{scorer}"


def verification(verification_id: uuid.UUID) -> str:
    """A scorer's verification on a cohort: each run replayed under a candidate that asks a
    model (its outcome goes to the scorer's own stream)."""
    return f"verification-{verification_id}"


def scorer(name: str) -> str:
    """A scorer's registrations and activations, all its versions."""
    return f"scorer-{name}"


SNAPSHOT = "snapshot"  # the category of the snapshots' streams


def snapshot(slug: str) -> str:
    """The versions of one snapshot (its files and ground truth), and its retirement."""
    return f"{SNAPSHOT}-{slug}"


def endpoint(name: str) -> str:
    """A model endpoint's registrations (the operator's; the gateway forwards to it)."""
    return f"endpoint-{name}"


def gateway(run_id: RunId) -> str:
    """The model calls the gateway forwarded, or refused, for one run."""
    return f"gateway-{run_id}"


def definition(agent_type: str) -> str:
    """The pushed definitions of critics, or of graders."""
    return f"definition-{agent_type}"


def reactor(name: str) -> str:
    """What a reactor records of its own (the events it parked)."""
    return f"reactor-{name}"


def launcher(name: str) -> str:
    """What a launcher records of itself as it starts (capacity, engine, lease)."""
    return f"launcher-{name}"


def evaluation(name: str) -> str:
    """An evaluation's plans (each version), and how each run of it ended."""
    return f"evaluation-{name}"


def retention(run_id: RunId) -> str:
    return f"retention-{run_id}"


def review(run_id: RunId) -> str:
    """People's verdicts on the grades of one run."""
    return f"review-{run_id}"


def imported(archive_id: str) -> str:
    """What one import of an export file brought."""
    return f"import-{archive_id}"


def trusted_signers() -> str:
    """The operator's decisions on whose signed export files this deployment trusts."""
    return "signers-trusted"


def ref(name: str, version: int) -> str:
    """A scorer's NAME@VERSION."""
    return f"{name}@{version}"


def parse_ref(text: str) -> tuple[str, int]:
    """(name, version) of NAME@VERSION; ValueError saying what is wrong otherwise."""
    name, at, version = text.partition("@")
    if not name or not at or not version.isdigit() or not 1 <= int(version) <= MAX_VERSION:
        raise ValueError(f"{text!r} is not NAME@VERSION (a version is a number from 1 to "
                         f"{MAX_VERSION})")
    return name, int(version)
