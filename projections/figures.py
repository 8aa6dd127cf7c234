"""The analysts' figures, read from the projections: recall and precision per model,
definition and scorer, every critic run in one state, the cluster bootstrap's intervals and
the paired differences; as of the live projections or of any point of the log.

`props report` prints them, the HTTP API's `/api/scores` serves them and the demo shows
them: one definition of each number.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from props.core.domain import evaluations, streams
from props.core.log import database, errors
from props.core.log.checkpoints import Checkpoint
from props.core.log.sql import shaped
from props.core.log.store import EventStore
from props.core.scoring import gate, intervals, scorers
from props.projections import as_of as as_of_point
from props.projections import confirmation, engine, evaluation_scores, names, status
from props.schema import queries

_Q = queries.load("report")
_FIGURES = ["recall", "recall_low", "recall_high", "recall_graded", "precision",
            "precision_low", "precision_high", "partial", "known_fp", "unmatched",
            "mean_run_recall", "stddev_run_recall"]
# Then located and confirmed (props.projections.confirmation): of the TP occurrences the
# location rule found (`located`, recall's numerator), those a judge or a person confirmed,
# rejected, or has not looked at; recall counting the confirmed only, with its interval.
# Then chance (props.core.scoring.chance): recall's and graded recall's chance levels,
# recall above chance with its interval, and the runs whose chance level is not recorded.
CHANCE = ["chance", "above_chance", "above_chance_low", "above_chance_high",
          "chance_graded", "chance_missing"]
# No figure called recall counts a find nobody confirmed: what a location rule alone gives is
# `located_recall` (the figures' SQL names it recall: the names the analysts' views keep),
# and `confirmed_recall` (props.projections.confirmation) is the recall of confirmed finds.
NAMED = {"recall": "located_recall", "recall_low": "located_recall_low",
         "recall_high": "located_recall_high", "recall_graded": "located_graded",
         "mean_run_recall": "mean_run_located", "stddev_run_recall": "stddev_run_located"}
COLUMNS = ["model", "definition", "digest", "scorer", "runs",
           *(NAMED.get(k, k) for k in _FIGURES), "examples", *confirmation.FIELDS, *CHANCE]
_COUNTS = {"partial", "known_fp", "unmatched"}  # numbers of issues: whole numbers
# The report's set-based queries hash a million grades and issues: in memory, not on disk;
# and they are not compiled (over 10,000 runs and a million grades, JIT compiled for 0.27 s
# and gave back 0.1: the report took 1.63 s with it, 1.46 without). Each is planned for its
# own arguments (database.BULK): on one connection (a served API's pool) a generic plan,
# which cannot drop the "($3 IS NULL OR model = $3)" branches, made the scores statement 8
# times slower from the sixth report on (21 ms -> 170 ms, issue 56).
REPORT_SETTINGS = {**database.BULK, "work_mem": "64MB"}


@dataclasses.dataclass(frozen=True, slots=True)
class _Score:
    """A row of the scores statement: a (model, definition, scorer)'s pooled figures when
    `whole`, else one example's sums within it."""

    whole: bool
    model: str
    definition: str  # with its digest's first 12 hex digits where the name ran several
    digest: str | None  # whole, where the name ran several in scope (each its own row)
    scorer_name: str
    scorer_version: int
    snapshot: str | None
    files_hash: str | None
    runs: int
    recalled: float
    expected: float
    finds: float
    graded: float
    recall: float | None
    recall_graded: float | None
    precision: float | None
    partial: int | None
    known_fp: int | None
    unmatched: int | None
    mean_run_recall: float | None
    stddev_run_recall: float | None
    chance_recalled: float | None
    chance_graded: float | None
    chance_missing: int


@dataclasses.dataclass(frozen=True)
class Scope:
    """Which critic runs a report covers (each None for any): one model, definition,
    snapshot, and the runs one evaluation requested (every version and attempt)."""

    model: str | None = None
    definition: str | None = None
    snapshot: str | None = None
    evaluation: str | None = None

    def named(self) -> dict[str, str]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


EVERYTHING = Scope()


@dataclasses.dataclass(frozen=True)
class _Chosen:
    name: str | None
    version: int | None


