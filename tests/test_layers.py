"""The layers of the tree, enforced: each package imports only the layers below it.

Every `import` and `from ... import` of every module counts, the ones inside functions too
(a lazy import is still a dependency). The rules are the ones docs/internals/layout.md and
each package's docstring state.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> the props packages its modules may import (itself always allowed)
ALLOWED: dict[str, tuple[str, ...]] = {
    "schema": (),
    "core.log": ("schema",),
    "core.domain": ("core.log", "schema"),
    "core.scoring": ("core.log", "core.domain", "schema"),
    "projections": ("core", "schema"),
    "reactors": ("core", "projections", "schema"),
    "tools": ("core", "projections", "reactors", "schema"),
}


def _package_of(module: str) -> str | None:
    """The layer a dotted module (without `props.`) belongs to: the longest rule prefix."""
    found = [p for p in ALLOWED if module == p or module.startswith(p + ".")]
    return max(found, key=len) if found else None


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module without `props.`) of every props import in a file."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from props.core import catalog` imports the module props.core.catalog
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module in (
                "props", "props.core") else [node.module]
        else:
            continue
        out += [(node.lineno, n.removeprefix("props.")) for n in names if n.startswith("props.")]
    return sorted(out)


def _violations(package: str) -> list[str]:
    allowed = (package, *ALLOWED[package])
    folder = ROOT.joinpath(*package.split("."))
    found = []
    for path in sorted(folder.rglob("*.py")):
        owner = _package_of(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if owner != package:
            continue  # a sub-layer's file: checked under its own rule
        for line, module in _imports(path):
            if not any(module == a or module.startswith(a + ".") for a in allowed):
                found.append(f"{path.relative_to(ROOT)}:{line} imports props.{module}")
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(package: str) -> None:
    assert _violations(package) == []


def test_the_log_knows_nothing_of_the_domain() -> None:
    """The rule the redesign is for, said by itself: core/log reaches no catalog, scoring or
    specimens, directly or through a module it imports."""
    reached: set[str] = set()
    todo = ["core.log"]
    while todo:
        module = todo.pop()
        path = ROOT.joinpath(*module.split("."))
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
        for file in files:
            for _line, imported in _imports(file):
                if imported in reached:
                    continue
                reached.add(imported)
                target = ROOT.joinpath(*imported.split("."))
                if target.with_suffix(".py").exists() or target.is_dir():
                    todo.append(imported)
    assert not {m for m in reached if m.startswith(("core.domain", "core.scoring"))}


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    """Negative control: the import walker finds an upward import, lazy ones included."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from props.core.domain import catalog\n"
                   "from props.core import scoring\n")
    assert _imports(bad) == [(2, "core.domain"), (3, "core.scoring")]
    assert _package_of("core.domain") == "core.domain"
    assert _package_of("core.log.store") == "core.log"


SAMPLE_SPECIMENS = ROOT / "tools" / "bundled" / "specimens"  # code under review, not props's


def _modules() -> list[Path]:
    """The package's modules: tests and the sample specimens (code under review) aside."""
    return [p for package in ("core", "projections", "reactors", "schema", "tools")
            for p in sorted((ROOT / package).rglob("*.py"))
            if not p.is_relative_to(SAMPLE_SPECIMENS)]


FUNCTION_CAP = 80  # lines a function
REACTOR_FUNCTION_CAP = 50  # in reactors/, where a function does one step of a service
MODULE_BACKSTOP = 800  # lines a module: folders split by concept, not by a size cap


def _long_functions(path: Path, source: str) -> list[str]:
    cap = REACTOR_FUNCTION_CAP if path.is_relative_to(ROOT / "reactors") else FUNCTION_CAP
    return [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > cap]


