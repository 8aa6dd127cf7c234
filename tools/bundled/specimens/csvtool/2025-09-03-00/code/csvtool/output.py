"""Printing results as aligned text or JSON."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import TextIO

from csvtool.stats import Summary


def format_number(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value.is_integer():
        return f"{value:,.0f}"
    return f"{value:,.3f}"


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]],
                out: TextIO = sys.stdout) -> None:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out.write(line.rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")


def print_summary(name: str, summary: Summary, as_json: bool = False,
                  out: TextIO = sys.stdout) -> None:
    if as_json:
        data = {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(summary).items()}
        out.write(json.dumps({"column": name, **data}) + "\n")
        return
    fields = asdict(summary)
    print_table(["statistic", "value"],
                [[k, format_number(float(v))] for k, v in fields.items()], out)


def write_safely(text: str, out: TextIO = sys.stdout) -> None:
    """Write, turning a closed pipe (csvtool ... | head) into a quiet exit."""
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        try:
            sys.stdout = open("/dev/null", "w")
        except OSError:
            pass
        raise SystemExit(0) from None
