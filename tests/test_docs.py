"""The documentation runs as written.

Every shell block of README.md and docs/quickstart.md runs, in the page's order, in a shell
of its own, against a database of the test's own (`PROPS_DSN`) and a temporary `PROPS_HOME`,
from a folder that holds what a clone's root holds for them (`.venv`, `tools`). A block that
cannot run here carries `<!-- not run: why -->` on the line before it, and the test counts
those; `<!-- doc-test: appends nothing -->` checks that the block appended no event;
`<!-- doc-test: after the install -->` runs what follows the install (`python3 -m venv .venv
&& .venv/bin/pip install -e '.[...]' && `: the test's own environment stands for it). And
every relative link of README.md and docs/ names a file (and a heading) that is there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*(not run|doc-test):\s*(.+?)\s*-->$")
INSTALL = re.compile(r"^python3 -m venv \.venv && \.venv/bin/pip install -e '\.\[[a-z,]+\]' && ")
SHELLS = {"sh", "bash", "shell"}
# The blocks each run page may leave unrun, each with its reason on the page: a new one
# must be counted here, so a page cannot drift into prose nobody runs.
NOT_RUN = {"README.md": 2, "docs/quickstart.md": 1}


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: tuple[str, str] | None  # ("not run" | "doc-test", what it says)


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, each with the marker comment just above it."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(above.strip())
        found.append(Block(i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n",
                           (marker.group(1), marker.group(2)) if marker else None))
        i = end + 1
    return found


def script_of(block: Block) -> str | None:
    """What the test runs of a shell block: None for a block marked not run."""
    kind, note = block.marker or ("", "")
    if kind == "not run":
        return None
    if kind == "doc-test" and note == "after the install":
        stripped = INSTALL.sub("", block.text, count=1)
        assert stripped != block.text, f"line {block.line}: no install to leave out"
        return stripped
    assert kind == "" or note == "appends nothing", f"line {block.line}: unknown {note!r}"
    return block.text


def event_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM props.events").fetchone()
    assert row is not None
    return int(row[0])


def clone_root(tmp: Path) -> Path:
    """A working folder that holds what the pages name from a clone's root: `.venv` (the
    environment running the tests) and `tools` (the bundled plans); what the blocks write
    lands here, not in the repository."""
    work = tmp / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (work / "tools").symlink_to(ROOT / "tools", target_is_directory=True)
    return work


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", sorted(NOT_RUN))
def test_every_shell_block_runs(page: str, dsn: str, tmp_path: Path) -> None:
    shell = [b for b in blocks((ROOT / page).read_text()) if b.language in SHELLS]
    work = clone_root(tmp_path)
    home = tmp_path / "home"
    env = {**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(home), "COLUMNS": "80",
           "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PROPS_TEST_DSN", None)
    ran = 0
    for block in shell:
        script = script_of(block)
        if script is None:
            continue
        before = event_count(dsn) if block.marker == ("doc-test", "appends nothing") else None
        out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env,
                             capture_output=True, text=True, timeout=600, check=False)
        assert out.returncode == 0, (
            f"{page}:{block.line} exited {out.returncode}\n{script}\n{out.stdout[-3000:]}\n"
            f"{out.stderr[-3000:]}")
        if before is not None:
            assert event_count(dsn) == before, f"{page}:{block.line} appended events"
        ran += 1
    assert len(shell) - ran == NOT_RUN[page], f"{page}: {len(shell) - ran} blocks not run"
    assert ran >= 3


def test_markers_are_read_as_written() -> None:
    """The parser's own negative controls: a marker is taken from the line above a block
    only, an unknown doc-test marker fails, and an install that is not there fails."""
    text = ("<!-- not run: a reason -->\n```sh\nfalse\n```\n\nprose\n```sh\ntrue\n```\n"
            "<!-- doc-test: after the install -->\n```sh\n.venv/bin/props demo\n```\n")
    first, second, third = blocks(text)
    assert first.marker == ("not run", "a reason") and script_of(first) is None
    assert second.marker is None and script_of(second) == "true\n"
    with pytest.raises(AssertionError, match="no install"):
        script_of(third)
    install = Block(1, "sh", "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && "
                             ".venv/bin/props demo\n", ("doc-test", "after the install"))
    assert script_of(install) == ".venv/bin/props demo\n"
    with pytest.raises(AssertionError, match="unknown"):
        script_of(Block(1, "sh", "true\n", ("doc-test", "appends everything")))


# -- links -----------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
# Pages other branches of this release write; a link to one is allowed while it is missing
# (merged, they resolve like any other). Empty this once they are all in.
PENDING = {"docs/howto/local-model.md", "docs/howto/serve.md", "docs/reference/imports.md",
           "docs/reference/chance.md"}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces
    to `-`."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {anchor(h) for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def broken_links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        relative = where.relative_to(ROOT).as_posix() if where.is_relative_to(ROOT) else ""
        if not where.exists():
            if relative not in PENDING:
                broken.append(target)
        elif fragment and where.suffix == ".md" and fragment not in anchors(where):
            broken.append(target)
    return broken


def test_every_relative_link_resolves() -> None:
    found = {p.relative_to(ROOT).as_posix(): broken_links(p) for p in pages()}
    assert len(found) > 20
    assert {page: links for page, links in found.items() if links} == {}


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    """Negative control: a missing file, a missing heading and a link inside a code block
    (not a link) are told apart."""
    (tmp_path / "there.md").write_text("# A heading, here\n")
    page = tmp_path / "page.md"
    page.write_text("[a](there.md) [b](there.md#a-heading-here) [c](gone.md) "
                    "[d](there.md#nowhere) [e](https://example.org/x)\n```\n[f](gone2.md)\n```\n")
    assert broken_links(page) == ["gone.md", "there.md#nowhere"]
