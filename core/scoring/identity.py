"""A scorer's identity: the hash of everything that decides a grade.

For a location rule that is its code hash (its file's bytes and its settings). For a judge
it is also what the code hash cannot see: the prompt template as this process would send it
(`llm_judge.SYSTEM`, read now, not the source file's text), the model and its endpoint, the
sampling parameters and draws (its settings), and the rule that makes one verdict of several
(the majority); for a panel, each judge's identity. A verification is of one identity, and
activation is gated on it: a byte changed anywhere in that list is another scorer to verify.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from props.core.scoring import llm_judge, scorers

# How several answers become one verdict (llm_judge.majority): named, so that a change of
# rule is a change of identity even where the code hash would not show it.
AGGREGATION = {"llm-judge": "majority of the draws, more than half",
               "llm-panel": "majority of the judges, more than half"}


def parts(s: scorers.Scorer) -> dict[str, Any]:
    """What the identity hashes, readable (`props scorers list --format json` shows it)."""
    out: dict[str, Any] = {"scorer": scorers.ref(s), "code_hash": s.code_hash,
                           "settings": s.settings}
    if isinstance(s, llm_judge.LlmJudge):
        out.update(kind="llm-judge", prompt=llm_judge.SYSTEM,
                   aggregation=AGGREGATION["llm-judge"])
    elif isinstance(s, llm_judge.LlmPanel):
        out.update(kind="llm-panel", judges=[identity(j) for j in s.judges],
                   aggregation=AGGREGATION["llm-panel"])
    return out


def identity(s: scorers.Scorer) -> str:
    """The sha256 (hex) of `parts(s)`, canonical JSON."""
    return hashlib.sha256(orjson.dumps(parts(s), option=orjson.OPT_SORT_KEYS)).hexdigest()


def short(identity_hash: str) -> str:
    """How a figure names it: 12 hex digits, as the report names a digest."""
    return identity_hash[:12]
