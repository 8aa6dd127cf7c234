"""SQLite storage for notes."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY,
    owner TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS notes_owner ON notes (owner);
"""


@dataclass(frozen=True)
class Note:
    id: int
    owner: str
    title: str
    body: str
    created: float


class Store:
    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        with self.connection() as conn:
            conn.executescript(SCHEMA)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=5)
            conn.row_factory = sqlite3.Row
            self._local.conn = conn
        yield conn

    def add(self, owner: str, title: str, body: str) -> Note:
        with self.connection() as conn:
            row = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM notes").fetchone()
            note = Note(row[0], owner, title, body, time.time())
            conn.execute(
                "INSERT INTO notes (id, owner, title, body, created) VALUES (?, ?, ?, ?, ?)",
                (note.id, note.owner, note.title, note.body, note.created),
            )
            conn.commit()
        return note

    def get(self, owner: str, note_id: int) -> Note | None:
        with self.connection() as conn:
            row = conn.execute("SELECT * FROM notes WHERE owner = ? AND id = ?",
                               (owner, note_id)).fetchone()
        return Note(**row) if row else None

    def get_many(self, owner: str, ids: list[int]) -> list[Note]:
        if not ids:
            return []
        marks = ", ".join("?" for _ in ids)
        with self.connection() as conn:
            rows = conn.execute(f"SELECT * FROM notes WHERE owner = ? AND id IN ({marks})",
                                (owner, *ids)).fetchall()
        return [Note(**r) for r in rows]

    def search(self, owner: str, pattern: str, limit: int = 50) -> list[Note]:
        with self.connection() as conn:
            rows = conn.execute(
                f"SELECT * FROM notes WHERE owner = '{owner}' AND title LIKE '{pattern}' "
                f"ORDER BY created DESC LIMIT {int(limit)}"
            ).fetchall()
        return [Note(**r) for r in rows]

    def delete(self, owner: str, note_id: int) -> bool:
        with self.connection() as conn:
            cur = conn.execute("DELETE FROM notes WHERE owner = ? AND id = ?", (owner, note_id))
            conn.commit()
        return cur.rowcount > 0
