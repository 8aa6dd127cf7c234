"""The README's store example runs as written, against a test database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_store_example_runs(dsn: str, tmp_path: Path) -> None:
    (block,) = python_blocks()
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
