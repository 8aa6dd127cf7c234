"""`props demo`: the whole pipeline on sample specimens (the run itself:
props.tools.command_line.demo)."""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="the whole pipeline, from nothing to a re-scored, exported evaluation",
        description="Migrate the database (PROPS_DSN, or the embedded server); sync the "
        "sample specimens; push the reference critic in two variants and ruff as a "
        "baseline critic; run critic runs through the reactors in this process (Docker "
        "when an engine answers, else local processes); grade them; print the report; "
        "re-score under overlap@2 and compare; export the log and verify the file. Safe "
        "to run again: it reuses what is there and says so.")
    p.add_argument("--runtime", choices=("auto", "docker", "local"), default="auto",
                   help="where the critics run (default: Docker if reachable, else local)")
    p.add_argument("--llm", action="store_true",
                   help="its own evaluation: the LLM critic beside the reference critic, then an "
                   "LLM judge re-scoring it, on a small local model (SmolLM2-135M-Instruct "
                   "on llama.cpp's server, started and stopped here; "
                   "needs props[llm] and the model's wheel: it says how to get them)")
    p.set_defaults(handler="props.tools.command_line.demo_llm:demo_cmd")
