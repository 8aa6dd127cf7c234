"""Argument types the commands share: a value argparse refuses is a usage error (exit 2,
with the command's usage), never a traceback or an empty answer to a typo."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number from 1 (`--limit`, `--count`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value
