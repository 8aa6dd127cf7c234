"""`props chaos`: its parser (the harness, the run and the invariants: props.tools.checks.chaos)."""

from __future__ import annotations

from typing import Any

import props.tools.checks.chaos as chaos_package  # its docstring says what chaos does

FAULTS = ("kill-service", "kill-all-services", "terminate-listeners", "kill-container",
          "idle-transaction", "restart-postgres", "kill-launcher", "engine-gone")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "chaos", help="load and faults on the whole service, then check nothing was lost",
        description=chaos_package.__doc__.split("\n\n")[1] if chaos_package.__doc__ else None)
    p.add_argument("--seed", type=int, default=2026, help="the fault schedule's seed")
    p.add_argument("--seconds", type=float, default=60, help="how long the load runs")
    p.add_argument("--runs", type=int, default=200, help="critic runs requested in all")
    p.add_argument("--faults", type=int, default=12,
                   help=f"faults injected during the load (each kind once in every "
                        f"{len(FAULTS)})")
    p.add_argument("--drain-seconds", type=float, default=180,
                   help="at most this long for the work to finish after the load")
    p.add_argument("--restart-docker", action="store_true",
                   help="also stop and start a Docker engine as a fault: a dockerd the run "
                   "starts for itself (as root, its own data root and socket), which every "
                   "Docker run of the chaos uses; the machine's engine is never touched")
    p.add_argument("--kill-swarm-worker", action="store_true",
                   help="instead of the load: an evaluation of 20 cases on a two-node Docker "
                   "Swarm of the run's own on this machine (root), whose worker's daemon is "
                   "SIGKILLed mid-way and started again; then its invariants")
    p.set_defaults(handler="props.tools.checks.chaos.run:chaos_cmd")
