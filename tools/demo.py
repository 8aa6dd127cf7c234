"""`props demo`: from nothing to a scored and re-scored evaluation, on the log.

Migrate; sync the bundled specimens; record critic runs; grade them with overlap@1; build the
projections and print the report; re-score with overlap@2 and print the comparison. At this
stage no agent runs in a container: one critic run is scripted and a dozen are simulated
(issues at known defect and decoy locations, and some noise, from a fixed seed). Running it
again reuses everything and duplicates nothing.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from rich.console import Console
from rich.progress import Progress

from props.core import catalog, database, errors, rescoring, scoring, specimen_sync
from props.core.events import Event, NewEvent
from props.core.store import START, EventStore
from props.projections import engine
from props.schema import migrate
from props.tools import report_command, scoring_commands, specimen_commands, workload

console = Console(highlight=False)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="migrate and record a sample critic run on the log",
        description="Migrate the database (PROPS_DSN, or the embedded server), append the "
        "events of one scripted critic run, and print the log. Safe to run repeatedly: "
        "each run is a new run stream.",
    )
    p.set_defaults(handler=demo_cmd)


SNAPSHOT = "notes-api/2025-10-14-00"
FILE_SET = "request_path"


def _at(file: str, start: int, end: int) -> list[catalog.Location]:
    return [catalog.Location(file=file, ranges=[catalog.LineRange(start=start, end=end)])]


def scripted_run(run_id: uuid.UUID, example: catalog.Example, prompt_sha: str,
                 message_sha: str, response_sha: str) -> list[Event]:
    """A critic run on `example` that finds one real defect, one decoy and one non-issue."""
    digest = "sha256:" + "ab" * 32
    return [
        catalog.RunRequested(run_id=run_id, agent_type="critic", definition="reviewer",
                             example=example, model="demo-model", timeout_seconds=600,
                             budget_usd=1.0, requested_by="props demo"),
        catalog.RunStarted(run_id=run_id, digest=digest),
        catalog.ContainerStarted(run_id=run_id, runtime="local",
                                 container_name=f"props-run-{run_id}", container_id="demo"),
        catalog.PromptComposed(run_id=run_id, prompt_sha256=prompt_sha, size=64),
        catalog.LlmRequested(run_id=run_id, request_id="1", model="demo-model",
                             message_sha256s=[prompt_sha, message_sha]),
        catalog.LlmResponded(run_id=run_id, request_id="1", response_sha256=response_sha,
                             tokens_in=1200, tokens_out=300, cost_usd=0.004, latency_ms=850),
        catalog.IssueReported(run_id=run_id, issue_id="i1", severity="critical",
                              rationale="search pattern is formatted into the SQL text",
                              locations=_at("notes/db.py", 77, 79)),
        catalog.IssueReported(run_id=run_id, issue_id="i2", severity="low",
                              rationale="f-string builds an IN (...) clause",
                              locations=_at("notes/db.py", 69, 71)),
        catalog.IssueReported(run_id=run_id, issue_id="i3", severity="info",
                              rationale="delete does not report which note was removed",
                              locations=_at("notes/db.py", 84, 87)),
        catalog.PhaseCompleted(run_id=run_id, phase="review", duration_seconds=1.2),
        catalog.ContainerExited(run_id=run_id, exit_code=0, duration_seconds=1.4),
        catalog.RunFinished(run_id=run_id, status="completed", tokens_in=1200,
                            tokens_out=300, cost_usd=0.004),
    ]


SCRIPTED_RUN = uuid.UUID("6d1d2c3e-0000-4000-8000-00000000d3e0")
SIMULATED_RUNS = 12


async def demo_cmd(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    dsn = database.resolve_dsn()
    console.print(f"database: {database.redact(dsn)}")
    applied = await migrate.migrate_database(dsn)
    console.print(f"schema: {len(applied)} migration(s) applied" if applied
                  else "schema: up to date (reused)")
    async with EventStore.open(dsn, max_connections=4) as store:
        samples = specimen_commands.samples_dir()
        found = specimen_commands.load_valid(samples)
        synced = await specimen_sync.sync(store, str(samples), found)
        console.print(f"specimens: {len(found)} sample snapshots, {synced.appended} new "
                      f"version(s) recorded" + ("" if synced.appended else " (reused)"))
        again = await _scripted_run(store)
        new_runs = await _simulated_runs(store)
        console.print(f"critic runs: 1 scripted + {SIMULATED_RUNS} simulated ({new_runs} new "
                      f"simulated, the rest reused); the scripted run's retried append was "
                      f"{'a no-op' if again else 'a DUPLICATE'}")
        await engine.rebuild(store)  # the runs, for the grader to select
        await _grade(store, "overlap@1", "grading every run with overlap@1")
        await engine.rebuild(store)
        records, notes = await report_command.load(store)
        report_command.print_table(records, notes)
        console.print("re-scoring every run with overlap@2 (3 lines of tolerance) ...")
        await _grade(store, "overlap@2", "re-scoring with overlap@2")
        await engine.rebuild(store)
        comparison = await rescoring.compare(store, "overlap@1", "overlap@2", _EVERY_RUN)
        scoring_commands.print_comparison(comparison)
        total = await store.pool.fetchval("SELECT count(*) FROM props.events")
        readable = sum([len(b) async for b in store.iter_all(START)])
    console.print(
        f"log: {total} event(s), {readable} readable behind the fence; "
        f"done in {time.perf_counter() - began:.1f}s\n"
        "explore: `props report`, `props compare overlap@1 overlap@2 --all`, "
        "`props events tail --from start --no-follow`, "
        '`psql "$(props db dsn --analyst)"` (the analyst role reads projections only)')
    if not comparison.complete:
        raise errors.PropsError("the comparison did not account for every run")
    return 0


_EVERY_RUN = rescoring.Selection(everything=True)


async def _scripted_run(store: EventStore) -> bool:
    """One hand-written critic run on a real file set; its id and event ids are fixed, so a
    second demo reuses it. Returns whether a retried append was a no-op."""
    snapshot = (await specimen_sync.history(store))[SNAPSHOT].latest
    file_set = next(fs for fs in snapshot.ground_truth.file_sets if fs.name == FILE_SET)
    example = catalog.Example(snapshot=SNAPSHOT, files_hash=file_set.files_hash)
    prompt_sha = await store.put_blob(b"Review these files and report every defect you find.\n")
    message_sha = await store.put_blob(b"<files of the example>")
    response_sha = await store.put_blob(b'{"issues": [{"id": "i1"}]}')
    events = scripted_run(SCRIPTED_RUN, example, prompt_sha, message_sha, response_sha)
    meta = {"correlation_id": str(SCRIPTED_RUN), "actor": "props demo"}
    batch = [NewEvent(e, uuid.uuid5(SCRIPTED_RUN, f"event-{i}"), meta)
             for i, e in enumerate(events)]
    stream = f"run-{SCRIPTED_RUN}"
    await store.append(stream, batch, expected_version=0)
    retried = await store.append(stream, batch[-1:])
    return retried.already_stored


async def _simulated_runs(store: EventStore) -> int:
    """A dozen runs of two "models" across the samples, with reproducible issues and grades
    (a fixed seed). Returns how many were new."""
    work = workload.Workload(seed=2026, issues_per_run=(2, 6))
    new = 0
    for _ in range(SIMULATED_RUNS):
        run, events, _grades = work.run_events()  # graded below, by the demo's grader
        result = await store.append(f"run-{run}", [NewEvent(e, uuid.uuid5(run, f"event-{i}"))
                                                   for i, e in enumerate(events)])
        new += not result.already_stored
    return new


async def _grade(store: EventStore, ref: str, label: str) -> None:
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(label, total=SIMULATED_RUNS + 1)
        await rescoring.rescore(store, scoring.scorer(ref), _EVERY_RUN,
                                progress=lambda n: progress.advance(task, n))

