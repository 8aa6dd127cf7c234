"""The parsed form of one access-log line."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class Record:
    when: datetime
    client: str
    method: str
    path: str
    status: int
    size: int
    duration_ms: int
    tags: list[str] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        return self.status >= 500
