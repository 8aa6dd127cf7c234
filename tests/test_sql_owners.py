"""Every table's SQL has one owner (issue 58): the owners listed in docs/internals/layout.md
("Who owns each table's SQL") keep their statements in their `.sql` files under schema/sql/,
and no Python module of props outside an owner's modules holds SQL naming a table (or a
function or view) of props's schemas. What is not moved yet is the page's known remainder,
held to what is still true.

On the code before issue 58's move (1ed34be) the module test fails: it names
core/log/migrate.py (props_meta.migrations), core/log/partitions.py and
core/domain/archive/imports.py (props.ensure_partitions), core/domain/archive/archival.py
(the partitions' DDL), core/domain/run_requests.py (props.streams) and
projections/figures.py (projections.model_scores); the `.sql` test names exports.sql, which
wrote the log's props.blobs. The negative controls below point the scanner at a temporary
module with inline SQL and see it named.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = ROOT / "docs" / "internals" / "layout.md"
SQL_DIR = ROOT / "schema" / "sql"
PRODUCT = ("core", "projections", "reactors", "tools")
NOT_PROPS = ("tools/bundled/",)  # the sample specimens: code under review, not props's

# A string that starts like a statement (docstrings and messages do not).
_STATEMENT = re.compile(
    r"^\s*\(?\s*(SELECT|INSERT INTO|UPDATE \S|DELETE FROM|WITH \w|CREATE |ALTER |DROP |COPY |"
    r"LOCK |SET |TRUNCATE |VACUUM|ANALYZE|GRANT |REVOKE )")
# An object of props's schemas, named; {LIVE}/{SHADOW}/{schema} are the projections' schemas.
_QUALIFIED = re.compile(r"\b(props_meta|props|projections|agent)\.(\w+|\{)")
_SETTING = re.compile(r"(current_setting|set_config)\('[\w.]+'")  # props.x: a setting
_PROJECTION_SCHEMA = re.compile(r"\{(LIVE|SHADOW|schema|target)\}\.")
# A table named through a hole: its schema (`{check_schema(schema)}.name`), or all of it in a
# write (`CREATE TABLE {target}`).
_UNNAMED = re.compile(
    r"\{[^{}]*\}\.[\w{]|\b(CREATE (TEMP |UNLOGGED )?TABLE( IF NOT EXISTS)?|ALTER TABLE|"
    r"DROP (TABLE|VIEW)( IF EXISTS)?|INSERT INTO|DELETE FROM|TRUNCATE|COPY|LOCK TABLE)\s+\{")
_WRITE = re.compile(r"\b(?:INSERT INTO|UPDATE|DELETE FROM|COPY|TRUNCATE)\s+"
                    r"((?:props_meta|props|projections|agent)\.\w+)")
_CELL = re.compile(r"`([^`]+)`")


@dataclasses.dataclass(frozen=True)
class Owner:
    name: str
    files: frozenset[str]  # stems of schema/sql/*.sql
    tables: frozenset[str]  # `props.events`, or `agent.*` for a whole schema
    modules: frozenset[str]  # repository paths

    def owns(self, obj: str) -> bool:
        return obj in self.tables or f"{obj.split('.')[0]}.*" in self.tables


def _section(title: str) -> str:
    text = LAYOUT.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:] if end < 0 else text[start:end]


def owners() -> list[Owner]:
    """The owners' table of layout.md."""
    found = []
    for line in _section("## Who owns each table's SQL").splitlines():
        cells = line.strip().strip("|").split("|")
        if len(cells) != 4 or not line.startswith("| ") or cells[0].strip() in ("owner", ""):
            continue
        if set(cells[0].strip()) <= set("-"):
            continue
        found.append(Owner(cells[0].strip(), *(frozenset(_CELL.findall(c)) for c in cells[1:])))
    return found


def remainder() -> dict[str, frozenset[str]]:
    """The page's known remainder: each bullet's paths (before its first colon), each with
    the objects it names beside them (`reads props.events`), or none: all of its SQL."""
    out: dict[str, frozenset[str]] = {}
    for item in _section("### Known remainder").split("\n- ")[1:]:
        head = " ".join(item.split()).split(": ", 1)[0]
        named = _CELL.findall(head)
        paths = [n for n in named if "/" in n]
        for path in paths:
            out[path] = frozenset(n for n in named if "/" not in n)
    return out


