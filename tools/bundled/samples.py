"""What ships with props to try it on: sample specimens, labelled grading cases, plans."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def samples_dir() -> Path:
    """The sample specimens shipped with props."""
    return Path(str(resources.files("props.tools.bundled").joinpath("specimens")))


def cases_dir() -> Path:
    """The grading cases shipped with props."""
    return Path(str(resources.files("props.tools.bundled").joinpath("grading_cases")))


def plans_dir() -> Path:
    """The evaluation plans shipped with props (the demo's, the first evaluation's)."""
    return Path(str(resources.files("props.tools.bundled").joinpath("plans")))