# These name the projections' schema as `{schema}`: the live one, or an as-of build's.
_SCORES = queries.typed("report", "scores", _Score)
_REPORT_SCORER = queries.typed("report", "report_scorer", _Chosen)


def scorer_filter(text: str | None) -> tuple[str | None, int | None]:
    if not text:
        return None, None
    name, _, version = text.partition("@")
    try:
        number = int(version) if version else None
    except ValueError:
        raise errors.PropsError(f"--scorer {text!r} is not NAME or NAME@VERSION") from None
    if number is not None and not 1 <= number < 2**31:
        raise errors.PropsError(f"--scorer {text!r}: a version is a number from 1 to "
                                f"{2**31 - 1}")
    return name, number


async def load(store: EventStore, name: str | None = None, version: int | None = None,
               exclude_imported: bool = False, adjudicated: bool = False,
               as_of: str | None = None, advance: engine.Progress | None = None,
               scope: Scope = EVERYTHING) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The score rows, and every critic run in exactly one state under the report's scorer
    (`states_scorer`; the counts add up to `critic_runs`), and the scored runs that came
    from imported files (`imported_runs`, `imported_by_<signer>`; left out of the rows with
    `exclude_imported`). An unknown scorer is an error naming the known ones. `as_of`
    (TX:POSITION, a global position or a time): from the events up to that point only, the
    projections folded again for this report; `notes["as_of"]` names the point either way,
    so a quoted figure can be reproduced. `scope` narrows every figure and count to some
    runs (`notes["scope"]` names it); an evaluation that is not recorded is NotFound."""
    point: Checkpoint | None = None
    if scope.evaluation is not None:
        await evaluations.require(store, scope.evaluation)
    async with store.sql.acquire() as conn:
        if await conn.fetchval(_Q["projections_built"]) is None:
            raise errors.SchemaError("the projections are not built yet: run "
                                     "`props projections rebuild --all` (or `run`)")
        if as_of is None:
            schema = names.LIVE
        else:
            schema = as_of_point.SCHEMA
            point = await as_of_point.resolve(conn, as_of)
            await as_of_point.build(conn, store, point, advance)
        try:
            # One snapshot for every query (and the live checkpoints): a runner committing
            # meanwhile cannot put two points of the log into one report.
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                records, notes = await _load(conn, schema, name, version, exclude_imported,
                                             adjudicated, scope)
                if point is None:
                    found = await conn.fetch(_Q["live_points"],
                                             [p.checkpoint_name for p in engine.ALL])
                    if len(found) == 1:
                        point = Checkpoint(found[0]["tx_id"], found[0]["position"])
        finally:
            if schema == as_of_point.SCHEMA:
                await conn.execute("DISCARD TEMP")
    notes["as_of"] = None if point is None else str(point)
    # Which exact scorer graded, and whether it was verified (as the log says now).
    refs = sorted({r["scorer"] for r in records} | ({notes["states_scorer"]} if notes.get(
        "states_scorer") and "@" in notes["states_scorer"] else set()))
    notes["scorer_standing"] = {ref: await gate.figure_standing(store, ref) for ref in refs}
    # A figure read from projections behind the log says how far behind (a person's verdict
    # appended since is not in it yet): the events after the point the live projections
    # stand at (None: they stand at several); as of a point, none (folded up to it exactly).
    notes["behind_events"] = 0 if as_of is not None else \
        None if point is None else (await status.lag(store, point)).events
    return records, notes


async def _load(conn: database.Connection, schema: str, name: str | None,
                version: int | None, exclude_imported: bool, adjudicated: bool,
                scope: Scope) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The report's queries on the projections in `schema`, in the caller's transaction.
    A scope naming an evaluation narrows to its counted runs in the same snapshot (as of
    the report's point, when it has one): the rule `eval show` applies too."""
    def q(sql: str) -> str:
        return sql.replace("{schema}", schema)

    runs = None if scope.evaluation is None else \
        await evaluation_scores.counted_runs(conn, schema, scope.evaluation)
    if scope.evaluation is not None and not runs:
        raise errors.NotFound(f"no evaluation named {scope.evaluation} has requested a "
                              f"run (props eval list)")
    scoped = (scope.model, scope.definition, scope.snapshot, runs)

    if name is not None:
        known = sorted({(r["name"], r["version"]) for r in await conn.fetch(q(_Q["known_scorers"]))}
                       | {streams.parse_ref(ref) for ref in scorers.SCORERS})
        if not any(n == name and version in (None, v) for n, v in known):
            raise errors.UnknownScorer(
                f"no scorer {name}{'' if version is None else f'@{version}'} has graded or "
                f"been registered here; known: "
                f"{', '.join(f'{n}@{v}' for n, v in known) or 'none yet'}")
    settings = {**REPORT_SETTINGS, "props.exclude_imported": "on" if exclude_imported else "off",
                "props.adjudicated": "on" if adjudicated else "off"}
    await conn.execute(_Q["set_settings"], list(settings), list(settings.values()))
    found, labels = split_digests(
        shaped(_SCORES, await conn.fetch(q(_SCORES.text), name, version, *scoped)))
    rows = [r for r in found if r.whole]
    points = [r for r in found if not r.whole]
    # With the setting off no grade is replaced: no need to read them all to count none.
    overridden = await conn.fetchval(q(_Q["adjudicated_issues"]), name, version) \
        if adjudicated else 0
    chosen = shaped(_REPORT_SCORER, await conn.fetch(q(_REPORT_SCORER.text), name, version))[0]
    gaps = await conn.fetchrow(q(_Q["evidence_gaps"]), chosen.name, chosen.version, *scoped)
    assert gaps is not None
    if sum(gaps[k] for k in gaps.keys() if k != "critic_runs") != gaps["critic_runs"]:
        raise AssertionError(f"run states do not add up: {dict(gaps)}")  # the CASE: never
    imported = {r["signer"]: int(r["runs"])
                for r in await conn.fetch(q(_Q["imported_runs"]), name, version, *scoped)} \
        if await conn.fetchval(q(_Q["any_imported"])) else {}
    examples = _by_group(points)
    confirmed = await confirmation.load(conn, schema, name, version, scoped, labels)
    records = []
    for r in rows:
        key = (r.model, r.definition, r.scorer_name, r.scorer_version)
        record: dict[str, Any] = {
            "model": r.model, "definition": r.definition, "digest": r.digest,
            "scorer": f"{r.scorer_name}@{r.scorer_version}", "runs": r.runs}
        for k in _FIGURES:  # the intervals come from the bootstrap, below
            value = getattr(r, k, None)
            record[NAMED.get(k, k)] = None if value is None else \
                int(value) if k in _COUNTS else float(value)
        mine = examples.get(key, [])
        record["examples"] = len(mine)
        record["located_recall_low"], record["located_recall_high"] = intervals.ratio_interval(
            [(p.recalled, p.expected) for p in mine])
        record["precision_low"], record["precision_high"] = intervals.ratio_interval(
            [(p.finds, p.graded) for p in mine])
        record.update(confirmed.of(key, r.recalled, [((p.snapshot, p.files_hash), p.expected)
                                                     for p in mine]))
        record.update(chance_fields(r, mine))
        records.append(record)
    notes: dict[str, Any] = {k: int(gaps[k]) for k in gaps.keys()}
    notes["states_scorer"] = None if chosen.name is None else \
        chosen.name + ("" if chosen.version is None else f"@{chosen.version}")
    notes["interval_method"] = intervals.METHOD
    notes["scope"] = scope.named()
    notes["adjudicated_issues"] = int(overridden)  # grades a person's verdict replaced
    # The judges (and `human@1`) that confirmed something of these runs, and all that looked;
    # `unverified_judges`: those whose word is not counted.
    notes["confirmed_by"], notes["reviewed_by"] = \
        await confirmation.reviewers(conn, schema, runs) if confirmed.judges else ([], [])
    notes["unverified_judges"] = confirmed.unverified
    notes["differences"] = differences(points)
    notes["imported_runs"] = sum(imported.values())
    notes["imported_excluded"] = int(exclude_imported)
    notes.update({f"imported_by_{signer}": n for signer, n in imported.items()})
    return records, notes


