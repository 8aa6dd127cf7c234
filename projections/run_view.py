"""One run as an analyst reads it: its prompt, its LLM conversation, its container logs, and
its issues beside the code with every scorer's match, and the defects no issue found.

The viewer renders these; they are read models, never written. What a run did comes from
its own events (and the blobs they name: nothing else is ever fetched by hash here, so no
ground-truth blob is reachable through a run); its issues and grades from the projections;
the code and the ground truth from the snapshot version in force when the run was requested
(the one it was given and is graded against). Large runs are read a page at a time.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import orjson

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_sync
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.core.scoring import reviews, scorers
from props.schema import queries

_Q = queries.load("run_view")
CONTEXT_LINES = 3  # shown above and below a highlighted range


def text_of(data: bytes) -> str:
    """Bytes an agent or a specimen wrote, as text: never an error, whatever the bytes."""
    return data.decode("utf-8", errors="replace")


# -- the conversation ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclasses.dataclass
class Turn:
    """One model call: the messages new since the previous call, and the answer."""

    request_id: str
    model: str
    sent: list[Message]
    answer: Message | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class Transcript:
    prompt: str | None
    turns: list[Turn]  # this page's
    total_turns: int


def _message(data: bytes | None) -> Message:
    if data is None:
        return Message("missing", "(this blob is not stored)")
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Message("raw", text_of(data))
    if isinstance(parsed, dict) and isinstance(parsed.get("content"), str):
        text = parsed["content"]
        calls = parsed.get("tool_calls")  # an agentic critic's turn: what it called
        if isinstance(calls, list) and calls:
            text += ("\n" if text else "") + orjson.dumps(calls).decode()
        return Message(str(parsed.get("role", "?"))[:40], text)
    return Message("raw", text_of(data))


async def transcript(store: EventStore, events: list[RecordedEvent], page: int = 1,
                     per_page: int = 50) -> Transcript:
    """The run's prompt and the `page`-th `per_page` model calls, from the blobs its
    own events name. Each call re-sends the conversation so far: shown once, as it grew."""
    prompt_sha = None
    requests: list[catalog.LlmRequested] = []
    answers: dict[str, catalog.LlmResponded] = {}
    for rec in events:
        e = rec.event
        if isinstance(e, catalog.PromptComposed):
            prompt_sha = e.prompt_sha256
        elif isinstance(e, catalog.LlmRequested):
            requests.append(e)
        elif isinstance(e, catalog.LlmResponded):
            answers[e.request_id] = e
    seen: set[str] = set()  # messages sent by earlier calls (of any page)
    shown: list[tuple[catalog.LlmRequested, list[str]]] = []
    first = (page - 1) * per_page
    for i, req in enumerate(requests):
        new = [sha for sha in req.message_sha256s if sha not in seen]
        seen.update(req.message_sha256s)
        if first <= i < first + per_page:
            shown.append((req, new))
        answer = answers.get(req.request_id)
        if answer is not None:  # the answer comes back as the next call's last message
            seen.add(answer.response_sha256)
    wanted = {sha for _, new in shown for sha in new}
    wanted |= {answers[r.request_id].response_sha256 for r, _ in shown if r.request_id in answers}
    wanted |= {prompt_sha} if prompt_sha else set()
    blobs = await store.get_blobs(sorted(wanted)) if wanted else {}
    turns = []
    for req, new in shown:
        turn = Turn(req.request_id, req.model, [_message(blobs.get(s)) for s in new])
        answer = answers.get(req.request_id)
        if answer is not None:
            turn.answer = _message(blobs.get(answer.response_sha256))
            turn.tokens_in, turn.tokens_out = answer.tokens_in, answer.tokens_out
            turn.cost_usd, turn.latency_ms = answer.cost_usd, answer.latency_ms
        turns.append(turn)
    return Transcript(text_of(blobs[prompt_sha]) if prompt_sha in blobs else None,
                      turns, len(requests))


async def logs(store: EventStore, events: list[RecordedEvent]) -> str | None:
    """The container's output, as its `container.exited` event names it."""
    sha = next((e.logs_sha256 for e in (r.event for r in reversed(events))
                if isinstance(e, catalog.ContainerExited) and e.logs_sha256), None)
    found = (await store.get_blobs([sha])).get(sha) if sha else None
    return text_of(found) if found is not None else None


# -- the issues beside the code -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Line:
    number: int
    text: str
    marked: bool


@dataclasses.dataclass(frozen=True)
class Excerpt:
    """Lines of one file around a location, the location's own lines marked."""

    file: str
    ranges: str  # "12-14, 30-30"
    lines: list[Line]
    missing: bool = False  # the file is not in the snapshot (the agent named another)


@dataclasses.dataclass(frozen=True)
class Truth:
    """A TP occurrence or a decoy, with its own lines and rationale."""

    kind: str  # "tp" | "decoy"
    label: str  # "T1#2" | "D3"
    rationale: str
    excerpts: list[Excerpt]


