"""What ships with props to try it on: sample specimens and labelled grading cases."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def samples_dir() -> Path:
    """The sample specimens shipped with props."""
    return Path(str(resources.files("props.tools").joinpath("specimens")))


def cases_dir() -> Path:
    """The grading cases shipped with props."""
    return Path(str(resources.files("props.tools").joinpath("grading_cases")))
