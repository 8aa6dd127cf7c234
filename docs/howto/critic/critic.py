"""An example critic: two checks of Python's own `ast`, reported through the props agent SDK.

It reports every `open(...)` call outside a `with` block (a handle that leaks when the caller
stops early) and every `except` whose body only passes or continues (a failure dropped
without a trace). Replace `findings` with your own review: a model call, a tool, anything.
"""

from __future__ import annotations

import ast
import sys
import time
from collections.abc import Iterator

from props_agent import Agent

Finding = tuple[int, int, str, str]  # start line, end line, severity, rationale


def findings(tree: ast.Module) -> Iterator[Finding]:
    managed = {id(item.context_expr) for node in ast.walk(tree)
               if isinstance(node, ast.With | ast.AsyncWith) for item in node.items}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "open" and id(node) not in managed):
            yield (node.lineno, node.end_lineno or node.lineno, "low",
                   "file opened outside a `with` block: the handle leaks when the caller "
                   "stops early or an exception is raised")
        if isinstance(node, ast.ExceptHandler) and all(
                isinstance(s, ast.Pass | ast.Continue) for s in node.body):
            yield (node.lineno, node.end_lineno or node.lineno, "medium",
                   "an exception is caught and dropped without a trace: failing inputs "
                   "vanish silently")


def main() -> int:
    with Agent.from_environment() as agent:
        began = time.monotonic()
        agent.prompt("example critic: open() outside `with`, swallowed exceptions",
                     template="howto-example")
        count = 0
        for path in agent.files():
            if not path.endswith(".py"):
                continue
            try:
                tree = ast.parse(agent.read(path))
            except SyntaxError:
                print(f"{path} does not parse: skipped", file=sys.stderr)
                continue
            for start, end, severity, rationale in sorted(findings(tree)):
                agent.issue(path, start, end, rationale, severity)
                count += 1
        agent.phase("review", began)
        print(f"reviewed {agent.task.example.snapshot}: {count} issue(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