# What a grade says of an issue, in one word each reader shows: a find (a TP matched at
# full credit: what recall counts), a partial match (a TP at partial credit: not a find), a
# known decoy, nothing, or no grade at all.
KINDS = ("find", "partial", "decoy", "none", "unscorable")
UNGRADED = "ungraded"  # an issue the scorer has not graded (yet)


@dataclasses.dataclass(frozen=True)
class Grade:
    scorer: str
    match: str  # "TP T1#1", "decoy D2", "none", "unscorable: ..."
    grade: float | None
    kind: str  # one of KINDS


@dataclasses.dataclass(frozen=True)
class Issue:
    issue_id: str
    rationale: str
    severity: str | None
    excerpts: list[Excerpt]
    grades: list[Grade]
    truths: list[Truth]  # what the grades matched it to, each once


@dataclasses.dataclass(frozen=True)
class Issues:
    issues: list[Issue]  # this page's
    total: int  # the run's issues (of the kind `match` names, when it names one)
    missed: list[Truth]  # TP occurrences in scope that no issue found (under `scorer`)
    scorer: str | None
    snapshot_version: int | None
    kinds: dict[str, int]  # the run's issues by the kind of their grade under `scorer`
    match: str | None = None  # the kind the page shows (None: every issue)


class _Code:
    """The snapshot version's files, fetched once each, as lines."""

    def __init__(self, store: EventStore, version: catalog.SnapshotSynced | None) -> None:
        self.store = store
        self.shas = {f.path: f.sha256 for f in version.files} if version else {}
        self.lines: dict[str, list[str]] = {}

    async def load(self, paths: set[str]) -> None:
        wanted = {self.shas[p]: p for p in paths if p in self.shas and p not in self.lines}
        for sha, data in (await self.store.get_blobs(sorted(wanted))).items():
            self.lines[wanted[sha]] = text_of(data).splitlines()

    def excerpt(self, location: dict[str, Any]) -> Excerpt:
        file, ranges = str(location["file"]), location.get("ranges") or []
        spans = [(int(r["start"]), int(r["end"])) for r in ranges]
        label = ", ".join(f"{a}-{b}" for a, b in spans) or "the whole file"
        lines = self.lines.get(file)
        if lines is None:
            return Excerpt(file, label, [], missing=True)
        # Clamped to the file: an issue may name lines 1..3,000,000,000 (stored before the
        # catalog bounded them), and a page's work is bounded by the file, not by the claim.
        spans = [(max(1, a), min(len(lines), b)) for a, b in spans if a <= len(lines)]
        marked = {n for a, b in spans for n in range(a, b + 1)}
        shown = sorted({n for a, b in spans
                        for n in range(max(1, a - CONTEXT_LINES),
                                       min(len(lines), b + CONTEXT_LINES) + 1)})
        if not spans:
            shown = list(range(1, min(len(lines), 2 * CONTEXT_LINES) + 1))
        return Excerpt(file, label, [Line(n, lines[n - 1], n in marked) for n in shown])


def _truths(gt: catalog.GroundTruth | None) -> dict[str, tuple[str, Any, Any]]:
    """Every TP occurrence ("T1#2") and decoy ("D3"): (kind, item, its locations)."""
    found: dict[str, tuple[str, Any, Any]] = {}
    for tp in gt.true_positives if gt else []:
        for n, occ in enumerate(tp.occurrences, start=1):
            found[f"{tp.id}#{n}"] = ("tp", tp, [loc.model_dump() for loc in occ.locations])
    for fp in gt.false_positives if gt else []:
        found[fp.id] = ("decoy", fp, [loc.model_dump() for occ in fp.occurrences
                                      for loc in occ.locations])
    return found


def _match(edge: dict[str, Any]) -> tuple[str, str | None, str]:
    """What a grading edge matched: its words, the truth's label, and its kind (KINDS)."""
    if edge.get("unscorable"):
        return f"unscorable: {edge['unscorable']}", None, "unscorable"
    if edge.get("tp_id"):
        label = f"{edge['tp_id']}#{edge['tp_occurrence']}"
        if (edge.get("grade") or 0) >= scorers.FIND_GRADE:
            return f"find {label}", label, "find"
        return f"partial {label}", label, "partial"
    if edge.get("fp_id"):
        return f"decoy {edge['fp_id']}", str(edge["fp_id"]), "decoy"
    return "none", None, "none"


@dataclasses.dataclass(frozen=True)
class _IssueRow:
    issue_id: str
    rationale: str | None
    severity: str | None
    locations: str  # JSON
    grades: str  # JSON: every scorer's grade of the issue


@dataclasses.dataclass(frozen=True)
class _Finds:
    scorer_name: str
    scorer_version: int
    found: list[str] | None  # "T1#2": the TP occurrences its issues found


