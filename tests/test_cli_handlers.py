"""The command line's two halves: parsers that load nothing heavy, and handlers that exist.

Every parser names its handler as "module:function"; the CLI imports that module only once
the arguments parsed, so `props X --help` loads neither the catalog nor the driver.
"""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys

import pytest

from props.tools import cli

HEAVY = ("asyncpg", "pydantic", "rich", "aiodocker", "props.core.domain.catalog")


def _leaves(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """(command path, parser) of every command that runs something."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {path}".strip(), p) for path, p in _leaves(sub)]
    if not found and parser.get_default("handler") is not None:
        found.append(("", parser))
    return found


def test_every_command_names_a_handler_that_exists() -> None:
    leaves = _leaves(cli.build_parser(None))
    assert len(leaves) >= 50  # every command of every area
    for path, parser in leaves:
        handler = cli.handler_of(parser.get_default("handler"))
        assert inspect.iscoroutinefunction(handler), path


def test_the_cli_opens_the_store_for_exactly_the_handlers_that_take_it() -> None:
    """A parser that asks for the store (`connections=N`) names a handler of (args, store);
    one that does not names a handler of (args) alone: `cli.execute` calls each as declared."""
    takes, declared = set(), set()
    for path, parser in _leaves(cli.build_parser(None)):
        handler = cli.handler_of(parser.get_default("handler"))
        if list(inspect.signature(handler).parameters) == ["args", "store"]:
            takes.add(path)
        else:
            assert list(inspect.signature(handler).parameters) == ["args"], path
        if parser.get_default("connections") is not None:
            declared.add(path)
    assert takes == declared
    assert len(takes) >= 30  # the commands that read or write the log
    assert {"report", "runs list", "export", "import"} <= takes
    assert "db status" not in takes  # it opens a store only once migrations are applied


@pytest.mark.parametrize("word", sorted(set(cli.COMMANDS)))
def test_a_commands_parser_loads_nothing_heavy(word: str) -> None:
    probe = ("import sys; from props.tools import cli; cli.build_parser(sys.argv[1]); "
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, word], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == ""


def test_the_probe_sees_a_heavy_import() -> None:
    """Negative control: the same probe reports a module that was imported."""
    probe = ("import sys, asyncpg; "
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "asyncpg"
