"""The container runtimes, one package: what the launcher needs from an engine
(`container_runtime`: the Protocol and its specs), the contract every runtime passes as a test
class (`runtime_contract`), the registry by name (`runtime_registry`), and the bundled runtimes:
a Docker-compatible engine (Docker or Podman: `docker_runtime`), local processes
(`local_runtime`, each under `local_shim`) and Docker Swarm jobs (`swarm_runtime`)."""