def split_digests(found: list[_Score]) -> tuple[list[_Score], confirmation.Labels]:
    """The rows as the report names them: where a (model, definition) ran several digests
    within the report's scope (a definition pushed again under one name: another config,
    another image, another runtime), each digest is a row of its own, its definition shown
    with the digest's first 12 hex digits; where it ran one, the name alone and no digest.
    Within the scope, not the database: an evaluation that ran one digest of `reference`
    reads `reference`, whatever else was pushed under that name since. The labels, by
    (model, definition, digest), for the rows' other figures."""
    digests: dict[tuple[str, str], set[str | None]] = {}
    for r in found:
        digests.setdefault((r.model, r.definition), set()).add(r.digest)
    labels: confirmation.Labels = {}
    named = []
    for r in found:
        split = len(digests[(r.model, r.definition)]) > 1 and r.digest is not None
        label = f"{r.definition} ({r.digest[:12]})" if split and r.digest else r.definition
        labels[(r.model, r.definition, r.digest)] = label
        named.append(dataclasses.replace(r, definition=label,
                                         digest=r.digest if split else None))
    return named, labels


def chance_fields(r: _Score, examples: list[_Score]) -> dict[str, Any]:
    """A row's chance levels and recall above chance, its interval by the same cluster
    bootstrap as recall's (of recalled minus chance over expected): none at all when some
    run's chance level is not recorded (never a partial sum)."""
    if r.chance_missing or not r.expected:
        return {**dict.fromkeys(CHANCE), "chance_missing": int(r.chance_missing)}
    chance = (r.chance_recalled or 0.0) / r.expected
    low, high = intervals.ratio_interval(
        [(p.recalled - (p.chance_recalled or 0.0), p.expected) for p in examples])
    return {"chance": chance, "above_chance": r.recalled / r.expected - chance,
            "above_chance_low": low, "above_chance_high": high,
            "chance_graded": (r.chance_graded or 0.0) / r.expected, "chance_missing": 0}


