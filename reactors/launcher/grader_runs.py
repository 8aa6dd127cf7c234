"""Graders in containers: what a grader run is given, and how its grades are checked.

A grader definition (an image, `props definitions push --type grader`) is a scorer of its
own: it is registered as `<definition name>@<n>` (the n-th digest pushed under that name),
with the digest as its code hash. A grader run grades one snapshot: the launcher gives it,
read-only under PROPS_GRADING_DIR,
- `ground_truth.json`: the snapshot's ground truth (graders, unlike critics, must see it);
- `issues.jsonl`: the issues of finished critic runs on that snapshot that this scorer has
  not graded yet, one `{"run_id", "issue_id", "locations"}` per line;
- `scorer.json`: the scorer reference every grade must carry.
The grader reports `grade.emitted` events. The launcher accepts a grade only for an issue it
was given and with exactly that scorer reference, and appends it to the grading stream of the
critique run under the id re-scoring would give it: a grade is stored once, whoever emits it.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from pathlib import Path

import orjson

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_sync
from props.core.log import errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.core.scoring import grade_ids, rescoring
from props.reactors import grader

GROUND_TRUTH = "ground_truth.json"
ISSUES = "issues.jsonl"
SCORER = "scorer.json"
_NAMESPACE = uuid.UUID("2d6a9f3e-8c41-4b7a-9e55-a1c3f0d2b7e4")


async def scorer_for(store: EventStore, definition: catalog.DefinitionPushed,
                     ) -> catalog.ScorerRegistered:
    """The scorer a grader definition is: registered on first use, one version per digest."""
    stream = streams.scorer(definition.name)
    code_hash = definition.digest.removeprefix("sha256:")
    records = await store.read_stream(stream)
    versions = [r.event for r in records if isinstance(r.event, catalog.ScorerRegistered)]
    for v in versions:
        if v.code_hash == code_hash:
            return v
    registered = catalog.ScorerRegistered(
        name=definition.name, version=len(versions) + 1, code_hash=code_hash,
        settings=definition.config, deterministic=False)
    event_id = uuid.uuid5(_NAMESPACE, f"register:{definition.name}:{code_hash}")
    try:
        await store.append(stream, [NewEvent(registered, event_id)],
                           expected_version=len(records))
    except errors.ConcurrencyConflict:
        return await scorer_for(store, definition)  # registered meanwhile: read it again
    return registered


@dataclasses.dataclass
class GradingTask:
    """What one grader run grades, and what its grades must look like."""

    scorer: catalog.ScorerRef
    issues: dict[tuple[uuid.UUID, str], list[catalog.Location]]

    def check(self, grade: catalog.GradeEmitted) -> None:
        if grade.scorer != self.scorer:
            raise errors.InvalidEvent("a grade carries another scorer than the grader's")
        if (grade.critique_run_id, grade.critique_issue_id) not in self.issues:
            raise errors.InvalidEvent("a grade for an issue the grader was not given")


async def pending(store: EventStore, slug: str, scorer: catalog.ScorerRegistered, *,
                  include_graded: bool = False,
                  ) -> dict[tuple[uuid.UUID, str], list[catalog.Location]]:
    """Issues of finished critic runs on `slug` that `scorer` has not graded (or all of
    them, `include_graded`), from the log."""
    ref = f"{scorer.name}@{scorer.version}"
    out: dict[tuple[uuid.UUID, str], list[catalog.Location]] = {}
    for run in await grader.finished_runs(store):
        if run.snapshot != slug:
            continue
        graded = set() if include_graded else {
            r.event.critique_issue_id
            for r in await store.read_stream(streams.grading(run.run_id, ref))
            if isinstance(r.event, catalog.GradeEmitted)}
        for issue_id, locations in rescoring.parse_issues(run).items():
            if issue_id not in graded and not isinstance(locations, str):
                out[(run.run_id, issue_id)] = locations
    return out


async def task_for(store: EventStore, definition: catalog.DefinitionPushed,
                   requested: catalog.RunRequested, *, include_graded: bool = False,
                   ) -> tuple[GradingTask, catalog.GroundTruth]:
    history = await specimen_sync.history_of(store, requested.example.snapshot)
    if history is None:
        raise errors.PropsError(f"snapshot {requested.example.snapshot} is not in the log")
    snapshot = history.latest
    registered = await scorer_for(store, definition)
    scorer = catalog.ScorerRef(name=registered.name, version=registered.version,
                               code_hash=registered.code_hash,
                               ground_truth_hash=snapshot.ground_truth_hash)
    issues = await pending(store, snapshot.slug, registered, include_graded=include_graded)
    return GradingTask(scorer, issues), snapshot.ground_truth


async def task_of_run(store: EventStore, definition: catalog.DefinitionPushed,
                      requested: catalog.RunRequested) -> GradingTask | None:
    """What a grader run's last reports may grade, for an attempt that finds its container
    already exited (None for a critic run): what it was given, issues graded meanwhile
    too."""
    if requested.agent_type != "grader":
        return None
    task, _gt = await task_for(store, definition, requested, include_graded=True)
    return task


def write_inputs(task: GradingTask, gt: catalog.GroundTruth, target: Path) -> None:
    """The grader's inputs, read-only, in `target` (written anew on a restart)."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    (target / GROUND_TRUTH).write_bytes(orjson.dumps(gt.model_dump()))
    (target / SCORER).write_bytes(orjson.dumps(task.scorer.model_dump()))
    (target / ISSUES).write_bytes(b"".join(
        orjson.dumps({"run_id": str(run), "issue_id": issue,
                      "locations": [loc.model_dump() for loc in locs]}) + b"\n"
        for (run, issue), locs in sorted(task.issues.items())))
    for f in target.iterdir():
        f.chmod(0o444)


def route(grade: catalog.GradeEmitted) -> tuple[str, uuid.UUID]:
    """Where a checked grade goes, and its id: the same as re-scoring would give it."""
    s = grade.scorer
    return (streams.grading(grade.critique_run_id, streams.ref(s.name, s.version)),
            grade_ids.grade_id(grade))
