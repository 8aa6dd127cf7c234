"""The SQL each projection generates, held by golden files: `props projections sql NAME`
prints it, and a change to what the runner runs shows in review as a change to a file here.
`PROPS_UPDATE_GOLDEN=1 pytest tests/test_projection_sql.py` writes them again."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from props.core.domain.catalog import REGISTRY
from props.projections import engine, folding
from props.projections.base import Projection
from props.projections.tables import Column

GOLDEN = Path(__file__).parent / "golden" / "projections"


@pytest.mark.parametrize("projection", engine.ALL, ids=lambda p: p.name)
def test_a_projections_sql_is_its_golden_file(projection: Projection) -> None:
    text = folding.statements(projection, REGISTRY)
    golden = GOLDEN / f"{projection.name}.sql"
    if os.environ.get("PROPS_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden} differs: PROPS_UPDATE_GOLDEN=1 if meant"


def test_the_command_prints_it_and_a_change_shows() -> None:
    runs = next(p for p in engine.ALL if p.name == "runs")
    printed = subprocess.run([sys.executable, "-m", "props.tools.cli", "projections", "sql",
                              "runs"], capture_output=True, text=True, timeout=60, check=True)
    assert printed.stdout == (GOLDEN / "runs.sql").read_text()
    # Negative control: one more column in a table is another statement.
    table = runs.tables[0]
    wider = dataclasses.replace(table, columns=(*table.columns, Column("extra", "text")))
    changed = dataclasses.replace(runs, tables=(wider, *runs.tables[1:]), rows=())
    assert folding.statements(changed, REGISTRY) != (GOLDEN / "runs.sql").read_text()
