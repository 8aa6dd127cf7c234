"""The reference critic: deterministic static checks of Python files, no network, no model.

`python -m props.reactors.agents.reference_critic` inside a run's container. It parses each
Python file of its example and reports what its checks find, with locations. The same example
always gives the same issues, so it is the yardstick the graders and the pipeline are tested
with. `config.checks` (a list of check names) narrows what it runs: a second definition with
fewer checks acts as a second "model". Exit code 0 when it reviewed every file.
"""

from __future__ import annotations

import ast
import sys
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from props.core.domain import catalog
from props.reactors.agents.sdk import Agent


class Finding(NamedTuple):
    line: int
    end: int
    severity: catalog.Severity
    rationale: str


Check = Callable[[ast.Module], Iterator[Finding]]


def _span(node: ast.AST) -> tuple[int, int]:
    start = getattr(node, "lineno", 1)
    return start, getattr(node, "end_lineno", None) or start


def open_without_with(tree: ast.Module) -> Iterator[Finding]:
    managed = {id(item.context_expr) for node in ast.walk(tree)
               if isinstance(node, ast.With | ast.AsyncWith) for item in node.items}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "open" and id(node) not in managed):
            yield Finding(*_span(node), "low",
                          "file opened outside a `with` block: the handle leaks when the "
                          "caller stops early or an exception is raised")


def swallowed_exception(tree: ast.Module) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and all(
                isinstance(s, ast.Pass | ast.Continue) for s in node.body):
            what = "every exception" if node.type is None else ast.unparse(node.type)
            yield Finding(*_span(node), "medium",
                          f"{what} is caught and dropped without a trace: failing inputs "
                          f"vanish silently")


def bare_except(tree: ast.Module) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is None:
            yield Finding(*_span(node), "medium",
                          "bare `except:` also catches KeyboardInterrupt and SystemExit")


def mutable_default(tree: ast.Module) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
                if isinstance(default, ast.List | ast.Dict | ast.Set):
                    yield Finding(*_span(default), "medium",
                                  f"mutable default argument in {node.name}(): shared "
                                  f"between calls")


def truncated_product(tree: ast.Module) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "int" and len(node.args) == 1
                and isinstance(node.args[0], ast.BinOp)
                and isinstance(node.args[0].op, ast.Mult)):
            yield Finding(*_span(node), "high",
                          "int() truncates a product used as a rank or index: off by one "
                          "at the boundaries (use math.ceil and subtract one, or check)")


def slice_minus_one(tree: ast.Module) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Slice) and isinstance(node.upper, ast.BinOp)
                and isinstance(node.upper.op, ast.Sub)
                and isinstance(node.upper.right, ast.Constant) and node.upper.right.value == 1):
            yield Finding(*_span(node), "medium",
                          "slice stops one element early (`- 1` on an exclusive bound)")


def zip_without_strict(tree: ast.Module) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "zip" and not any(k.arg == "strict" for k in node.keywords)):
            yield Finding(*_span(node), "low",
                          "zip() without strict=True truncates silently when lengths differ")


def compare_to_none(tree: ast.Module) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Eq | ast.NotEq) for op in node.ops) and any(
                isinstance(c, ast.Constant) and c.value is None for c in node.comparators):
            yield Finding(*_span(node), "info", "comparison to None with == instead of `is`")


CHECKS: dict[str, Check] = {
    "open-without-with": open_without_with,
    "swallowed-exception": swallowed_exception,
    "bare-except": bare_except,
    "mutable-default": mutable_default,
    "truncated-product": truncated_product,
    "slice-minus-one": slice_minus_one,
    "zip-without-strict": zip_without_strict,
    "compare-to-none": compare_to_none,
}


def review(source: str, checks: list[str]) -> list[tuple[str, Finding]]:
    """Every finding of the named checks in one file's source, in line order."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        line = exc.lineno or 1
        return [("syntax", Finding(line, line, "high", f"does not parse: {exc.msg}"))]
    found = [(name, f) for name in checks for f in CHECKS[name](tree)]
    return sorted(set(found), key=lambda nf: (nf[1].line, nf[1].end, nf[0]))


def main() -> int:
    with Agent.from_environment() as agent:
        checks = agent.task.config.get("checks") or list(CHECKS)
        unknown = sorted(set(checks) - set(CHECKS))
        if unknown:
            print(f"unknown checks in the definition's config: {', '.join(unknown)}",
                  file=sys.stderr)
            return 2
        agent.prompt(f"reference critic; checks: {', '.join(checks)}", template="reference")
        began = time.monotonic()
        n = 0
        for path in agent.files():
            if not path.endswith(".py"):
                continue
            for name, f in review(agent.read(path), checks):
                n += 1
                agent.issue(path, f.line, f.end, f"[{name}] {f.rationale}", f.severity)
        agent.phase("review", began)
        print(f"reviewed {agent.task.example.snapshot}: {n} issues")
    return 0


if __name__ == "__main__":
    sys.exit(main())
