"""Run the notes service: python -m notes.app --db notes.sqlite --tokens tokens.txt"""

from __future__ import annotations

import argparse
import logging
from http.server import ThreadingHTTPServer

from notes import auth
from notes.db import Store
from notes.handlers import NotesHandler


def make_server(host: str, port: int, store: Store,
                tokens: dict[str, str]) -> ThreadingHTTPServer:
    handler = type("Handler", (NotesHandler,), {"store": store, "tokens": tokens})
    return ThreadingHTTPServer((host, port), handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="notes.sqlite")
    parser.add_argument("--tokens", help="file of user:token lines (else $NOTES_TOKENS)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    tokens = auth.load_tokens(args.tokens)
    if not tokens:
        parser.error("no tokens configured: nobody could use the service")
    server = make_server(args.host, args.port, Store(args.db), tokens)
    logging.getLogger("notes").info("listening on %s:%d", args.host, args.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
