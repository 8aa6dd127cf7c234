"""`props demo`: migrate, sync the sample specimens, record one scripted critic run.

At this stage no agent runs: the demo records the bundled specimens (ground truth), then
appends the events a critic run on one of them produces (request, container, prompt as a
blob, an LLM exchange, reported issues, finish) so a newcomer sees the log, its streams and
its read order. Later issues make it a full evaluation.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from props.core import catalog, database, specimen_sync
from props.core.events import Event, NewEvent
from props.core.store import START, EventStore
from props.schema import migrate
from props.tools import specimen_commands

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


async def demo_cmd(args: argparse.Namespace) -> int:
    dsn = database.resolve_dsn()
    console.print(f"database: {database.redact(dsn)}")
    applied = await migrate.migrate_database(dsn)
    console.print(f"schema: {len(applied)} migration(s) applied" if applied
                  else "schema: up to date")
    async with EventStore.open(dsn, max_connections=3) as store:
        samples = specimen_commands.samples_dir()
        found = specimen_commands.load_valid(samples)
        report = await specimen_sync.sync(store, str(samples), found)
        console.print(f"specimens: {len(found)} sample snapshots, "
                      f"{report.appended} new version(s) recorded")
        snapshot = (await specimen_sync.history(store))[SNAPSHOT].latest
        file_set = next(fs for fs in snapshot.ground_truth.file_sets if fs.name == FILE_SET)
        example = catalog.Example(snapshot=SNAPSHOT, files_hash=file_set.files_hash)
        run_id = uuid.uuid4()
        prompt = b"Review these files and report every defect you find.\n"
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("recording a scripted critic run", total=4)
            prompt_sha = await store.put_blob(prompt)
            message_sha = await store.put_blob(b"<files of the example>")
            response_sha = await store.put_blob(b'{"issues": [{"id": "i1"}]}')
            progress.advance(task)
            events = scripted_run(run_id, example, prompt_sha, message_sha, response_sha)
            meta = {"correlation_id": str(run_id), "actor": "props demo"}
            stream = f"run-{run_id}"
            await store.append(stream, events[:2], expected_version=0, metadata=meta)
            progress.advance(task)
            await store.append(stream, events[2:-1], expected_version=2, metadata=meta)
            progress.advance(task)
            # A retried append with the same event id writes nothing the second time.
            last = NewEvent(events[-1], uuid.uuid5(run_id, "finished"), meta)
            await store.append(stream, [last], expected_version=len(events) - 1)
            again = await store.append(stream, [last])
            progress.advance(task)
        table = Table("pos", "stream", "ver", "type",
                      title=f"critic run {run_id} on {SNAPSHOT} ({FILE_SET})")
        for rec in await store.read_stream(stream):
            table.add_row(str(rec.global_position), rec.stream_id[:16] + "…",
                          str(rec.stream_version), rec.type_name)
        console.print(table)
        total = await store.pool.fetchval("SELECT count(*) FROM props.events")
        readable = sum([len(b) async for b in store.iter_all(START)])
        console.print(
            f"retried append of the last event: {'no-op' if again.already_stored else 'DUPLICATE'}"
            f"; log holds {total} event(s), {readable} readable behind the fence"
        )
    console.print('next: `props events tail --from start --no-follow`, `psql "$(props db dsn)"`')
    return 0
