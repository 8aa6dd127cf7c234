"""`props chaos`: the assembled system under load while everything goes wrong, then a check
that nothing was lost.

It starts two `props serve` processes (replicas of every service, each with its HTTP API) on
a scratch database, drives a steady load of critic run requests (every other one in Docker
when an engine answers; half of them through a replica's HTTP API, retried with an
idempotency key across kills and restarts), and meanwhile injects faults at random times
drawn from a fixed seed: SIGKILL of a service process, or of all of them (restarted a moment
later), a PostgreSQL restart (when the server is the embedded one this command started),
termination of the listeners' backends, a running agent container killed from outside, a
transaction held open for a while (the fence stalls), and with --restart-docker a stop and
start of the Docker engine (a dockerd the run starts for itself: the machine's is never
touched). Every tenth run is a hostile
critic (props.tools.checks.hostile_critic): it tries every way past its role and then reports
malformed data, so it must end failed, having breached nothing, while the others go on. A
full disk is not injected: the disk is shared with the rest of the machine (it prints
NORUN). It stops by itself: the load for `--seconds`, then at most `--drain-seconds` for the
work to finish. Then it checks the invariants and prints them as a table; the exit code is
0 only if every one held.
"""
