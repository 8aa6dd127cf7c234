"""Scorers measured, not assumed: labelled grading cases, and how each scorer does on them.

A case (a `[[case]]` of a TOML file in a cases folder; see tools/bundled/grading_cases/README.md) is
a ground-truth fragment, one run's issues, and the match a careful reviewer gives each issue,
with a note why and whether location alone can decide it. A scorer's answer for an issue is
what it counts: a find (a TP occurrence at full credit), a known decoy, or nothing (partial
credit is not a find). Each issue lands in one cell of the confusion table:

- right TP / wrong TP: the reviewer names a TP occurrence; the scorer finds it / another;
- TP missed: the reviewer names a TP occurrence; the scorer finds none;
- false find: the reviewer says decoy or nothing; the scorer finds a TP;
- decoy right / decoy wrong: the reviewer or the scorer says decoy, and they agree or not;
- right none: both say nothing;
- unscorable: an LLM judge's answer graded nothing (never counted as "nothing").

Accuracy is the share of issues in a right cell. A scorer that is not deterministic is asked
`draws` times; its agreement is the share of issues every draw answered alike.
"""

from __future__ import annotations

import dataclasses
import tomllib
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pydantic

from props.core.domain import catalog
from props.core.log import errors
from props.core.scoring import scorers, verdicts

CELLS = ("right_tp", "wrong_tp", "tp_missed", "false_find", "decoy_right", "decoy_wrong",
         "right_none", "unscorable")
UNSCORABLE = "unscorable"  # a judge's answer that grades nothing (see llm_judge)
RIGHT = {"right_tp", "decoy_right", "right_none"}


class CaseError(errors.PropsError):
    """A grading case file is malformed: the message names the file and the case."""

    exit_code = 65


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    why: str
    location_decides: bool
    ground_truth: catalog.GroundTruth
    issues: dict[str, list[catalog.Location]]
    expect: dict[str, frozenset[str]]  # acceptable labels: "T#n", "fp:ID", "none"
    rationales: dict[str, str] = dataclasses.field(default_factory=dict)  # what judges read


def _locations(ranges: Any, where: str) -> list[catalog.Location]:
    by_file: dict[str, list[catalog.LineRange]] = {}
    try:
        for file, first, last in ranges:
            by_file.setdefault(str(file), []).append(catalog.LineRange(start=first, end=last))
    except (TypeError, ValueError) as exc:
        raise CaseError(f"{where}: ranges are [[file, first, last], ...] ({exc})") from None
    return [catalog.Location(file=f, ranges=r) for f, r in by_file.items()]


def _case(raw: dict[str, Any], where: str) -> Case:
    try:
        case_id = str(raw["id"])
        where = f"{where} case {case_id!r}"
        tps = [catalog.TruePositive(id=tp, rationale="-", occurrences=[
                   catalog.Occurrence(locations=_locations(occ, where)) for occ in occs])
               for tp, occs in raw.get("tp", {}).items()]
        fps = [catalog.FalsePositive(
                   id=fp, rationale="-", relevant_files=sorted(
                       {loc.file for occ in occs for loc in _locations(occ, where)}),
                   occurrences=[catalog.Occurrence(locations=_locations(occ, where))
                                for occ in occs])
               for fp, occs in raw.get("fp", {}).items()]
        issues = {i: _locations(v["at"], f"{where} issue {i}") for i, v in raw["issues"].items()}
        rationales = {i: str(v.get("rationale", "")) for i, v in raw["issues"].items()}
        expect = {i: frozenset([v] if isinstance(v, str) else v)
                  for i, v in raw["expect"].items()}
        gt = catalog.GroundTruth(true_positives=tps, false_positives=fps, file_sets=[],
                                 scopes=[])
    except (KeyError, TypeError, AttributeError) as exc:
        raise CaseError(f"{where}: missing or malformed {exc}") from None
    except pydantic.ValidationError as exc:
        raise CaseError(f"{where}: {exc.errors()[0]['msg']}") from None
    if set(expect) != set(issues):
        raise CaseError(f"{where}: `expect` must name exactly the issues "
                        f"({sorted(set(expect) ^ set(issues))})")
    return Case(case_id, str(raw.get("why", "")), bool(raw.get("location_decides", True)),
                gt, issues, expect, rationales)


