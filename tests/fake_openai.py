"""A real HTTP server on loopback that answers OpenAI-format chat completions, for the tests
of the LLM critic and the LLM judge (no mock of the client: the client makes real requests)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

Answer = Callable[[dict[str, Any]], dict[str, Any]]  # request body -> response body


@contextlib.contextmanager
def chat_server(answer: Answer) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve `answer` at `http://127.0.0.1:PORT/v1/chat/completions`; yields the base URL and
    the list of requests seen (path, Authorization header, body)."""
    seen: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                         "body": body})
            data = json.dumps(answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()
