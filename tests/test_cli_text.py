"""Stored text is printed as text: markup, terminal controls and bidirectional overrides
written by requesters (through the HTTP API) and by agents (their issues) are shown, never
obeyed, by every command that prints them, at 80 columns."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import orjson
import pytest

from props.core.domain import catalog, definitions, tokens
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, scorers
from props.projections import engine
from props.tools.command_line import render
from tests.reactor_helpers import SNAPSHOT, sync_samples
from tests.test_api import props_serve
from tests.test_cli import props

# Markup that breaks rich (`[/x]` closes nothing: MarkupError), markup that would style, a
# tag the reference critic really emits, a screen clear, a terminal title, a bidi override.
PAYLOAD = "[/x]gpt [bold]b[/bold] [swallowed-exception] \x1b[2J\x1b]0;owned\x07 \u202eevil"
ACTIVE = ("\x1b", "\x07", "\u202e")


def test_safe_shows_what_would_act_on_a_terminal() -> None:
    assert render.safe(PAYLOAD) == ("[/x]gpt [bold]b[/bold] [swallowed-exception] "
                                    "\\x1b[2J\\x1b]0;owned\\x07 \\u202eevil")
    assert render.safe("two\nlines\tand a tab") == "two\nlines\tand a tab"


async def test_every_command_prints_hostile_text_as_text(store: EventStore, dsn: str,
                                                         tmp_path: Path) -> None:
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    async with props_serve(dsn, tmp_path, "--only", "grader") as served:  # nothing launches
        _, secret = await tokens.create(store, "client", ("read", "request"))
        async with served.client(secret) as api:
            made = await api.post("/api/runs/critic", json={
                "definition": "reference", "ref": "local", "snapshot": SNAPSHOT,
                "model": PAYLOAD, "budget_usd": 0})
            assert made.status_code == 202, made.text
    run = uuid.UUID(made.json()["run_ids"][0])
    await store.append(f"run-{run}", [  # what an agent reports, as it would
        catalog.IssueReported(run_id=run, issue_id="[swallowed-exception]", rationale=PAYLOAD,
                              locations=[catalog.Location(
                                  file="csvtool/reader.py",
                                  ranges=[catalog.LineRange(start=1, end=1)])]),
        catalog.RunFinished(run_id=run, status="completed")])
    await engine.rebuild(store)
    for ref in ("tiered@1", "tiered@2"):
        await rescoring.rescore(store, scorers.scorer(ref), rescoring.Selection(everything=True))
    # Active for `review next` (the grader activates it as it starts, but this service may
    # be stopped before its grader has started).
    await registration.activate(store, "tiered", 2)
    await engine.rebuild(store)

    narrow = {"COLUMNS": "80"}
    for command in (["runs", "list"], ["runs", "show", str(run)], ["report"],
                    ["compare", "tiered@1", "tiered@2", "--all"], ["review", "next"]):
        out = props(*command, dsn=dsn, env=narrow)
        assert out.returncode == 0, (command, out.stderr)
        assert not any(c in out.stdout for c in ACTIVE), (command, out.stdout)
        assert "Traceback" not in out.stderr, (command, out.stderr)
    shown = props("report", dsn=dsn, env=narrow).stdout
    assert "[/x]" in shown  # the model's name, as text (wrapped at 80 columns, not cut)
    # CSV and JSON are data for programs: the text comes back exactly as stored.
    rows = list(csv.DictReader(io.StringIO(props("report", "--format", "csv", dsn=dsn).stdout)))
    assert {r["model"] for r in rows} == {PAYLOAD}
    scores = orjson.loads(props("report", "--format", "json", dsn=dsn).stdout)["scores"]
    assert {r["model"] for r in scores} == {PAYLOAD}
    issue = props("review", "next", dsn=dsn, env=narrow).stdout
    assert "[swallowed-exception]" in issue and "\\x1b[2J" in issue and "\\u202e" in issue


@pytest.mark.parametrize("text", ["[/x]", "[bold]x[/bold]", "{task.description}"])
def test_user_text_in_progress_labels_is_text(text: str, dsn: str) -> None:
    out = props("report", "--as-of", text, dsn=dsn)
    assert out.returncode == 65 and "Traceback" not in out.stderr, out.stderr
