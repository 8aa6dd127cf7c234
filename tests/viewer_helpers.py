"""A run worth looking at, for the viewer's tests: a snapshot with real code and an answer
key, a critic run with its prompt, a conversation with the model, container logs and issues
(some of them hostile text), graded by tiered@2 (active) and tiered@1."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import orjson

from props.core.domain import catalog
from props.core.domain.specimens import specimens
from props.core.log.events import Event
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, scorers
from tests.conftest import rebuilt

SLUG = "viewed/2026-03-01-00"
HOSTILE = ["<script>alert(1)</script>", "[/x] [bold]not markup[/bold]", "{{7*7}}",
           "rtl \u202eevil\u202c and zero\u200bwidth"]
CODE = "\n".join(f"line_{n} = {n}  # code of line {n}" for n in range(1, 101)) + "\n"
# Real code, as a phone must show it: a bundled sample's module (105 lines), with a line of
# each long kind real code has where the issues point (a SQL literal, a URL in a comment,
# a signature), none of which wraps on its own.
_SAMPLE = "tools/bundled/specimens/notes-api/2025-10-14-00/code/notes/handlers.py"
LONG_LINES = {
    10: '    ROWS = "SELECT n.id, n.title, n.body, n.created_at, n.updated_at, u.name AS author '
        'FROM notes n JOIN users u ON u.id = n.author_id WHERE n.deleted_at IS NULL ORDER BY '
        'n.updated_at DESC"',
    30: "    # https://docs.python.org/3/library/sqlite3.html#sqlite3-connection-context-manager"
        "-commits-or-rolls-back-but-does-not-close-the-connection-itself",
    80: "def update_note_with_optimistic_concurrency_control(connection, note_id, expected_"
        "version, title, body, *, author_id, now=None, retries=3):",
}


def real_code() -> str:
    from pathlib import Path

    lines = (Path(__file__).parent.parent / _SAMPLE).read_text().splitlines()
    for n, text in LONG_LINES.items():
        lines[n - 1] = text
    return "\n".join(lines) + "\n"


# An issue text as models write them: a long paragraph, and a path and a URL that do not
# break on their own.
LONG_TEXT = (" The handler builds its query from the request and never closes the cursor "
             "on the error path, so under load the pool runs dry. " * 4
             + "/srv/notes-api/src/notes/handlers/update_note_with_optimistic_concurrency"
             "_control.py https://example.org/" + "a" * 120)


def _loc(line: int, end: int | None = None) -> list[catalog.Location]:
    return [catalog.Location(file="app.py",
                             ranges=[catalog.LineRange(start=line, end=end or line)])]


GROUND_TRUTH = catalog.GroundTruth(
    true_positives=[
        catalog.TruePositive(id="T1", rationale="the total is off by one",
                             occurrences=[catalog.Occurrence(locations=_loc(10, 11))]),
        catalog.TruePositive(id="T2", rationale="a file handle is never closed",
                             occurrences=[catalog.Occurrence(locations=_loc(50))])],
    false_positives=[
        catalog.FalsePositive(id="D1", rationale="looks racy, is guarded by the lock",
                              relevant_files=["app.py"],
                              occurrences=[catalog.Occurrence(locations=_loc(80))])],
    file_sets=[], scopes=[catalog.Scope(files_hash=None, occurrences=["T1#1", "T2#1"])])


@dataclass(frozen=True)
class Viewed:
    run_id: uuid.UUID
    turns: int


async def viewed_run(store: EventStore, *, turns: int = 3, extra_issues: int = 0,
                     model: str = "model-a", code: str = CODE, slug: str = SLUG,
                     text: str = "") -> Viewed:
    """The snapshot `slug` of `code` (once) and one graded run; `extra_issues` more issues
    that match nothing, `turns` model calls, `text` added to each issue's rationale."""
    if not await store.read_stream(f"snapshot-{slug}"):
        sha = await store.put_blob(code.encode())
        await store.append(f"snapshot-{slug}", [catalog.SnapshotSynced(
            slug=slug, version=1, source="test", ground_truth=GROUND_TRUTH,
            ground_truth_hash=specimens.ground_truth_hash(GROUND_TRUTH),
            files=[catalog.FileEntry(path="app.py", sha256=sha, size=len(code))])])
    run = uuid.uuid4()
    prompt = await store.put_blob(b"Review app.py. " + HOSTILE[0].encode())
    logs = await store.put_blob(("container log: " + HOSTILE[3]).encode())
    events: list[Event] = [
        catalog.RunRequested(run_id=run, agent_type="critic", definition="viewer-critic",
                             example=catalog.Example(snapshot=slug), model=model,
                             timeout_seconds=60, budget_usd=1),
        catalog.RunStarted(run_id=run, digest="sha256:" + "ab" * 32),
        catalog.PromptComposed(run_id=run, prompt_sha256=prompt, size=20)]
    history: list[str] = [await store.put_blob(orjson.dumps(
        {"role": "system", "content": "You review code."}))]
    for n in range(1, turns + 1):
        history.append(await store.put_blob(orjson.dumps(
            {"role": "user", "content": f"question {n}: {HOSTILE[n % len(HOSTILE)]}"})))
        answer = await store.put_blob(orjson.dumps(
            {"role": "assistant", "content": f"answer {n}"}))
        events += [catalog.LlmRequested(run_id=run, request_id=f"r{n}", model=model,
                                        message_sha256s=list(history)),
                   catalog.LlmResponded(run_id=run, request_id=f"r{n}", response_sha256=answer,
                                        tokens_in=100 * n, tokens_out=10, cost_usd=0.001,
                                        latency_ms=250)]
        history.append(answer)
    issues = {"i1": (_loc(10), "off by one: " + HOSTILE[0] + text),
              "i2": (_loc(80), "a race " + HOSTILE[1] + text),
              "i3": (_loc(30), "nothing here " + HOSTILE[2] + " " + HOSTILE[3] + text)}
    issues.update({f"x{n:04d}": (_loc(1 + n % 100), f"extra {n}" + text)
                   for n in range(extra_issues)})
    events += [catalog.IssueReported(run_id=run, issue_id=i, rationale=text, locations=where)
               for i, (where, text) in issues.items()]
    events += [catalog.ContainerExited(run_id=run, exit_code=0, logs_sha256=logs,
                                       duration_seconds=3.5),
               catalog.RunFinished(run_id=run, status="completed", tokens_in=600,
                                   tokens_out=30, cost_usd=0.003)]
    await store.append(f"run-{run}", events)
    await rebuilt(store)  # (after the fence: a shared server's other writers hold it)
    for ref in ("tiered@1", "tiered@2"):
        await rescoring.rescore(store, scorers.scorer(ref), rescoring.Selection(run_ids=[run]))
    await registration.activate(store, "tiered", 2)
    await rebuilt(store)  # (after the fence: a shared server's other writers hold it)
    return Viewed(run, turns)
