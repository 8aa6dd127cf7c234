"""The README's store example runs as written, against a test database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from props.core.domain.store import open_store

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_store_example_runs(dsn: str, tmp_path: Path) -> None:
    block, _agent = python_blocks()
    script = tmp_path / "example.py"
    script.write_text(block)
    out = subprocess.run([sys.executable, str(script)], env={**os.environ, "PROPS_DSN": dsn},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "1 issue.reported" in out.stdout


def test_readme_names_the_two_fresh_machine_commands() -> None:
    text = README.read_text()
    assert ".venv/bin/props demo" in text
    assert "pip install -e '.[dev]' && .venv/bin/pytest" in text
    assert ".venv/bin/pytest" in (README.parent / ".ci" / "run").read_text()


async def test_readme_analyst_queries_run_as_the_analyst(dsn: str) -> None:
    import asyncpg

    from props.projections import engine
    from props.tools.checks.workload import Workload
    from tests.conftest import as_role

    async with open_store(dsn) as store:
        w = Workload(4)
        await w.setup(store)
        await w.append_runs(store, 30)
        await engine.rebuild(store)
    (block,) = re.findall(r"```sql\n(.*?)```", README.read_text(), flags=re.S)
    statements = [s.strip() for s in block.split(";") if s.strip()]
    assert len(statements) == 3
    conn = await asyncpg.connect(as_role(dsn, engine.ANALYST_ROLE))
    try:
        results = [await conn.fetch(statement) for statement in statements]
        assert results[0] and results[2]  # the middle one may rightly find nothing
    finally:
        await conn.close()


async def test_readme_agent_example_runs_as_an_agent(served: object, tmp_path: Path) -> None:
    from props.core.domain import catalog, definitions
    from props.core.log.store import EventStore
    from tests.reactor_helpers import finished, request

    assert isinstance(served, EventStore)
    _store, block = python_blocks()
    script = tmp_path / "agent.py"
    script.write_text(block)
    command = [sys.executable, str(script)]
    await definitions.push(served, catalog.DefinitionPushed(
        agent_type="critic", name="readme", tag="t", runtime="local", image="local:readme",
        command=command, digest=definitions.local_digest(command, {})))
    [run_id] = await request(served, "readme")
    assert (await finished(served, [run_id]))[run_id].status == "completed"
    types = [r.type_name for r in await served.read_stream(f"run-{run_id}")]
    assert types.count("issue.reported") >= 1 and "prompt.composed" in types


def unlisted(commands: list[str], reference: str) -> list[str]:
    """Commands no line of the reference names: `props a b` is named by a line holding
    `props a` and the word `b` (so `props runs list\\|show` names both)."""
    lines = [line.split("`")[1] for line in reference.splitlines()
             if line.startswith("| `props")]  # the command cell
    return [c for c in commands
            if not any(c.rsplit(" ", 1)[0] + " " in line + " "
                       and re.search(rf"\b{re.escape(c.rsplit(' ', 1)[1])}\b", line)
                       for line in lines)]


def test_readme_references_every_command() -> None:
    import argparse

    from props.tools.cli import build_parser

    def commands(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.append(f"{prefix} {name}")
                    found += commands(sub, f"{prefix} {name}")
        return found

    text = README.read_text()
    reference = text[text.index("## Command reference"):]
    reference = reference[:reference.index("\n## ", 5)]
    every = commands(build_parser(), "props")
    assert len(every) > 40 and unlisted(every, reference) == []
    # Negative control: a command the table does not name is reported.
    assert unlisted(["props runs rerun", "props nothing"], reference) == [
        "props runs rerun", "props nothing"]


def test_readme_lists_every_event_type() -> None:
    from props.core.domain.catalog import REGISTRY

    text = README.read_text()
    listed = text[text.index("Event types are pydantic models"):text.index("Stored events are "
                                                                          "never rewritten")]
    types = sorted(REGISTRY.names())
    assert len(types) > 20
    assert [t for t in types if f"`{t}`" not in listed] == []


def test_every_command_readme_shows_has_help() -> None:
    """Every `props ...` line of README's code blocks names a real command: its `--help`
    works (a renamed or removed command fails here before a reader tries it)."""
    import argparse

    from props.tools.cli import build_parser

    def path_of(words: list[str]) -> list[str]:
        parser, path = build_parser(), list[str]()
        for word in words:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs or word not in subs[0].choices:
                break
            parser, path = subs[0].choices[word], [*path, word]
        return path

    text = README.read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)
    lines = [line.split()[1:] for block in blocks for line in block.splitlines()
             if line.startswith("props ") and not line.split()[1].startswith("-")]
    shown = {tuple(path_of(words)) for words in lines}
    assert [w for w in lines if not path_of(w)] == []  # a word that is no command
    assert path_of(["runz", "list"]) == []  # (the negative control of that check)
    assert len(shown) > 25, shown
    for path in sorted(shown):
        out = subprocess.run([sys.executable, "-m", "props.tools.cli", *path, "--help"],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0 and "usage: props" in out.stdout, (path, out.stderr)
