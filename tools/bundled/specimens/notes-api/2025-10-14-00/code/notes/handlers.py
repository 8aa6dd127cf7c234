"""HTTP handlers: /notes (list, search, create) and /notes/<id> (read, delete)."""

from __future__ import annotations

import json
import logging
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from notes import auth
from notes.db import Note, Store

log = logging.getLogger("notes")
NOTE_PATH = re.compile(r"^/notes/(\d+)$")
MAX_BODY = 64 * 1024


def note_json(note: Note) -> dict[str, Any]:
    return {"id": note.id, "title": note.title, "body": note.body, "created": note.created}


class NotesHandler(BaseHTTPRequestHandler):
    store: Store
    tokens: dict[str, str]
    debug = True

    def send_json(self, status: HTTPStatus, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", auth.etag(body))
        self.end_headers()
        self.wfile.write(body)

    def user(self) -> str | None:
        user = auth.user_for(self.headers.get("Authorization"), self.tokens)
        if user is None:
            self.send_json(HTTPStatus.UNAUTHORIZED, {"error": "missing or unknown token"})
        return user

    def do_GET(self) -> None:
        user = self.user()
        if user is None:
            return
        url = urlsplit(self.path)
        if url.path == "/notes":
            query = parse_qs(url.query)
            pattern = "%" + query.get("q", [""])[0] + "%"
            try:
                notes = self.store.search(user, pattern)
            except Exception:
                log.exception("search failed")
                notes = []
            self.send_json(HTTPStatus.OK, [note_json(n) for n in notes])
            return
        match = NOTE_PATH.match(url.path)
        if match:
            note = self.store.get(user, int(match.group(1)))
            if note is None:
                self.send_json(HTTPStatus.NOT_FOUND, {"error": "no such note"})
            else:
                self.send_json(HTTPStatus.OK, note_json(note))
            return
        self.send_json(HTTPStatus.NOT_FOUND, {"error": "no such resource"})

    def do_POST(self) -> None:
        user = self.user()
        if user is None:
            return
        if urlsplit(self.path).path != "/notes":
            self.send_json(HTTPStatus.NOT_FOUND, {"error": "no such resource"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.send_json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return
        try:
            data = json.loads(self.rfile.read(length) or b"{}")
            title, body = str(data["title"]), str(data.get("body", ""))
        except (ValueError, KeyError, TypeError) as exc:
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": f"bad note: {exc}"})
            return
        note = self.store.add(user, title, body)
        self.send_json(HTTPStatus.CREATED, note_json(note))

    def do_DELETE(self) -> None:
        user = self.user()
        if user is None:
            return
        match = NOTE_PATH.match(urlsplit(self.path).path)
        if not match:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": "no such resource"})
            return
        deleted = self.store.delete(user, int(match.group(1)))
        status = HTTPStatus.NO_CONTENT if deleted else HTTPStatus.NOT_FOUND
        self.send_response(status)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        if self.debug:
            log.info("%s " + format, self.address_string(), *args)
