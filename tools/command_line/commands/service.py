"""`props serve` and `props reactors status`: the reactors as a service, and where they stand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from props.core.domain.vocabulary import SERVICES
from props.tools.command_line import arguments


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="run the reactors and the projection runner (a service)",
        description="Run the critic launcher (run requested -> container -> run finished), "
        "the grader (run finished -> grades under the active scorer) and the projection "
        "runner until SIGTERM or Ctrl-C. A stop finishes the event in hand; running "
        "containers are left to run and adopted by the next start. Several `props serve` "
        "processes may share a database: each service is active in one of them at a time.")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="a TOML file of these settings (default $PROPS_CONFIG_FILE); "
                   "PROPS_<KEY> variables override it, flags override both")
    p.add_argument("--only", action="append", choices=SERVICES, metavar="NAME",
                   help=f"run only this service (repeatable): {', '.join(SERVICES)}")
    p.add_argument("--runtime", metavar="NAME",
                   help="local definitions always run as local processes; image definitions "
                   "need Docker: auto (the default) uses the engine this machine has "
                   "(DOCKER_HOST or /var/run/docker.sock; waited for while it restarts) and "
                   "every other registered runtime it has, docker requires it to answer at "
                   "start, local never uses it; any registered runtime's name (entry-point "
                   "group props.runtimes) requires that one")
    p.add_argument("--capacity", "--max-concurrent", dest="max_concurrent", type=int,
                   metavar="N", help="the launcher's capacity: most runs with a container at once "
                   "(also bounded by what the host can hold; a finished run's container being "
                   "removed holds none); further runs wait queued (default 8)")
    p.add_argument("--launcher-name", metavar="NAME",
                   help="run this launcher under its own name (lower case, digits, . _ -): "
                   "launchers of different names run at once and share the queue, each "
                   "claiming runs for its own engine and capacity (default: launcher)")
    p.add_argument("--engine", metavar="URL",
                   help="the Docker-compatible engine of this launcher, e.g. "
                   "unix:///run/podman/podman.sock (default: DOCKER_HOST, else "
                   "/var/run/docker.sock)")
    _agent_flags(p)
    p.add_argument("--engine-wait", type=float, metavar="S",
                   help="how long a run waits for a container engine that does not answer "
                   "before it fails as engine_unreachable (default 120)")
    p.add_argument("--lease-seconds", type=float, metavar="S",
                   help="how long a launcher may be gone (its lock free) before the others "
                   "take over its runs (default 30)")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="also serve the JSON API here (port 0: any free port); the first "
                   "start prints an admin token")
    _add_registry_flags(p)
    p.add_argument("--auto-migrate", action="store_true", default=None,
                   help="apply pending schema migrations at start")
    p.add_argument("--sync-specimens", type=Path, metavar="DIR",
                   help="sync this specimens directory into the log at start (nothing retired)")
    p.add_argument("--log-format", choices=("text", "json"),
                   help="log lines as text (default) or one JSON object each")
    p.add_argument("--stop-seconds", type=float, metavar="S",
                   help="how long a stop (SIGTERM, Ctrl-C) may take, whatever the database "
                        "or the engine is doing (default 10): what is in hand then is left "
                        "for a restart, and named")
    p.add_argument("--quiet", action="store_true",
                   help="a summary of the runs' changes once a minute instead of a line for "
                        "each (a run requested, running, finished, graded)")
    p.add_argument("--connect-wait", type=float, metavar="SECONDS",
                   help="how long to wait for the database at start before giving up with "
                        "exit 69 (default 60); once connected, outages are waited out")
    p.set_defaults(handler="service:serve_cmd")

    r = sub.add_parser("reactors", help="where the reactors stand",
                       description="The reactors follow the log and act on it.")
    cmds = r.add_subparsers(dest="reactors_command", metavar="ACTION", required=True)
    s = cmds.add_parser("status", help="checkpoint, lag and parked events of each reactor",
                        description="Each reactor's checkpoint, its lag behind the log, the "
                        "events it parked (gave up on), and the critic runs queued, running "
                        "and finished.")
    arguments.add_format(s)
    s.set_defaults(handler="service:status_cmd", connections=2)


def _agent_flags(p: Any) -> None:
    """What runs are given: the database over TCP, the environment, trusted commands."""
    p.add_argument("--agent-database", metavar="HOST:PORT",
                   help="agents reach the database over TCP here (a launcher not on the "
                   "database's host); default: through its Unix socket, without network")
    p.add_argument("--agent-sslmode",
                   choices=("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
                   metavar="MODE", help="the TLS agents ask for over TCP: disable, allow, "
                   "prefer, require, verify-ca or verify-full (default require: an agent's "
                   "password never crosses the network in the clear)")
    p.add_argument("--agent-network", metavar="NAME",
                   help="the engine network agent containers join over TCP (default bridge): "
                   "one whose egress reaches only the database (docs/howto/several-hosts.md); "
                   "host is refused without --unsafe-agent-network")
    p.add_argument("--unsafe-agent-network", action="store_true", default=None,
                   help="allow --agent-network host: every agent then reaches every "
                   "loopback service of this host")
    p.add_argument("--trust-local-commands", action="store_true", default=None,
                   help="run local definitions whose command is not one of props' own "
                   "agents (they run as this service's user, on this host: only for commands "
                   "you wrote); default: such runs fail as untrusted_local_command")


def _add_registry_flags(p: Any) -> None:
    """The registry proxy's settings (docs/howto/service.md)."""
    p.add_argument("--registry", metavar="HOST:PORT",
                   help="also serve the image registry proxy here (needs --registry-upstream)")
    p.add_argument("--registry-upstream", metavar="URL",
                   help="the registry the proxy forwards to, e.g. http://127.0.0.1:5000")
    p.add_argument("--registry-pull-from", metavar="HOST[:PORT]",
                   help="the registry address recorded images are pulled from (default: "
                   "the upstream's)")
    p.add_argument("--registry-upload-quota-mb", type=int, metavar="MB",
                   help="what one token may upload to the registry in 24 h (default 8192); "
                   "past it a push is refused (HTTP 429), nothing stored")
    p.add_argument("--registry-unreferenced-mb", type=int, metavar="MB",
                   help="of that, the blobs one token may hold that none of its manifests "
                   "names (default 2048); past it its uploads are refused (HTTP 429) until "
                   "a manifest names them or the day passes")