_ISSUES_PAGE = queries.typed("run_view", "issues_page", _IssueRow)
_FINDS = queries.typed("run_view", "finds", _Finds)


async def issues(store: EventStore, run: dict[str, Any], page: int = 1, per_page: int = 100,
                 scorer: str | None = None, match: str | None = None) -> Issues:
    """The `page`-th `per_page` issues of a run (by file and line), each at its lines with
    every scorer's grade, and the TP occurrences in scope that no issue found under
    `scorer` (default: the active scorer, else the first that graded the run); with
    `match` (a kind of KINDS, or UNGRADED), only the issues whose grade under it is one."""
    run_id: uuid.UUID = run["run_id"]
    history = await specimen_sync.history_of(store, str(run["snapshot"]))
    version = history.in_force_at(run["requested_at"]) if history else None
    gt = version.ground_truth if version else None
    truths = _truths(gt)
    found_by = await store.sql.rows(_FINDS, run_id, scorers.FIND_GRADE)
    scorer = scorer or await _active(store, [_ref(r) for r in found_by])
    under = (*scorer_key(scorer), scorers.FIND_GRADE)
    kinds = {r["kind"]: int(r["issues"])
             for r in await store.sql.fetch(_Q["kinds"], run_id, *under)}
    match = match if scorer and match in (*KINDS, UNGRADED) else None
    rows = await store.sql.rows(_ISSUES_PAGE, run_id, per_page, (page - 1) * per_page,
                                match, *under)
    total = kinds.get(match, 0) if match else sum(kinds.values())
    found = {label for r in found_by if _ref(r) == scorer
             for label in r.found or []}
    files_hash = run.get("files_hash") or None  # the projections' WHOLE_SNAPSHOT is ""
    scope = next((s.occurrences for s in gt.scopes if s.files_hash == files_hash),
                 []) if gt else []
    missed = [label for label in scope if label not in found and label in truths]
    code = _Code(store, version)
    parsed = [(r, orjson.loads(r.locations), orjson.loads(r.grades)) for r in rows]
    paths = {loc["file"] for _, locs, _ in parsed for loc in locs}
    used = {label for _, _, edges in parsed for e in edges
            if (label := _match(e)[1]) is not None} | set(missed)
    paths |= {loc["file"] for label in used if label in truths for loc in truths[label][2]}
    await code.load(paths)

    def truth(label: str) -> Truth | None:
        if label not in truths:
            return None
        kind, item, locations = truths[label]
        return Truth(kind, label, item.rationale, [code.excerpt(loc) for loc in locations])

    shown = []
    for row, locations, edges in parsed:
        matched = [_match(edge) for edge in edges]
        labels = dict.fromkeys(label for _, label, _ in matched if label)
        shown.append(Issue(
            row.issue_id, row.rationale or "", row.severity,
            [code.excerpt(loc) for loc in locations],
            [Grade(e["scorer"], m, e.get("grade"), kind)
             for e, (m, _, kind) in zip(edges, matched, strict=True)],
            [t for label in labels if (t := truth(label))]))
    return Issues(shown, total, [t for label in missed if (t := truth(label))], scorer,
                  version.version if version else None, kinds, match)


def _ref(finds: _Finds) -> str:
    return f"{finds.scorer_name}@{finds.scorer_version}"


async def shown_scorer(store: EventStore, run_id: uuid.UUID, scorer: str | None = None,
                       ) -> str | None:
    """The scorer a run's page shows it under: `scorer` when asked for, else the active
    one, else the first that graded the run (what `issues` picks, without reading them)."""
    if scorer:
        return scorer
    found_by = await store.sql.rows(_FINDS, run_id, scorers.FIND_GRADE)
    return await _active(store, [_ref(r) for r in found_by])


def scorer_key(scorer: str | None) -> tuple[str, int]:
    """(name, version) of NAME@VERSION as the page names it; one that names no scorer (a
    typo in a URL) is a key that matches no grade."""
    try:
        return streams.parse_ref(scorer) if scorer else ("", 0)
    except ValueError:
        return "", 0


async def _active(store: EventStore, graded_by: list[str]) -> str | None:
    projected = await reviews.projected_active(store)
    active = None if projected is None else f"{projected[0]}@{projected[1]}"
    if active in graded_by or not graded_by:
        return active
    return graded_by[0]


async def excerpts(store: EventStore, snapshot: str, ground_truth_hash: str,
                   groups: list[list[dict[str, Any]]]) -> list[list[Excerpt]]:
    """Each group of locations as excerpts of the snapshot version with that ground truth
    (what a reviewer reads beside a grade)."""
    history = await specimen_sync.history_of(store, snapshot)
    version = next((v for v in history.versions if v.ground_truth_hash == ground_truth_hash),
                   None) if history else None
    code = _Code(store, version)
    await code.load({loc["file"] for group in groups for loc in group})
    return [[code.excerpt(loc) for loc in group] for group in groups]
