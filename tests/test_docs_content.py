"""What the documentation says holds: its Python and SQL examples run as written against a
test database, the CLI reference is the `--help` of every command as it is today, the event
reference names every type of the catalog, and every command a page shows exists."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from props.core.domain.store import open_store

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
API = DOCS / "reference" / "api.md"
CLI = DOCS / "reference" / "cli.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", API.read_text(), flags=re.S)


def test_api_store_example_runs(dsn: str, tmp_path: Path) -> None:
    block, _agent = python_blocks()
    script = tmp_path / "example.py"
    script.write_text(block)
    out = subprocess.run([sys.executable, str(script)], env={**os.environ, "PROPS_DSN": dsn},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "1 issue.reported" in out.stdout


def test_readme_names_the_two_fresh_machine_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 200  # what props is, how to start, where to go: no more
    assert ".venv/bin/props demo" in text
    assert "pip install -e '.[dev]' && .venv/bin/pytest" in text
    assert ".venv/bin/pytest" in (README.parent / ".ci" / "run").read_text()


async def test_analyst_queries_run_as_the_analyst(dsn: str) -> None:
    import asyncpg

    from props.projections import engine
    from props.tools.checks.workload import Workload
    from tests.conftest import as_role, fence_clear

    async with open_store(dsn) as store:
        w = Workload(4)
        await w.setup(store)
        await w.append_runs(store, 30)
        await fence_clear(store)
        await engine.rebuild(store)
    (block,) = re.findall(r"```sql\n(.*?)```", (DOCS / "howto" / "results.md").read_text(),
                         flags=re.S)
    statements = [s.strip() for s in block.split(";") if s.strip()]
    assert len(statements) == 5
    conn = await asyncpg.connect(as_role(dsn, engine.ANALYST_ROLE))
    try:
        results = [await conn.fetch(statement) for statement in statements]
        # The workload ran no evaluation (the two on `demo` find nothing, and run: the
        # analyst may read their views), and every TP may have been found by some run.
        assert results[0] and results[4]
    finally:
        await conn.close()


async def test_api_agent_example_runs_as_an_agent(served: object, tmp_path: Path) -> None:
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


def commands(parser: argparse.ArgumentParser, prefix: str = "props"
             ) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Every command under `parser`: its words, its one-line help, its parser."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((f"{prefix} {name}", helps.get(name, ""), sub))
                found += commands(sub, f"{prefix} {name}")
    return found


CLI_HEAD = """\
# CLI reference

<!-- Generated from every command's --help (at 100 columns) by tests/test_docs_content.py;
after a change to a command, rewrite it with
PROPS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_docs_content.py -k cli_reference -->

Every command has `--help`, wrapped at the terminal's width; this page is that text for each.
The database is `PROPS_DSN` when set, else the embedded server under `PROPS_HOME` (default
`~/.local/share/props`). `props --version` says which props it is; `-v` (log what props is
doing) works before or after the command. Exit codes: [exit codes](exit-codes.md).

Every command that prints data takes `--format table|json|csv` (`--json` is `--format json`;
JSON is one document and nothing else on stdout) and `--wide`. A table fits the terminal
without splitting a word, a number, an id or a name: at 80 columns it uses short headers
(named under it), leaves out the columns it has no room for (and names them), or prints one
record per row when not even the names fit side by side; `--wide` shows every column
unsqueezed. A run is named by its id or by 4 or more of its first hex digits (tables show
8), here, in the API (`/api/runs/7aab3354`) and in the viewer's URLs (`/runs/7aab3354`).
Stored text (a model's name, an agent's rationale) is printed as text, never read as markup;
characters that would act on the terminal are shown as escapes (`\\x1b`, `\\u202e`).

