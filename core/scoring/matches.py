"""What a scorer says of one issue (a Match), and what counts as found: beneath every
scorer, the rules (`scorers`) and the judges (`llm_judge`) alike."""

from __future__ import annotations

import dataclasses

FIND_GRADE = 1.0  # a TP match at this grade is a find; below it, partial credit


@dataclasses.dataclass(frozen=True)
class Match:
    """What an issue was found to be: a TP occurrence, a known FP, or nothing known."""

    tp_id: str | None = None
    tp_occurrence: int | None = None
    fp_id: str | None = None
    grade: float = 0.0

    @property
    def key(self) -> tuple[str | None, int | None, str | None]:
        return self.tp_id, self.tp_occurrence, self.fp_id

    @property
    def find(self) -> bool:
        """Whether the issue found its TP occurrence (full credit), not just came near it."""
        return self.tp_id is not None and self.grade >= FIND_GRADE
