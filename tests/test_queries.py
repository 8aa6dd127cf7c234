"""Every named query the code asks for exists, and every query a `.sql` file holds is asked
for: a misspelt name fails here, with its place, not on the one path that runs it."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import uuid
from pathlib import Path

import pytest

from props.core.domain import tokens
from props.core.log import errors
from props.core.log.store import EventStore
from props.projections import engine
from props.schema import queries

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "projections", "reactors", "schema", "tools")


def _load_call(node: ast.AST) -> str | None:
    """The file named by `queries.load("file")`, if `node` is that call."""
    if (isinstance(node, ast.Call) and ast.unparse(node.func) == "queries.load"
            and node.args and isinstance(node.args[0], ast.Constant)):
        return str(node.args[0].value)
    return None


def _typed_call(node: ast.AST) -> tuple[str, str] | None:
    """(file, name) of `queries.typed("file", "name", Shape)`, if `node` is that call."""
    if (isinstance(node, ast.Call) and ast.unparse(node.func) == "queries.typed"
            and len(node.args) >= 2
            and all(isinstance(a, ast.Constant) for a in node.args[:2])):
        return str(node.args[0].value), str(node.args[1].value)  # type: ignore[attr-defined]
    return None


def uses(path: Path) -> tuple[list[tuple[int, str, str]], list[tuple[int, str]], set[str]]:
    """(line, file, query) of each constant lookup; (line, code) of each lookup whose name is
    not a constant; the files loaded whole (`.items()`, `.values()`, `in`)."""
    tree = ast.parse(path.read_text(), str(path))
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and (file := _load_call(node.value)):
            bound.update({t.id: file for t in node.targets if isinstance(t, ast.Name)})
    found, dynamic, whole = [], [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (typed := _typed_call(node)) is not None:
            found.append((node.lineno, *typed))
        elif isinstance(node, ast.Subscript):
            file = _load_call(node.value) or (
                bound.get(node.value.id) if isinstance(node.value, ast.Name) else None)
            if file is None:
                continue
            if isinstance(node.slice, ast.Constant):
                found.append((node.lineno, file, str(node.slice.value)))
            else:
                dynamic.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr in ("items", "values", "keys"):
            file = _load_call(node.value) or (
                bound.get(node.value.id) if isinstance(node.value, ast.Name) else None)
            if file:
                whole.add(file)
        elif isinstance(node, ast.For | ast.comprehension) and isinstance(node.iter, ast.Name) \
                and node.iter.id in bound:
            whole.add(bound[node.iter.id])
    return found, dynamic, whole


def _all_uses() -> tuple[list[str], set[tuple[str, str]], set[str]]:
    missing, used, whole = [], set(), set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found, _dynamic, loaded = uses(path)
            whole |= loaded
            for line, file, name in found:
                used.add((file, name))
                if name not in queries.load(file):
                    missing.append(f"{path.relative_to(ROOT)}:{line}: no query {name!r} in "
                                   f"schema/sql/{file}.sql")
    return missing, used, whole


def test_every_query_asked_for_exists() -> None:
    missing, _used, _whole = _all_uses()
    assert missing == []
    dynamic = [f"{path.relative_to(ROOT)}:{line}: {code}" for package in PACKAGES
               for path in sorted((ROOT / package).rglob("*.py"))
               for line, code in uses(path)[1]]
    assert dynamic == []  # a name the check cannot read is a name it cannot check


def test_every_query_in_a_sql_file_is_asked_for() -> None:
    _missing, used, whole = _all_uses()
    unused = [f"schema/sql/{path.stem}.sql: {name}"
              for path in sorted((ROOT / "schema" / "sql").glob("*.sql"))
              if path.stem not in whole
              for name in queries.load(path.stem) if (path.stem, name) not in used]
    assert unused == []


def test_the_check_sees_a_misspelt_name(tmp_path: Path) -> None:
    """Negative control: a lookup of a query no file holds is found, with its line."""
    bad = tmp_path / "bad.py"
    bad.write_text('from props.schema import queries\n_Q = queries.load("events")\n'
                   'x = _Q["apend_one"]\ny = queries.load("tokens")["create"]\n'
                   'z = queries.typed("tokens", "lsit", Token)\n')
    found, _dynamic, _whole = uses(bad)
    assert sorted(found) == [(3, "events", "apend_one"), (4, "tokens", "create"),
                             (5, "tokens", "lsit")]
    assert "apend_one" not in queries.load("events")


def _import_every_module() -> None:
    """Every module of the package imported, so that every typed statement is declared."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "specimens" in parts or "grading_cases" in parts or parts[-1] == "__main__":
                continue
            importlib.import_module(".".join(("props", *parts)).removesuffix(".__init__"))