def test_functions_stay_small() -> None:
    """80 lines a function, 50 in the reactors (benchmarks aside: a suite reads top down).
    The cap is on functions, where length hurts the reader; a module is a concept and may run
    long, up to a backstop that catches a grab-bag."""
    long_functions = [line for p in _modules() if "benchmarks" not in p.parts
                      for line in _long_functions(p, p.read_text())]
    long_modules = [f"{p.relative_to(ROOT)}: {n} lines" for p in _modules()
                    if (n := len(p.read_text().splitlines())) > MODULE_BACKSTOP]
    assert long_functions == [] and long_modules == []


def test_the_function_cap_catches_a_long_function() -> None:
    """Negative control: a function one line over its cap is named, in reactors/ at 51 lines
    and elsewhere at 81; one at the cap is not."""
    def source(lines: int) -> str:
        return "def f():\n" + "    x = 1\n" * (lines - 1)

    reactor = ROOT / "reactors" / "example.py"
    other = ROOT / "core" / "example.py"
    assert _long_functions(reactor, source(50)) == []
    assert _long_functions(reactor, source(51)) == ["reactors/example.py:1 f: 51 lines"]
    assert _long_functions(other, source(80)) == []
    assert _long_functions(other, source(81)) == ["core/example.py:1 f: 81 lines"]


def test_the_concept_packages_are_measured() -> None:
    """Negative control of the sample-specimens exclusion: core/domain/specimens/ (props's own
    code) is measured, only tools/bundled/specimens/ (code under review) is not."""
    measured = set(_modules())
    assert ROOT / "core" / "domain" / "specimens" / "specimens.py" in measured
    assert not any(p.is_relative_to(SAMPLE_SPECIMENS) for p in measured)


CONCEPT_PACKAGES = [ROOT / "reactors" / "launcher", ROOT / "core" / "domain" / "specimens",
                    ROOT / "core" / "domain" / "archive"]


def _imports_at_init(path: Path) -> list[int]:
    """Lines of an `__init__` that do more than say what the package is (its docstring)."""
    body = ast.parse(path.read_text()).body
    return [node.lineno for node in body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]


def test_a_concept_package_is_a_folder_not_a_facade() -> None:
    """A concept package's `__init__` is its docstring: a re-export would load every module of
    the folder on any import of one, and hide an import cycle behind the package's name."""
    assert {str(p.relative_to(ROOT)): _imports_at_init(p / "__init__.py")
            for p in CONCEPT_PACKAGES} == {str(p.relative_to(ROOT)): [] for p in CONCEPT_PACKAGES}


def test_the_facade_check_sees_a_re_export(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text('"""A package."""\n\nfrom props.core.domain.specimens import specimens\n')
    assert _imports_at_init(init) == [3]


def _pool_uses(path: Path) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr == "pool"]


def test_nothing_outside_the_log_touches_the_pool() -> None:
    """The layers above run SQL through `store.sql` (the log's refusals translated there),
    never on the pool; the benchmarks' raw side measures the pool itself."""
    found = [f"{p.relative_to(ROOT)}:{line}" for p in _modules()
             if not p.is_relative_to(ROOT / "core" / "log") and "benchmarks" not in p.parts
             for line in _pool_uses(p)]
    assert found == []


def test_the_pool_check_sees_a_use(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("async def f(store):\n    return await store.pool.fetch('SELECT 1')\n")
    assert _pool_uses(bad) == [2]


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The props modules a file imports when it runs (lazy imports too; not those only a
    type checker reads, under `if TYPE_CHECKING:`): `from props.a import b` is the module
    a.b when there is one, else the package a."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.removeprefix("props.") for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module.removeprefix("props.")
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                      for a in node.names}
    return found & known


def circles(files: list[Path]) -> list[list[str]]:
    """The import circles among `files`' modules: each group of modules that import one
    another, through any path (Tarjan's strongly connected components)."""
    known = {_module_of(p) for p in files}
    graph = {_module_of(p): _runtime_imports(p, known) - {_module_of(p)} for p in files}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """No import circle in the package: a module that needs another's names imports it, and
    that one never needs the first back (a circle was store/subscription, database/embedded,
    scorers/llm_judge: each broken by what both need moving beneath them)."""
    assert circles(_modules()) == []


