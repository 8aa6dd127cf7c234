"""One rule says whether a failure is worth another attempt (props.core.log.faults.decide):
the page that prints it says the same, every recorded failure is made by it, nothing reads an
engine's exceptions behind a runtime's back, and `--retry-failed` asks it. Each check has its
control: the same check shown to fail on a page, a module or a case made to break it."""

from __future__ import annotations

import ast
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from props.core.domain import catalog, evaluations
from props.core.log import errors, faults
from props.reactors import evaluation_steps
from props.reactors.launcher import run_state

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "internals" / "retries.md"
MARKER = "<!-- the rule: tests/test_retry_rule.py holds this table to props.core.log.faults -->"
PACKAGE = ("core", "projections", "reactors", "tools")


def _rows(page: str) -> list[list[str]]:
    table = page.split(MARKER, 1)[1].strip().split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in table.splitlines()[2:]]


def _disagreements(page: str) -> list[str]:
    """Each row of the page the rule does not give, and each category the page lacks."""
    wrong, seen = [], set()
    for category, kind, retryable, why in _rows(page):
        name = category.split("`")[1] if "`" in category else None
        if name is None:
            verdict = faults.decide("no-such-category")
        elif name == "llm_http_error":
            verdict = faults.decide(name, "llm", http_status=503 if "5xx" in category else 400)
        else:
            verdict = faults.decide(name)
        seen.add(name)
        if (kind, retryable == "yes", why) != (verdict.kind, verdict.retryable, verdict.why):
            wrong.append(category)
    return wrong + [f"`{c}` missing" for c in faults.CATEGORIES if c not in seen]


def test_the_page_holds_the_rule() -> None:
    page = PAGE.read_text()
    assert _disagreements(page) == []
    # The controls: a row that says otherwise, and a row gone, are both found.
    flipped = page.replace("| `exit_nonzero` | defect | no |", "| `exit_nonzero` | defect | yes |")
    assert _disagreements(flipped) == ["`exit_nonzero`"]
    gone = re.sub(r"\| `killed` \|.*\n", "", page)
    assert _disagreements(gone) == ["`killed` missing"]


@pytest.mark.parametrize(("category", "status", "retryable"), [
    ("engine_unreachable", None, True), ("store_unavailable", None, True),
    ("llm_reset", None, True), ("llm_http_error", 429, True), ("llm_http_error", 503, True),
    ("timeout", None, True), ("run_lost", None, True),
    # the controls: what no new attempt mends
    ("llm_http_error", 401, False), ("exit_nonzero", None, False), ("budget", None, False),
    ("launcher_defect", None, False), ("cancelled", None, False), ("props_error", None, False),
    ("not_granted", None, False),
])
def test_a_recorded_failure_is_retryable_as_the_rule_says(
        category: str, status: int | None, retryable: bool) -> None:
    failure = catalog.Failure.of("run", category, 1, http_status=status)
    assert failure.retryable is retryable
    assert failure.verdict().retryable is retryable  # read again later: the same answer


def test_the_launcher_s_verdict_on_a_model_call_asks_the_rule() -> None:
    """What ended a run, as the launcher folds it: a model server's 503 is retryable, its
    401 is not (the control), and both are recorded as llm_http_error."""
    req = catalog.RunRequested(run_id=uuid.uuid4(), agent_type="critic", definition="c",
                               definition_ref="latest", example=catalog.Example(
                                   snapshot="x/2025-01-01-00"), model="m",
                               timeout_seconds=60, budget_usd=1.0)
    exited = catalog.ContainerExited(run_id=req.run_id, exit_code=3, duration_seconds=1.0)

    def ended(status: int) -> catalog.Failure | None:
        state = run_state.RunState(req, datetime.now(UTC))
        state.totals.call_failed = catalog.LlmResponded(
            run_id=req.run_id, request_id="r1", response_sha256="0" * 64, tokens_in=0,
            tokens_out=0, cost_usd=0.0, latency_ms=1.0, outcome="http_error",
            http_status=status)
        return run_state.verdict(state, exited, req, None)[1]

    busy, refused = ended(503), ended(401)
    assert busy is not None and (busy.category, busy.retryable) == ("llm_http_error", True)
    assert refused is not None and (refused.category, refused.retryable) == \
        ("llm_http_error", False)


