"""A real HTTP server on loopback that answers OpenAI-format chat completions, for the tests
of the LLM critic and the LLM judge (no mock of the client: the client makes real requests).
It is a fake of the *server*, so it can also misbehave as real servers do: an HTTP status with
headers, a body that is not JSON, a slow answer, a connection dropped mid-answer."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


@dataclasses.dataclass
class Reply:
    """An answer other than a 200 with a JSON body."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    drop: bool = False  # close the connection without an answer (a reset mid-answer)


Answer = Callable[[dict[str, Any]], "dict[str, Any] | Reply"]  # request body -> response


def completion(content: str, prompt_tokens: int = 100, completion_tokens: int = 10,
               finish_reason: str = "stop", **message: Any) -> dict[str, Any]:
    """A chat completion as OpenAI-compatible servers write it."""
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "finish_reason": finish_reason,
                         "message": {"role": "assistant", "content": content, **message}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2}}}


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
            got = answer(body)
            reply = got if isinstance(got, Reply) else Reply(body=json.dumps(got).encode())
            time.sleep(reply.delay)
            if reply.drop:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()


def judge_question(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a judge asks (props.core.scoring.llm_judge.prompt): the reviewer's issue, read
    from between its data markers, and the one known defect it is a candidate for."""
    text = body["messages"][-1]["content"]
    known = json.loads(text.split("Known defect (answer key, trusted):\n", 1)[1]
                       .split("\n", 1)[0])
    quoted = text.split("[BEGIN DATA ", 1)[1].split("]\n", 1)[1].split("\n[END DATA ", 1)[0]
    return json.loads(quoted), known


def judge_says(issue_id: str, ref: str) -> dict[str, Any]:
    """A judge's answer to one question: `ref` (the candidate: confirmed) or "none"."""
    return completion(json.dumps({"matches": {issue_id: ref}}), prompt_tokens=800,
                      completion_tokens=40)
