"""CSV that a spreadsheet opens as data: a cell whose text would start a formula (a model name
`=HYPERLINK(...)`, a rationale beginning with `@` or `-`) is neutralized with a leading quote,
in every CSV props writes (`render.print_csv`: the tables', the report's, the comparison's)."""

from __future__ import annotations

import csv
import io

import pytest

from props.tools.command_line import render


@pytest.mark.parametrize("text", ['=HYPERLINK("http://x","y")', "+1+cmd", "-2+3", "@SUM(A1)",
                                  "\t=1", "\r=1"])
def test_a_formula_is_text(text: str) -> None:
    assert render.csv_field(text) == "'" + text


@pytest.mark.parametrize("value", [-6.7, "-6.7", 12, "model-a", "", None, "a=b"])
def test_numbers_and_plain_text_are_kept(value: object) -> None:
    assert render.csv_field(value) == render.plain(value)  # the negative control


def test_print_csv_writes_every_row_neutralized(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_csv(["model", "recall"], [["=HYPERLINK(1)", -0.5], ["fine", 0.25]])
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows == [["model", "recall"], ["'=HYPERLINK(1)", "-0.5"], ["fine", "0.25"]]