def test_the_circle_check_sees_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: a lazy import back is a circle; one under TYPE_CHECKING is not."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "a.py").write_text("from props.core import b\n")
    (tmp_path / "core" / "b.py").write_text("def f():\n    from props.core import a\n")
    (tmp_path / "core" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from props.core import a\n")
    files = sorted((tmp_path / "core").glob("*.py"))
    assert circles(files) == [["core.a", "core.b"]]


_DRIVER_ERROR = re.compile(r"\b(asyncpg|psycopg)\.(\w+\.)*\w*(Error|Exception)\b")


def _driver_errors(path: Path) -> list[int]:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1)
            if _DRIVER_ERROR.search(line)]


def test_driver_errors_are_named_in_the_log_alone() -> None:
    """PostgreSQL's refusals become props' exceptions where they enter (core/log: store.sql,
    errors.refused()); nothing above names a driver's exception class. Aside: the benchmarks'
    raw side (the driver itself, measured), the hostile critic (a probe that expects
    refusals) and the agent SDK (the agent's own client, psycopg in its container)."""
    aside = {ROOT / "tools" / "checks" / "hostile_critic.py",
             ROOT / "reactors" / "agents" / "sdk.py"}
    found = [f"{p.relative_to(ROOT)}:{line}" for p in _modules()
             if not p.is_relative_to(ROOT / "core" / "log") and "benchmarks" not in p.parts
             and p not in aside for line in _driver_errors(p)]
    assert found == []


def test_the_driver_error_check_sees_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("try:\n    pass\nexcept asyncpg.UniqueViolationError:\n    pass\n"
                   "x = asyncpg.exceptions.PostgresError\n")
    assert _driver_errors(bad) == [3, 5]


def _is_sleep(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == "sleep")
        or (isinstance(node.func, ast.Name) and node.func.id == "sleep"))


def _own(nodes: list[ast.stmt]) -> list[ast.AST]:
    """Every node under `nodes`, but not inside a function or class defined there."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _retry_loops(path: Path) -> list[int]:
    """Loops that catch a failure and then wait to try again: a sleep in an except clause,
    or after the try in the loop's body. A loop that waits first and then acts (a period, a
    heartbeat) is not one: what it does each round does not depend on a failure."""
    found = []
    for loop in ast.walk(ast.parse(path.read_text())):
        if not isinstance(loop, ast.For | ast.AsyncFor | ast.While):
            continue
        for node in _own(loop.body):
            if not isinstance(node, ast.Try | ast.TryStar) or not node.handlers:
                continue
            after = [s for s in _own(loop.body) if isinstance(s, ast.stmt)
                     and s.lineno > (node.end_lineno or node.lineno)]
            waits = [n for h in node.handlers for n in _own(h.body)] + \
                [n for s in after for n in _own([s])]
            if any(_is_sleep(n) for n in waits):
                found.append(loop.lineno)
                break
    return found


def test_every_retry_goes_through_the_one_policy_module() -> None:
    """Retries are core/log/retries.py's named policies (tenacity); a hand-written loop
    over a failure elsewhere in the package is a second policy nobody will find. Aside: the
    agent SDK, one file that stands alone in a critic's image (no tenacity there)."""
    aside = {ROOT / "core" / "log" / "retries.py", ROOT / "reactors" / "agents" / "sdk.py"}
    found = [f"{p.relative_to(ROOT)}:{line}" for p in _modules()
             if p not in aside for line in _retry_loops(p)]
    assert found == []


def test_the_retry_loop_check_sees_one(tmp_path: Path) -> None:
    code = tmp_path / "loops.py"
    code.write_text(
        "async def handler_waits():\n"
        "    for attempt in range(5):\n"
        "        try:\n            return await op()\n"
        "        except OSError:\n            await anyio.sleep(attempt)\n"
        "async def waits_after():\n"
        "    while True:\n"
        "        try:\n            await op()\n            return\n"
        "        except OSError:\n            pass\n"
        "        time.sleep(1)\n"
        "async def a_period_is_not_one():\n"
        "    while True:\n"
        "        await anyio.sleep(1)\n"
        "        try:\n            await op()\n"
        "        except OSError:\n            log.warning('next round')\n")
    assert _retry_loops(code) == [2, 8]


