"""Reactors: services that follow the log and act on it. The reactor host (`host`: one
active instance, a durable checkpoint, retries, parking) serves each: the launcher (critic
runs in containers), the grader (finished runs graded by the active scorer), the supervisor
(graders of pushed images). The container runtimes, one package (`runtimes/`: Docker or
Podman, local processes, Swarm jobs, their contract and registry), agent roles, and what
runs inside a container (`agents/`: the SDK and the critics).

May import: `props.core`, `props.projections`, `props.schema`.
"""
