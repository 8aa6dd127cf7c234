"""Which reported issues a location rule may match at all: the candidates for a defect.

A location rule (overlap, tiered) says where an issue points, not what it claims. An issue
whose claim can only be about style (a baseline's `E501 Line too long` on the line a fix
rewrote) is never a candidate for a defect, wherever it lies: it matches nothing, and it
takes no defect away from another issue in the one-to-one assignment. The rule lives here,
in the layer that feeds the rules, because a released rule's file is frozen (its bytes are
in every grade it made); the grades it changed say so (`RULE`, in their metadata and their
ids, see `grade_ids.grade_id`).

The category comes from the rule a baseline critic names first in every rationale
(`[E501] ...`) and the documented table of each tool (`baselines.CATEGORIES`): so an issue
recorded before the table existed reads exactly as one recorded after, and re-scoring an
old run applies the rule to it too. Other critics' issues are all candidates.
"""

from __future__ import annotations

from collections.abc import Mapping

from props.core.domain import baselines

RULE = "style-never@1"  # the rule's name, in the metadata of the grades it changed


def never(definition: str, rationales: Mapping[str, str]) -> frozenset[str]:
    """The issues of a run of `definition` that are never candidates: a baseline's issues
    whose rule is style only."""
    tool = baselines.tool_of(definition)
    if tool is None:
        return frozenset()
    return frozenset(issue for issue, text in rationales.items()
                     if (rule := baselines.rule_of(text)) is not None
                     and baselines.category(tool, rule) == "style")


def may_exclude(definition: str) -> bool:
    """Whether runs of `definition` can hold issues that are never candidates (the server's
    SQL rules grade only the others: these are graded in Python)."""
    return baselines.tool_of(definition) is not None