def _names_imported(path: Path) -> set[str]:
    """Every module a file names in an import, and for `from M import N` also M.N."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def _crossings(a: Path, b: str) -> list[str]:
    return [f"{p.relative_to(a)} imports {b}" for p in sorted(a.rglob("*.py"))
            if any(n == b or n.startswith(b + ".") for n in _names_imported(p))]


def test_the_api_and_the_viewer_do_not_import_each_other() -> None:
    """Each answers its own errors (JSON, pages); props.tools.http.app puts them together."""
    http = ROOT / "tools" / "http"
    assert _crossings(http / "api", "props.tools.http.viewer") == []
    assert _crossings(http / "viewer", "props.tools.http.api") == []


def test_the_crossing_check_sees_one(tmp_path: Path) -> None:
    (tmp_path / "routes.py").write_text("from props.tools.http import viewer\n")
    (tmp_path / "other.py").write_text("from props.tools.http import limits\n")
    assert _crossings(tmp_path, "props.tools.http.viewer") == [
        "routes.py imports props.tools.http.viewer"]


def test_tools_is_grouped_by_who_uses_it() -> None:
    """The command line, the HTTP side, the checks, the bundled data: nothing loose at the
    top of tools/ but the `props` command's entry point."""
    loose = sorted(p.name for p in (ROOT / "tools").glob("*.py")
                   if p.name not in ("cli.py", "__init__.py"))
    assert loose == []


# Where a question is only rendered: the CLI's handlers, the API and the viewer. Their SQL is
# the read models' (projections/) and the store's, so two surfaces cannot answer one question
# two ways.
RENDERERS = [ROOT / "tools" / "command_line" / "handlers", ROOT / "tools" / "http" / "api",
             ROOT / "tools" / "http" / "viewer"]
_RUNS_SQL = {"execute", "executemany", "fetch", "fetchrow", "fetchval",
             "copy_records_to_table", "copy_to_table"}  # a driver's (or store.sql's) calls
_HOLDS_SQL = {"sql", "pool"}  # what statements run on
_SQL_TEXT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|COPY|TRUNCATE|CREATE|ALTER|DROP)"
                       r"\s")


def _sql_uses(path: Path) -> list[int]:
    """Lines that run a statement (store.sql, a driver's fetch/execute), load named queries
    or hold a statement's text (docstrings aside)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in _HOLDS_SQL) \
                or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _RUNS_SQL):
            found.add(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "queries":
            found.add(node.lineno)
        elif isinstance(node, ast.ImportFrom | ast.Import) \
                and any("queries" in f"{getattr(node, 'module', '')}.{a.name}".split(".")
                        for a in node.names):
            found.add(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings and _SQL_TEXT.match(node.value):
            found.add(node.lineno)
    return sorted(found)


def test_handlers_and_routes_run_no_sql() -> None:
    """The CLI's handlers, the API's routes and the viewer render read models: every
    statement they need is a read model's (projections/) or the store's."""
    found = [f"{p.relative_to(ROOT)}:{line}" for folder in RENDERERS
             for p in sorted(folder.rglob("*.py")) for line in _sql_uses(p)]
    assert found == []


def test_the_sql_check_sees_a_statement(tmp_path: Path) -> None:
    """The negative control: a planted module with SQL of each kind fails the check."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        '"""SELECT in a docstring is prose."""\n'
        "from props.schema import queries\n"
        "_Q = queries.load('viewer')\n"
        "async def f(store, conn):\n"
        "    await store.sql.fetchval('SELECT 1')\n"
        "    await conn.execute(_Q['x'])\n"
        "    return f\"DELETE FROM {'t'}\"\n")
    assert _sql_uses(bad) == [2, 3, 5, 6, 7]

