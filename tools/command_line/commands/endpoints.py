"""`props endpoints ...`: the model endpoints the gateway may forward runs' calls to."""

from __future__ import annotations

from typing import Any

from props.tools.command_line import arguments


def add_parser(sub: Any) -> None:
    e = sub.add_parser(
        "endpoints", help="model endpoints (OpenAI-compatible): register, list",
        description="A run never holds a model key. It calls its model through the launcher's "
        "gateway, which forwards only to an endpoint registered here, attaches the key from "
        "the variable the registration names (read from the launcher's own environment, "
        "never recorded), charges each call to the run's budget at the prices given here, "
        "and records it. A critic's or judge's config names the endpoint: \"endpoint\": "
        "\"NAME\". Registering a name again replaces its settings for calls from then on.")
    cmds = e.add_subparsers(dest="endpoints_command", metavar="ACTION", required=True)
    p = cmds.add_parser(
        "add", help="register (or change) an endpoint",
        description="Register NAME: the base URL of an OpenAI-compatible API (the part before "
        "/chat/completions) and the variable holding its key.",
        epilog="For example:\n"
        "  props endpoints add openai --base-url https://api.openai.com/v1 \\\n"
        "      --key-env OPENAI_API_KEY --price-in 2.5 --price-out 10\n"
        "  props endpoints add local --base-url http://127.0.0.1:8080/v1")
    p.add_argument("name", type=arguments.name, help="the endpoint's name (lowercase letters, "
                   "digits, '.', '_', '-'), as configs name it")
    p.add_argument("--base-url", required=True, metavar="URL",
                   help="e.g. https://api.openai.com/v1 or http://127.0.0.1:8080/v1")
    p.add_argument("--key-env", metavar="VARIABLE",
                   help="the variable of the launcher's environment that holds the key "
                   "(never PROPS_* or PG*); none: calls carry no key")
    p.add_argument("--price-in", type=float, default=0.0, metavar="USD",
                   help="USD per million prompt tokens (default 0)")
    p.add_argument("--price-out", type=float, default=0.0, metavar="USD",
                   help="USD per million answer tokens (default 0)")
    p.add_argument("--max-tokens", type=int, metavar="N",
                   help="the most tokens an answer may ask for (a request's max_tokens is "
                   "lowered to it)")
    p.add_argument("--requests-per-minute", type=int, metavar="N",
                   help="calls forwarded a minute at most (over it: HTTP 429, retried)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="seconds a call may take (default 120)")
    p.set_defaults(handler="endpoints:add_cmd", connections=2)
    p = cmds.add_parser("list", help="the registered endpoints")
    arguments.add_format(p)
    p.set_defaults(handler="endpoints:list_cmd", connections=2)