"""


def cli_reference() -> str:
    """docs/reference/cli.md as the commands' parsers give it today."""
    from props.tools.cli import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: fix it
    try:
        parser = build_parser()
        every = commands(parser)
        table = ["| command | what it does |", "|---|---|"]
        table += ["| [`{}`](#{}) | {} |".format(words, words.replace(" ", "-"),
                                                one_line.replace("|", "\\|"))
                  for words, one_line, _ in every]
        sections = [f"## {words}\n\n```text\n{sub.format_help().rstrip()}\n```\n"
                    for words, _, sub in every]
        top = f"## props\n\n```text\n{parser.format_help().rstrip()}\n```\n"
    finally:
        if saved is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = saved
    text = CLI_HEAD + "\n".join(table) + "\n\n" + top + "\n" + "\n".join(sections)
    return text.replace(str(ROOT), "<props>")  # a default path: the clone's, not this one


def test_cli_reference_is_every_commands_help() -> None:
    text = cli_reference()
    if os.environ.get("PROPS_UPDATE_GOLDEN") == "1":
        CLI.write_text(text)
    assert CLI.read_text() == text, f"{CLI} differs: PROPS_UPDATE_GOLDEN=1 if meant"


def unlisted(every: list[str], reference: str) -> list[str]:
    """Commands no row of the reference's table names (its first cell, `props a b`)."""
    rows = {line.split("`")[1] for line in reference.splitlines() if line.startswith("| [`props")}
    return [c for c in every if c not in rows]


def test_cli_reference_lists_every_command() -> None:
    from props.tools.cli import build_parser

    every = [words for words, _, _ in commands(build_parser())]
    assert len(every) > 40 and unlisted(every, CLI.read_text()) == []
    # Negative control: a command the table does not name is reported.
    assert unlisted(["props runs rerun", "props nothing"], CLI.read_text()) == [
        "props runs rerun", "props nothing"]


def test_events_reference_lists_every_event_type() -> None:
    from props.core.domain.catalog import REGISTRY

    text = (DOCS / "reference" / "events.md").read_text()
    listed = text[text.index("Event types are pydantic models"):text.index("Stored events are "
                                                                          "never rewritten")]
    types = sorted(REGISTRY.names())
    assert len(types) > 20
    assert [t for t in types if f"`{t}`" not in listed] == []


def shown_commands(text: str) -> list[list[str]]:
    """The words after `props` of each command line in a page's shell blocks (written as
    `props ...` or `.venv/bin/props ...`, alone or after `&&`)."""
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", text, flags=re.DOTALL)
    found = []
    for block in blocks:
        for line in block.splitlines():
            for part in line.split("&&"):
                words = part.split()
                if words and words[0] in ("props", ".venv/bin/props") and len(words) > 1 \
                        and not words[1].startswith("-"):
                    found.append(words[1:])
    return found


def test_every_command_the_docs_show_has_help() -> None:
    """Every `props ...` line of README's and docs/' shell blocks names a real command whose
    `--help` formats (a renamed or removed command fails here before a reader tries it)."""
    from props.tools.cli import build_parser

    parser = build_parser()

    def path_of(words: list[str]) -> list[str]:
        at, path = parser, list[str]()
        for word in words:
            subs = [a for a in at._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs or word not in subs[0].choices:
                break
            at, path = subs[0].choices[word], [*path, word]
        return path

    pages = [README, *sorted(DOCS.rglob("*.md"))]
    lines = [words for page in pages for words in shown_commands(page.read_text())]
    assert [w for w in lines if not path_of(w)] == []  # a word that is no command
    assert path_of(["runz", "list"]) == []  # (the negative control of that check)
    shown = {tuple(path_of(words)) for words in lines}
    assert len(shown) > 30, shown
    helps = {words: help_parser for words, _, help_parser in commands(parser)}
    for path in sorted(shown):
        assert "usage: props" in helps[" ".join(("props", *path))].format_help(), path


def test_retries_page_lists_every_policy() -> None:
    from props.core.log import retries

    names = sorted(p.name for p in vars(retries).values() if isinstance(p, retries.Policy))
    page = (DOCS / "internals" / "retries.md").read_text()
    policies = page.split("| policy |", 1)[1]  # (the retry rule's table above it: its test's)
    rows = re.findall(r"^\| `([^`]+)` \|", policies, flags=re.M)
    assert len(names) >= 10 and sorted(rows) == names
