"""One output convention: every list and status command takes `--format table|json|csv`
(`--json` the same as `--format json`), with values as numbers and times in ISO 8601."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import orjson
import pytest

from props.core.domain import catalog
from props.core.log.store import EventStore
from props.projections import engine
from props.tools.command_line import run_log
from tests.reactor_helpers import SNAPSHOT
from tests.test_cli import props

LISTS = [["runs", "list"], ["definitions", "list"], ["tokens", "list"],
         ["projections", "status"], ["reactors", "status"], ["scorers", "list"]]


@pytest.mark.parametrize("command", LISTS)
async def test_lists_speak_json_and_csv(command: list[str], store: EventStore,
                                        dsn: str) -> None:
    run = uuid.uuid4()
    await store.append(f"run-{run}", [catalog.RunRequested(
        run_id=run, agent_type="critic", definition="d", example=catalog.Example(
            snapshot=SNAPSHOT), model="m", timeout_seconds=60, budget_usd=0)])
    await engine.rebuild(store)
    as_json = props(*command, "--format", "json", dsn=dsn)
    assert as_json.returncode == 0, as_json.stderr
    rows = orjson.loads(as_json.stdout)
    assert isinstance(rows, list)
    again = orjson.loads(props(*command, "--json", dsn=dsn).stdout)
    assert [sorted(r) for r in again] == [sorted(r) for r in rows]  # (lags move meanwhile)
    as_csv = props(*command, "--format", "csv", dsn=dsn)
    assert as_csv.returncode == 0, as_csv.stderr
    parsed = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(parsed) == len(rows)
    if rows:
        assert list(parsed[0]) == list(rows[0])
    if command == ["runs", "list"]:
        assert rows == [{"run_id": str(run), "status": "requested", "definition": "d",
                         "model": "m", "snapshot": SNAPSHOT, "issues": 0, "located_recall": None,
                         "precision": None, "scorer": None,
                         "requested_at": rows[0]["requested_at"]}]
    if command == ["projections", "status"]:
        assert all(isinstance(r["lag_events"], int) and r["lag_events"] == 0 for r in rows)


def test_settings_are_data_not_python_reprs(dsn: str) -> None:
    rows = orjson.loads(props("scorers", "list", "--json", dsn=dsn).stdout)
    assert {r["scorer"] for r in rows} >= {"tiered@2", "overlap@2"}
    assert all(isinstance(r["settings"], dict) and len(r["code_hash"]) == 64 for r in rows)
    table = props("scorers", "list", dsn=dsn, env={"COLUMNS": "200"}).stdout
    assert "'" not in table and "grades={" in table  # JSON values, not Python's repr
    parsed = list(csv.DictReader(io.StringIO(props("scorers", "list", "--format", "csv",
                                                   dsn=dsn).stdout)))
    assert all(isinstance(orjson.loads(r["settings"]), dict) for r in parsed)


async def test_a_runs_timeline_and_the_database_status_speak_json(store: EventStore,
                                                                  dsn: str) -> None:
    run = uuid.uuid4()
    await store.append(f"run-{run}", [catalog.RunRequested(
        run_id=run, agent_type="critic", definition="d", example=catalog.Example(
            snapshot=SNAPSHOT), model="[/x]m", timeout_seconds=60, budget_usd=0)])
    shown = props("runs", "show", str(run)[:8], "--format", "json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    [event] = orjson.loads(shown.stdout)["events"]
    assert (event["version"], event["type"]) == (1, "run.requested")
    assert event["data"]["model"] == "[/x]m" and "T" in event["recorded_at"]  # ISO 8601
    as_csv = list(csv.DictReader(io.StringIO(props("runs", "show", str(run), "--format",
                                                   "csv", dsn=dsn).stdout)))
    assert orjson.loads(as_csv[0]["data"])["definition"] == "d"  # an object as JSON text
    table = props("runs", "show", str(run), dsn=dsn, env={"COLUMNS": "200"})
    assert table.returncode == 0 and "run.requested" in table.stdout  # the table still
    status = props("db", "status", "--json", dsn=dsn)
    assert status.returncode == 0, status.stderr
    doc = orjson.loads(status.stdout)
    assert doc["events"] == 1 and all(m["state"] == "applied" for m in doc["migrations"])


def test_the_catalog_and_the_keys_speak_json(tmp_path: Path) -> None:
    types = orjson.loads(props("events", "types", "--format", "json", dsn="unused").stdout)
    assert any(t["type"] == "issue.reported" and "locations" in t["fields"] for t in types)
    keys = tmp_path / "keys"
    made = props("keys", "create", "ci", "--dir", str(keys), dsn="unused")
    assert made.returncode == 0, made.stderr
    [key] = orjson.loads(props("keys", "list", "--dir", str(keys), "--json", dsn="unused").stdout)
    assert key["name"] == "ci" and len(key["fingerprint"]) == 16


def test_the_run_log_says_each_change_of_a_runs_state_once() -> None:
    run = uuid.uuid4()
    scorer = catalog.ScorerRef(name="tiered", version=2, code_hash="0" * 64,
                               ground_truth_hash="0" * 64)
    told = run_log.Narrator()
    said = told.lines([
        catalog.RunRequested(run_id=run, agent_type="critic", definition="d",
                             example=catalog.Example(snapshot=SNAPSHOT), model="[/x]m",
                             timeout_seconds=60, budget_usd=0),
        catalog.RunStarted(run_id=run, digest="sha256:" + "0" * 64),
        *(catalog.IssueReported(run_id=run, issue_id=f"i{n}", rationale="r", locations=[
            catalog.Location(file="a.py", ranges=[catalog.LineRange(start=1, end=1)])])
          for n in range(3)),
        catalog.RunFinished(run_id=run, status="completed")])
    short = str(run)[:8]
    assert said == [f"run {short} requested: d (model [/x]m) on {SNAPSHOT}",
                    f"run {short} running", f"run {short} completed: 3 issue(s) reported"]
    graded = told.lines([catalog.GradeEmitted(
        critique_run_id=run, critique_issue_id=f"i{n}", scorer=scorer, grade=1.0 if n else 0,
        tp_id="t" if n else None, tp_occurrence=1 if n else None) for n in range(3)])
    assert graded == [f"run {short} graded by tiered@2: 2 find(s) in 3 issue(s)"]  # once
    assert told.lines([catalog.PhaseCompleted(run_id=run, phase="review",
                                              duration_seconds=1)]) == []
    assert told.summary() == "runs in the last 60 s: 1 requested, 1 running, 1 completed, " \
                             "1 graded"
    assert told.summary() is None  # nothing since