def _by_group(points: list[_Score]) -> dict[tuple[str, str, str, int], list[_Score]]:
    grouped: dict[tuple[str, str, str, int], list[_Score]] = {}
    for p in points:
        grouped.setdefault((p.model, p.definition, p.scorer_name, p.scorer_version),
                           []).append(p)
    return grouped


def differences(points: list[_Score]) -> list[dict[str, Any]]:
    """For each scorer, each pair of (model, definition) rows: B's recall minus A's on the
    examples both ran, and whether a paired bootstrap over those examples says it differs."""
    grouped = _by_group(points)
    out = []
    keys = sorted(grouped)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[2:] != b[2:]:
                continue
            mine = {(p.snapshot, p.files_hash): p for p in grouped[a]}
            theirs = {(p.snapshot, p.files_hash): p for p in grouped[b]}
            shared = sorted(set(mine) & set(theirs))
            diff = intervals.paired_difference(
                [((mine[e].recalled, mine[e].expected),
                  (theirs[e].recalled, theirs[e].expected)) for e in shared])
            out.append({"scorer": f"{a[2]}@{a[3]}", "a": {"model": a[0], "definition": a[1]},
                        "b": {"model": b[0], "definition": b[1]}, "examples": diff.examples,
                        "located_recall_delta": diff.delta, "low": diff.low, "high": diff.high,
                        "significant": diff.significant})
    return out


@dataclasses.dataclass(frozen=True)
class Breakdown:
    """One scorer's pooled recall and precision, by model, definition and snapshot, and by the
    day the runs were requested: the same definitions as the report's rows, split finer."""

    per_snapshot: list[dict[str, Any]]
    by_day: list[dict[str, Any]]  # each with its `group` (model / definition) and `day`


async def breakdown(store: EventStore, scorer: tuple[str, int],
                    runs: list[uuid.UUID] | None = None) -> Breakdown:
    """`scorer`'s figures per snapshot and per day, of `runs` only when given (an
    evaluation's)."""
    name, version = scorer
    per_snapshot = await store.sql.fetch(_Q["per_snapshot"], name, version, runs)
    by_day = await store.sql.fetch(_Q["by_day"], name, version, runs)
    return Breakdown([dict(r) for r in per_snapshot], [dict(r) for r in by_day])