def statements(path: Path) -> list[tuple[int, str]]:
    """The SQL a module holds in its string literals (an f-string's holes read `{...}`)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else
                           "{" + ast.unparse(getattr(v, "value", v)) + "}" for v in node.values)
        else:
            continue
        if _STATEMENT.match(text):
            found.append((node.lineno, text))
    return found


def objects(text: str) -> set[str]:
    """The objects of props's schemas a statement names; `?` for a table it names only
    through a hole (`CREATE TABLE {target}`, `{check_schema(schema)}.name`)."""
    text = _SETTING.sub("", text)
    named = {f"{schema}.{name}" for schema, name in _QUALIFIED.findall(text)}
    if _PROJECTION_SCHEMA.search(text):
        named.add("projections.{")
    if _UNNAMED.search(text):
        named.add("?")
    return named


def violations(paths: list[Path], listed: list[Owner],
               excused: dict[str, frozenset[str]]) -> list[str]:
    """One line for each statement of these modules that names an object whose owner does
    not list the module (a write through a hole: no owner lists the module at all)."""
    out = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        if rel in excused and not excused[rel]:
            continue
        for line, text in statements(path):
            for obj in sorted(objects(text) - excused.get(rel, frozenset())):
                mine = [o for o in listed if rel in o.modules]
                if obj == "?" and mine:
                    continue
                holder = [o for o in listed if o.owns(obj)]
                if obj != "?" and holder and any(rel in o.modules for o in holder):
                    continue
                whose = holder[0].name if holder else "no owner"
                out.append(f"{rel}:{line}: SQL for {obj} ({whose}) outside its owner: "
                           f"{' '.join(text.split())[:80]}")
    return out


def product_modules() -> list[Path]:
    return [p for top in PRODUCT for p in sorted((ROOT / top).rglob("*.py"))
            if not p.relative_to(ROOT).as_posix().startswith(NOT_PROPS)]


def migrated_tables() -> set[str]:
    text = "\n".join(p.read_text() for p in [*(ROOT / "schema" / "migrations").glob("*.sql"),
                                             SQL_DIR / "migrations.sql"])
    return set(re.findall(r"CREATE (?:UNLOGGED )?TABLE (?:IF NOT EXISTS )?"
                          r"((?:props_meta|props)\.\w+)", text))


def test_no_module_outside_an_owner_holds_sql_for_its_tables() -> None:
    assert violations(product_modules(), owners(), remainder()) == []


def test_the_known_remainder_is_parsed() -> None:
    """The page's bullets reach the test (a remainder nobody reads would excuse nothing and
    everything at once)."""
    excused = remainder()
    assert excused["projections/rows.py"] == {"props.events"}
    assert excused["tools/checks/benchmarks/viewer_suite.py"] == frozenset()


def test_each_sql_file_and_each_table_has_one_owner() -> None:
    listed = owners()
    files = [f for o in listed for f in o.files]
    assert sorted(files) == sorted(p.stem for p in SQL_DIR.glob("*.sql"))
    tables = [t for o in listed for t in o.tables if not t.endswith(".*")]
    assert len(tables) == len(set(tables))
    assert sorted(tables) == sorted(migrated_tables())


def test_each_module_an_owner_lists_holds_its_sql() -> None:
    """A module listed as an owner's that no longer builds SQL for a table leaves the list."""
    for owner in owners():
        for module in owner.modules:
            assert any(objects(text) for _, text in statements(ROOT / module)), module


def test_a_table_is_written_only_from_its_owners_files() -> None:
    listed = owners()
    excused = remainder()
    wrong: list[str] = []
    for owner in listed:
        for stem in owner.files:
            if f"schema/sql/{stem}.sql" in excused:
                continue
            for table in set(_WRITE.findall((SQL_DIR / f"{stem}.sql").read_text())):
                if not owner.owns(table):
                    wrong.append(f"{stem}.sql writes {table}")
    assert wrong == []


def test_the_known_remainder_is_still_true() -> None:
    """Each entry still holds SQL outside its owner: a moved one must leave the list."""
    listed = owners()
    for entry in remainder():
        path = ROOT / entry
        if entry.endswith(".sql"):
            writes = set(_WRITE.findall(path.read_text()))
            home = next(o for o in listed if path.stem in o.files)
            assert any(not home.owns(t) for t in writes), entry
        else:
            assert violations([path], listed, {}), entry


def test_a_module_with_inline_sql_for_a_table_is_named(tmp_path: Path) -> None:
    """Negative control: a module outside every owner that reads the log inline, and one of
    the projections' modules that writes the log's checkpoints, are named; SQL that names no
    table is not."""
    stray = tmp_path / "stray.py"
    stray.write_text('async def f(conn):\n'
                     '    await conn.execute("SELECT 1")\n'
                     '    return await conn.fetch("SELECT count(*) FROM props.events")\n')
    found = violations([stray], owners(), remainder())
    assert len(found) == 1 and "props.events (the log" in found[0], found
    # The projections' own module, on its own tables: nothing to say.
    assert violations([ROOT / "projections" / "engine.py"], owners(), {}) == []
    writer = tmp_path / "writer.py"
    writer.write_text('Q = f"DELETE FROM props.checkpoints WHERE name = {1}"\n')
    assert violations([writer], owners(), {})


@pytest.mark.parametrize("line", [
    'x = "SELECT agent.report(%s)"',
    'x = f"CREATE TABLE {target} (a int)"',
    'x = f"LOCK TABLE {LIVE}.{name} IN ACCESS EXCLUSIVE MODE"',
    'x = f"DROP VIEW IF EXISTS {check_schema(schema)}.{view}"',
])
def test_the_scanner_sees_each_way_sql_is_written(tmp_path: Path, line: str) -> None:
    """Negative control of the scanner: each shape the product uses, outside any owner."""
    module = tmp_path / "m.py"
    module.write_text(line + "\n")
    assert violations([module], owners(), {})
