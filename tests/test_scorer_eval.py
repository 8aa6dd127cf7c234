"""`props scorers eval`: scorers measured on the shipped labelled cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from props.core.scoring import evaluation, scorers
from props.tools.bundled.samples import cases_dir

CLI = [sys.executable, "-m", "props.tools.cli"]


async def test_the_default_scorer_gets_every_location_decidable_case_right() -> None:
    cases = evaluation.load(cases_dir())
    assert len(cases) >= 60 and len({c.id for c in cases}) == len(cases)
    assert evaluation.needs_judge(cases)  # the cases only a judge can decide are listed
    strict = await evaluation.evaluate(scorers.scorer(scorers.DEFAULT_SCORER), cases)
    assert strict.wrong_decidable == [] and strict.issues == sum(len(c.issues) for c in cases)
    # Negative control: tiered@1's decoy rule is caught by the cases written for it.
    old = await evaluation.evaluate(scorers.scorer("tiered@1"), cases)
    assert any(w.startswith("unrelated-in-decoy-file/") for w in old.wrong_decidable)
    assert old.accuracy < strict.accuracy


def test_cells_follow_the_reviewer() -> None:
    assert evaluation.cell(frozenset({"T1#1"}), "T1#1") == "right_tp"
    assert evaluation.cell(frozenset({"T1#1"}), "T2#1") == "wrong_tp"
    assert evaluation.cell(frozenset({"T1#1"}), "fp:D") == "tp_missed"
    assert evaluation.cell(frozenset({"none"}), "T1#1") == "false_find"
    assert evaluation.cell(frozenset({"fp:D"}), "none") == "decoy_wrong"
    assert evaluation.cell(frozenset({"none"}), "fp:D") == "decoy_wrong"
    assert evaluation.cell(frozenset({"none", "T1#1"}), "none") == "right_none"
    partial = scorers.Match(tp_id="T1", tp_occurrence=1, grade=0.6)
    assert evaluation.answer(partial) == "none"  # partial credit is not a find


def test_the_command_prints_a_json_summary_and_holds_a_floor(tmp_path: Path) -> None:
    env = dict(os.environ)
    done = subprocess.run([*CLI, "scorers", "eval", "--json"], capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    summary = orjson.loads(done.stdout)  # one document, nothing else
    assert summary["cases"] >= 60 and {s["scorer"] for s in summary["scorers"]} == \
        set(scorers.SCORERS)
    floor = subprocess.run([*CLI, "scorers", "eval", "--scorer", "overlap@2",
                            "--min-accuracy", "0.99"], capture_output=True, text=True,
                           timeout=120, env=env, check=False)
    assert floor.returncode == 1
    (tmp_path / "bad.toml").write_text('[[case]]\nid = "x"\nissues = {}\n')
    bad = subprocess.run([*CLI, "scorers", "eval", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=env, check=False)
    assert bad.returncode == 65 and bad.stderr.count("\n") == 1 and "case 'x'" in bad.stderr