def load(folder: Path) -> list[Case]:
    """Every case of every `*.toml` in `folder`, in file and then case order."""
    if not folder.is_dir():
        raise CaseError(f"{folder} is not a folder of grading cases")
    cases: list[Case] = []
    for path in sorted(folder.glob("*.toml")):
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise CaseError(f"{path}: {exc}") from None
        except RecursionError:
            raise CaseError(f"{path}: invalid TOML: nested too deeply") from None
        cases += [_case(raw, str(path)) for raw in doc.get("case", [])]
    ids = Counter(c.id for c in cases)
    if dupes := sorted(i for i, n in ids.items() if n > 1):
        raise CaseError(f"{folder}: case ids used twice: {', '.join(dupes)}")
    if not cases:
        raise CaseError(f"{folder} holds no [[case]]")
    return cases


def answer(m: scorers.Match) -> str:
    """What a scorer counts for an issue: a find, a decoy, or nothing."""
    if m.find:
        return f"{m.tp_id}#{m.tp_occurrence}"
    if m.fp_id is not None:
        return f"fp:{m.fp_id}"
    return "none"


def cell(expected: frozenset[str], got: str) -> str:
    if got == UNSCORABLE:
        return UNSCORABLE
    if got in expected:
        return "right_none" if got == "none" else ("decoy_right" if got.startswith("fp:")
                                                   else "right_tp")
    tp_expected = any(e != "none" and not e.startswith("fp:") for e in expected)
    tp_got = got != "none" and not got.startswith("fp:")
    if tp_expected:
        return "wrong_tp" if tp_got else "tp_missed"
    return "false_find" if tp_got else "decoy_wrong"


@dataclasses.dataclass
class Result:
    scorer: str
    deterministic: bool
    issues: int = 0
    cells: Counter[str] = dataclasses.field(default_factory=Counter)
    wrong: list[str] = dataclasses.field(default_factory=list)  # "case/issue: got X"
    wrong_decidable: list[str] = dataclasses.field(default_factory=list)
    # across draws, for a scorer that is not deterministic asked twice or more (else None)
    agreement: float | None = None

    @property
    def accuracy(self) -> float:
        return sum(self.cells[c] for c in RIGHT) / self.issues if self.issues else 0.0

    def summary(self) -> dict[str, Any]:
        return {"scorer": self.scorer, "accuracy": round(self.accuracy, 4),
                "issues": self.issues, "confusion": {c: self.cells[c] for c in CELLS},
                "wrong_location_decidable": self.wrong_decidable, "wrong": self.wrong,
                "agreement": self.agreement}


async def _answers(s: scorers.Scorer, case: Case) -> dict[str, str]:
    """What `s` counts for each issue of `case` (a judge is asked; nothing recorded: this is
    a measurement of the scorer, not a grading of history)."""
    said = await verdicts.of(s).verdicts(None, uuid.uuid4(), case.issues, case.rationales,
                                         case.ground_truth)
    return {**{i: answer(m) for i, m in said.matches.items()},
            **{i: UNSCORABLE for i in said.unscorable}}


async def evaluate(s: scorers.Scorer, cases: list[Case], draws: int = 1) -> Result:
    result = Result(scorers.ref(s), s.deterministic)
    agreed = 0
    for case in cases:
        answers = [await _answers(s, case)
                   for _ in range(1 if s.deterministic else max(1, draws))]
        for issue, expected in sorted(case.expect.items()):
            votes = Counter(a[issue] for a in answers)
            got = votes.most_common(1)[0][0]  # the majority of the draws
            agreed += len(votes) == 1
            result.issues += 1
            kind = cell(expected, got)
            result.cells[kind] += 1
            if kind not in RIGHT:
                says = " or ".join(sorted(expected))
                line = f"{case.id}/{issue}: got {got}, a reviewer says {says}"
                result.wrong.append(line)
                if case.location_decides:
                    result.wrong_decidable.append(line)
    if not s.deterministic and draws >= 2:  # one draw always agrees with itself: no measure
        result.agreement = agreed / result.issues if result.issues else None
    return result


def needs_judge(cases: list[Case]) -> list[str]:
    """The cases location alone cannot decide."""
    return [c.id for c in cases if not c.location_decides]