def _hand_made_failures(files: list[Path]) -> list[str]:
    """`Failure(..., retryable=...)` outside the catalog: a verdict that is not the rule's."""
    found = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Call) and any(k.arg == "retryable" for k in node.keywords):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    getattr(node.func, "id", "")
                if name == "Failure":
                    found.append(f"{f.relative_to(f.parents[1])}:{node.lineno}")
    return found


def _package_files() -> list[Path]:
    catalog_parts = ROOT / "core" / "domain" / "catalog" / "parts.py"
    return [p for d in PACKAGE for p in (ROOT / d).rglob("*.py") if p != catalog_parts]


def test_every_recorded_failure_is_made_by_the_rule(tmp_path: Path) -> None:
    assert _hand_made_failures(_package_files()) == []
    (tmp_path / "x").mkdir()  # the control: a failure made by hand is found
    bad = tmp_path / "x" / "bad.py"
    bad.write_text("from props.core.domain import catalog\n"
                   "f = catalog.Failure(phase='run', category='timeout', retryable=False)\n")
    assert _hand_made_failures([bad]) == ["x/bad.py:2"]


def _sniffers(root: Path, files: list[Path]) -> list[str]:
    """A module that looks for another's exceptions in sys.modules, or a module of the rule's
    layer (core/) that names an engine's library."""
    found = []
    for f in files:
        text, rel = f.read_text(), f.relative_to(root).as_posix()
        if "sys.modules.get(" in text:
            found.append(f"{rel}: sys.modules")
        if rel.startswith("core/") and re.search(r"\b(aiodocker|aiohttp)\b", text):
            found.append(f"{rel}: names an engine's library")
    return found


def test_no_module_reads_an_engine_s_exceptions_behind_its_runtime(tmp_path: Path) -> None:
    files = [p for d in ("core", "projections", "reactors") for p in (ROOT / d).rglob("*.py")]
    assert _sniffers(ROOT, files) == []
    log = tmp_path / "core" / "log"  # the control: what faults.py did before is found
    log.mkdir(parents=True)
    (log / "faults.py").write_text("import sys\naiodocker = sys.modules.get('aiodocker')\n")
    assert _sniffers(tmp_path, [log / "faults.py"]) == [
        "core/log/faults.py: sys.modules", "core/log/faults.py: names an engine's library"]


def _failed(category: str, attempts: int = 1) -> evaluations.CaseState:
    case = evaluations.Case(definition="c", digest="sha256:" + "0" * 64, model="m",
                            snapshot="x/2025-01-01-00", snapshot_version=1, files_hash=None,
                            file_set=None, epoch=0)
    return evaluations.CaseState(case, "failed", uuid.uuid4(), attempts, 0.0,
                                 catalog.Failure.of("run", category, 3))


def test_retry_failed_asks_the_rule_and_says_why_not() -> None:
    stops = evaluation_steps.Stops(retry_failed=1)
    assert evaluation_steps._again(_failed("llm_reset"), stops) is None  # requested again
    # the controls: a failure the rule does not call retryable, and retries spent
    why = evaluation_steps._again(_failed("exit_nonzero"), stops)
    assert why is not None and why.startswith("exit_nonzero: not retryable (")
    assert faults.CATEGORIES["exit_nonzero"].why in why
    spent = evaluation_steps._again(_failed("llm_reset", attempts=2), stops)
    assert spent == "llm_reset: retryable, its 1 retry spent"
    assert evaluation_steps._again(_failed("llm_reset"), evaluation_steps.Stops()) is not None


def test_an_error_s_category_is_its_own_or_its_class_name() -> None:
    from props.reactors.runtimes.container_runtime import EngineUnreachable

    assert faults.category_of(EngineUnreachable()) == "engine_unreachable"
    assert faults.category_of(errors.StoreUnavailable()) == "store_unavailable"
    assert faults.category_of(ConnectionResetError()) == "store_unavailable"
    assert faults.category_of(errors.PropsError()) == "props_error"
    assert faults.category_of(ValueError()) == "defect"