def _fits(columns: list[str], shape: type) -> bool:
    """The columns are the shape's first fields, in order, and every field without a default
    is among them (the code fills the rest)."""
    fields = dataclasses.fields(shape)
    required = [f.name for f in fields if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    return columns == [f.name for f in fields][:len(columns)] and set(required) <= set(columns)


def _mismatches(columns: dict[str, list[str]]) -> list[str]:
    return [f"{q.file}.{q.name}: columns {columns[f'{q.file}.{q.name}']} are not the fields "
            f"of {q.shape.__name__} {[f.name for f in dataclasses.fields(q.shape)]}"
            for q in queries.TYPED if not _fits(columns[f"{q.file}.{q.name}"], q.shape)]


async def test_every_typed_statement_returns_its_shape(store: EventStore) -> None:
    """Each typed statement, prepared against the migrated schema and the projections'
    tables, returns its shape's fields, in order (those with defaults may be left to the
    code): a renamed column or field fails here, not on the one path that reads it."""
    _import_every_module()
    assert len(queries.TYPED) >= 10
    await engine.rebuild(store)  # the projections' tables exist
    columns: dict[str, list[str]] = {}
    async with store.sql.acquire() as conn:
        for q in queries.TYPED:
            # `{schema}`: statements read from the live projections or an as-of build's.
            statement = await conn.prepare(q.text.replace("{schema}", "projections"))
            columns[f"{q.file}.{q.name}"] = [a.name for a in statement.get_attributes()]
    assert _mismatches(columns) == []
    # Negative control: a shape one field short is caught, and so is its row at run time.
    short = queries.Typed("tokens", "list", queries.load("tokens")["list"], _TokenWithoutDates)
    queries.TYPED.append(short)
    try:
        assert [m.split(":")[0] for m in _mismatches(columns)] == ["tokens.list"]
    finally:
        queries.TYPED.remove(short)
    await tokens.create(store, "someone", ("read",))
    with pytest.raises(errors.SchemaError,
                       match=r"rows of tokens\.list are not of shape _TokenWithoutDates"):
        await store.sql.rows(short)


@dataclasses.dataclass(frozen=True)
class _TokenWithoutDates:
    id: uuid.UUID
    name: str
    scopes: list[str]


def test_the_sql_spells_a_runs_statuses_as_the_vocabulary_declares_them() -> None:
    """SQL cannot import the declaration: where it lists statuses, the list is the same."""
    import re

    from props.core.domain import vocabulary

    def listed(text: str) -> list[set[str]]:
        return [set(re.findall(r"'([a-z_]+)'", m))
                for m in re.findall(r"status IN \(([^)]*)\)", text)]

    sql = "\n".join(p.read_text() for p in (ROOT / "schema" / "sql").glob("*.sql"))
    found = listed(sql)
    assert found, "no status list in the SQL: the check looks at nothing"
    allowed = [set(vocabulary.TERMINAL_STATUSES), set(vocabulary.RUN_STATUSES) -
               set(vocabulary.TERMINAL_STATUSES)]
    assert [s for s in found if s not in allowed] == []
    assert listed("status IN ('completed', 'failed')") != [allowed[0]]  # a short list fails


def test_stream_ids_and_their_inverses() -> None:
    from props.core.domain import streams
    from props.reactors.launcher import run_specs

    run = uuid.uuid4()
    assert streams.run_id_of(streams.run(run)) == run
    assert streams.scorer_of_grading(streams.grading(run, "llm-judge@1"), run) == "llm-judge@1"
    assert streams.is_grading(streams.grading(run, "tiered@2"))
    assert not streams.is_grading(streams.run(run))
    assert run_specs.run_of_container(run_specs.container_name("0123456789abcdef", run)) == run
    assert run_specs.run_of_container("props-run-nope") is None
    assert run_specs.run_of_container("other") is None
    for wrong in (streams.grading(run, "tiered@2"), "run-x", "snapshot-a/2025-01-01-00"):
        with pytest.raises(ValueError):
            streams.run_id_of(wrong)
