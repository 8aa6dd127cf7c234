"""The backend service over HTTP: `props serve --http` as a real process on loopback, real
PostgreSQL behind it, real HTTP in front (httpx)."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import orjson
import pytest

from props.core.domain import catalog, definitions, endpoints, tokens
from props.core.domain.store import open_store
from props.core.log import errors
from props.core.log.store import EventStore
from props.tools.cli import build_parser
from props.tools.command_line import service_config
from tests.reactor_helpers import SNAPSHOT, eventually, sync_samples

CLI = [sys.executable, "-m", "props.tools.cli"]


@dataclass
class Served:
    url: str
    admin: str
    log: Path
    registry: str | None = None
    pid: int = 0

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30,
                                 limits=httpx.Limits(max_connections=250))


@asynccontextmanager
async def props_serve(dsn: str, tmp_path: Path, *args: str) -> AsyncIterator[Served]:
    """`props serve --http 127.0.0.1:0 ARGS` until the block ends (SIGTERM, then a wait)."""
    log = tmp_path / f"serve-{uuid.uuid4().hex[:6]}.log"
    env = {**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(tmp_path / "home")}
    with log.open("wb") as sink:
        proc = await anyio.open_process([*CLI, "serve", "--http", "127.0.0.1:0", *args],
                                        env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        text = ""
        deadline = time.monotonic() + 60
        # "serving ..." comes after the addresses and the admin token.
        while not (m := re.search(r"HTTP API on (http://[0-9a-z.:\[\]]+)[\s\S]*serving ",
                                  text)):
            assert proc.returncode is None, f"props serve exited {proc.returncode}:\n{text}"
            assert time.monotonic() < deadline, f"props serve did not start:\n{text}"
            await anyio.sleep(0.1)
            text = log.read_text()
        admin = re.search(r"admin token \(shown once, store it now\): (\S+)", text)
        registry = re.search(r"registry proxy on ([0-9a-z.:\[\]]+)", text)
        yield Served(m[1], admin[1] if admin else "", log, registry[1] if registry else None,
                     proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(30) as waited:
            await proc.wait()
        if waited.cancelled_caught:
            proc.kill()
            await proc.wait()
            pytest.fail(f"props serve did not stop on SIGTERM:\n{log.read_text()}")


async def _ready(store: EventStore) -> None:
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())


def _body(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {"definition": "reference", "ref": "local",
                               "snapshot": SNAPSHOT, "model": "api-model", "budget_usd": 0}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def _loc(response: httpx.Response, status: int = 422) -> list[list[str]]:
    assert response.status_code == status, response.text
    return [err["loc"] for err in response.json()["detail"]]


async def test_api_end_to_end(store: EventStore, dsn: str, tmp_path: Path) -> None:
    await _ready(store)
    async with props_serve(dsn, tmp_path, "--runtime", "local") as served:
        assert served.admin.startswith(tokens.PREFIX)
        _, reader = await tokens.create(store, "reader", ("read",))
        _, client_secret = await tokens.create(store, "client", ("read", "request"))

        async with served.client() as anonymous:
            # The probe needs no token and says nothing more than ok.
            probe = await anonymous.get("/health")
            assert probe.status_code == 200 and probe.json() == {"status": "ok"}
            no_token = await anonymous.get("/api/health")
            assert no_token.status_code == 401
            assert no_token.headers["www-authenticate"].startswith("Bearer")
            assert (await anonymous.post("/api/runs/critic", json=_body())).status_code == 401
            assert (await anonymous.get("/openapi.json")).status_code == 401
            wrong = await anonymous.get("/api/health",
                                        headers={"Authorization": "Bearer props_x"})
            assert wrong.status_code == 401
        async with served.client(reader) as read_only:
            assert (await read_only.get("/api/health")).json()["database"] == "ok"
            refused = await read_only.post("/api/runs/critic", json=_body())
            assert refused.status_code == 403 and "request" in refused.json()["detail"]

        async with served.client(client_secret) as api:
            assert _loc(await api.post("/api/runs/critic", json=_body(model=None))) \
                == [["body", "model"]]
            assert _loc(await api.post("/api/runs/critic", json=_body(timeout_seconds=-1))) \
                == [["body", "timeout_seconds"]]
            assert _loc(await api.post("/api/runs/critic", json=_body(colour="red"))) \
                == [["body", "colour"]]
            assert _loc(await api.post("/api/runs/critic", json=_body(definition="nope")), 404) \
                == [["body", "definition"]]
            unknown = _body(snapshot="no/2020-01-01-00")
            assert _loc(await api.post("/api/runs/critic", json=unknown), 404) \
                == [["body", "snapshot"]]
            assert _loc(await api.get("/api/runs", params={"cursor": "garbage"}), 404) \
                == [["query", "cursor"]]

            made = await api.post("/api/runs/critic", json=_body(count=2))
            assert made.status_code == 202, made.text
            run_ids = made.json()["run_ids"]
            assert len(run_ids) == 2 and not made.json()["already_requested"]

            async def completed() -> bool:
                runs = [(await api.get(f"/api/runs/{r}")).json() for r in run_ids]
                return all(run["status"] == "completed" for run in runs)

            await eventually(completed, 90)
            run = (await api.get(f"/api/runs/{run_ids[0]}")).json()
            types = [e["type"] for e in run["timeline"]]
            assert types[0] == "run.requested" and types[-1] == "run.finished"
            assert run["timeline"][0]["data"]["requested_by"] == "api:client"
            assert run["details"]["digest"] == made.json()["digest"]
            assert (await api.get(f"/api/runs/{uuid.uuid4()}")).status_code == 404

            first = (await api.get("/api/runs", params={"limit": 1})).json()
            second = (await api.get("/api/runs", params={"limit": 1,
                                                         "cursor": first["next"]})).json()
            assert {first["runs"][0]["run_id"], second["runs"][0]["run_id"]} == set(run_ids)
            assert second["next"] is None

            async def scored() -> bool:
                answer = await api.get("/api/scores")
                if answer.status_code == 503:  # the projections are still being built
                    return False
                rows = answer.json()["scores"]
                return any(r["model"] == "api-model" and r["runs"] == 2 for r in rows)

            await eventually(scored, 60)
            # A run is named by the 8 digits every table shows, as by its whole id.
            short = (await api.get(f"/api/runs/{run_ids[0][:8]}")).json()
            assert short["run_id"] == run_ids[0] and short["status"] == "completed"
            assert (await api.get("/api/runs/abc")).status_code == 422  # under 4 digits
            assert (await api.get("/api/runs/ffff0000")).status_code == 404
            # props serve said what happened to each run, a line per change of state.
            def untold() -> list[str]:
                lines = served.log.read_text().splitlines()
                return [f"{run_id[:8]} {w}" for run_id in run_ids for w in (
                    "requested: reference (model api-model)", "running", "completed: ",
                    "graded by tiered@2") if not any(
                        f"run {run_id[:8]} {w}" in line for line in lines)]

            await eventually(lambda: not untold(), 30)
            assert _loc(await api.get("/api/scores", params={"scorer": "x@y"})) \
                == [["query", "scorer"]]

            # A retried request with the same key: the same run, nothing new in the log.
            key = {"Idempotency-Key": "retry-me"}
            once = (await api.post("/api/runs/critic", json=_body(), headers=key)).json()
            again = (await api.post("/api/runs/critic", json=_body(), headers=key)).json()
            assert once["run_ids"] == again["run_ids"] and again["already_requested"]
            assert not once["already_requested"]
            stored = await store.pool.fetchval(
                "SELECT count(*) FROM props.events WHERE type = 'run.requested' "
                "AND stream_id = $1", f"run-{once['run_ids'][0]}")
            assert stored == 1

            paths = (await api.get("/openapi.json")).json()["paths"]
            assert {"/health", "/api/health", "/api/runs/critic", "/api/runs/{run_id}", "/api/runs",
                    "/api/scores"} <= set(paths)

        await tokens.revoke(store, "client")
        async with served.client(client_secret) as revoked:
            assert (await revoked.get("/api/health")).status_code == 401

    # Tokens never reach the log or the service's log lines. The admin token is printed
    # exactly once, at first start: finding it there is the scan's negative control.
    logged = served.log.read_text()
    assert logged.count(served.admin) == 1
    assert client_secret not in logged and reader not in logged
    assert "GET /api/health 401" in logged and "token" in logged
    events = await store.pool.fetchval(
        "SELECT string_agg(data::text || metadata::text, ' ') FROM props.events")
    assert events.count("api:client") >= 3
    for secret in (served.admin, client_secret, reader):
        assert secret not in events
    assert served.admin not in str(await store.pool.fetch("SELECT * FROM props.api_tokens"))


async def test_first_start_prints_one_admin_token(store: EventStore, dsn: str,
                                                  tmp_path: Path) -> None:
    async with props_serve(dsn, tmp_path, "--only", "projections",
                           "--log-format", "json") as first:
        assert first.admin == ""  # JSON logs carry it as a field instead
        lines = [orjson.loads(line) for line in first.log.read_text().splitlines()
                 if line.startswith("{")]
        admin = [line["admin_token"] for line in lines if "admin_token" in line]
        assert len(admin) == 1
        async with first.client(admin[0]) as api:
            assert (await api.get("/health")).status_code == 200
    async with props_serve(dsn, tmp_path, "--only", "projections") as second:
        assert second.admin == ""  # tokens exist: no second admin token
    lines = first.log.read_text().splitlines()
    assert lines and all(line.startswith("{") for line in lines), lines  # every line JSON
    assert [t.name for t in await tokens.all_tokens(store)] == ["admin"]


async def test_reads_before_the_projections_are_built_say_so(store: EventStore, dsn: str,
                                                              tmp_path: Path) -> None:
    """A new database: the projection runner builds the tables while the API answers. A run
    is shown from the log (not projected yet); lists and scores are 503 with Retry-After,
    never a 500."""
    await _ready(store)
    run_id = uuid.uuid4()
    await store.append(f"run-{run_id}", [catalog.RunRequested(
        run_id=run_id, agent_type="critic", definition="reference",
        example=catalog.Example(snapshot=SNAPSHOT), model="m", timeout_seconds=60,
        budget_usd=0)])
    async with props_serve(dsn, tmp_path, "--only", "grader") as served:  # no runner
        _, reader = await tokens.create(store, "reader", ("read",))
        async with served.client(reader) as api:
            run = await api.get(f"/api/runs/{run_id}")
            assert run.status_code == 200 and run.json()["projected"] is False
            assert run.json()["timeline"][0]["type"] == "run.requested"
            for path in ("/api/runs", "/api/scores"):
                answer = await api.get(path)
                assert answer.status_code == 503, (path, answer.text)
                assert answer.headers["Retry-After"] == "1"
                assert "not built yet" in answer.json()["detail"]


@pytest.mark.slow
async def test_200_concurrent_requests(store: EventStore, dsn: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """200 run requests at once on loopback: every one answered 202, every run in the log
    exactly once and in the projection; the latency percentiles are printed."""
    monkeypatch.setenv("PROPS_QUOTA_RUNS_IN_FLIGHT", "200")  # (one token's 200 runs)
    await _ready(store)
    async with props_serve(dsn, tmp_path, "--only", "projections") as served:
        _, secret = await tokens.create(store, "load", ("request", "read"))
        async with served.client(secret) as api:
            latencies: list[float] = []
            answers: list[httpx.Response] = []

            async def one(i: int) -> None:
                started = time.perf_counter()
                answers.append(await api.post("/api/runs/critic", json=_body(model=f"m{i % 4}")))
                latencies.append(time.perf_counter() - started)

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    for i in range(200):
                        tg.start_soon(one, i)
            assert [a.status_code for a in answers] == [202] * 200
            run_ids = {r for a in answers for r in a.json()["run_ids"]}
            assert len(run_ids) == 200
            in_log = await store.pool.fetch(
                "SELECT stream_id FROM props.events WHERE type = 'run.requested'")
            assert sorted(r["stream_id"] for r in in_log) == sorted(f"run-{r}" for r in run_ids)

            async def projected() -> bool:
                page = (await api.get("/api/runs", params={"limit": 500})).json()
                return {r["run_id"] for r in page["runs"]} == run_ids

            await eventually(projected, 60)
    latencies.sort()
    p50, p99 = latencies[99], latencies[197]
    print(f"\n200 concurrent POST /api/runs/critic: p50 {1000 * p50:.0f} ms, "
          f"p99 {1000 * p99:.0f} ms, max {1000 * latencies[-1]:.0f} ms")


def test_service_config_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """File, then PROPS_* variables over it, then flags over both; mistakes are named."""
    path = tmp_path / "props.toml"
    path.write_text('http = "127.0.0.1:8080"\nmax_concurrent = 3\nauto_migrate = true\n'
                    'only = ["launcher"]\nlog_format = "json"\n')
    monkeypatch.setenv("PROPS_CONFIG_FILE", str(path))
    monkeypatch.setenv("PROPS_MAX_CONCURRENT", "5")
    monkeypatch.setenv("PROPS_ONLY", "grader,projections")
    args = build_parser().parse_args(["serve", "--log-format", "text"])
    config = service_config.load(args)
    assert (config.http, config.max_concurrent, config.auto_migrate, config.only,
            config.log_format) == ("127.0.0.1:8080", 5, True, ["grader", "projections"],
                                   "text")

    example = Path(service_config.__file__).parents[1] / "props.example.toml"
    monkeypatch.setenv("PROPS_CONFIG_FILE", str(example))
    assert service_config.load(args).http == "127.0.0.1:8080"  # the shipped example loads
    monkeypatch.setenv("PROPS_CONFIG_FILE", str(path))

    path.write_text('htp = "127.0.0.1:8080"\n')
    with pytest.raises(errors.ConfigurationError, match="htp"):
        service_config.load(args)
    path.write_text('registry = "127.0.0.1:0"\n')
    with pytest.raises(errors.ConfigurationError, match="registry_upstream"):
        service_config.load(args)
    path.write_text("not toml [")
    with pytest.raises(errors.ConfigurationError, match="not TOML"):
        service_config.load(args)
    monkeypatch.setenv("PROPS_CONFIG_FILE", str(tmp_path / "missing.toml"))
    out = subprocess.run([*CLI, "serve"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PROPS_DSN": "postgresql://nobody@127.0.0.1:1/x"})
    assert out.returncode == 78 and "missing.toml" in out.stderr, out.stderr


async def test_auto_migrate_and_specimens_at_start(empty_dsn: str, tmp_path: Path) -> None:
    from props.tools.bundled.samples import samples_dir

    async with props_serve(empty_dsn, tmp_path, "--only", "projections", "--auto-migrate",
                           "--sync-specimens", str(samples_dir())) as served:
        async with open_store(empty_dsn) as store:
            synced = await store.pool.fetchval(
                "SELECT count(*) FROM props.events WHERE type = 'snapshot.synced'")
        assert synced >= 1
        async with served.client(served.admin) as api:
            assert (await api.get("/api/health")).json()["status"] == "ok"


# -- the registry proxy: a real `docker push` to a real upstream registry ------------------------


@asynccontextmanager
async def upstream_registry(tmp_path: Path) -> AsyncIterator[str]:
    """Debian's docker-registry on a free loopback port, storing under tmp_path."""
    import shutil
    import socket

    binary = shutil.which("docker-registry")
    if binary is None:
        message = "docker-registry is not installed (apt-get install docker-registry)"
        if os.environ.get("PROPS_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{message}; PROPS_REQUIRE_DOCKER=1 demands it")
        pytest.skip(message)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {tmp_path / 'registry'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = await anyio.open_process([binary, "serve", str(config)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                try:
                    if (await client.get(f"http://127.0.0.1:{port}/v2/")).status_code == 200:
                        break
                except httpx.TransportError:
                    await anyio.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        await proc.wait()


def _docker(*args: str, config: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "DOCKER_CONFIG": str(config)})


@pytest.mark.docker
@pytest.mark.slow
async def test_docker_push_through_the_proxy(store: EventStore, dsn: str, tmp_path: Path,
                                             docker: object) -> None:
    """`docker push` through the proxy: refused without a token and with a read-only one;
    with a push token the manifest reaches the upstream and a definition event records the
    digest the engine reports. A pushed grader makes the supervisor grade again with it."""
    import json

    from tests.conftest import SESSION

    await sync_samples(store)
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(definitions.reference_rootfs())
    grader_command = definitions.reference_command(definitions.REFERENCE_GRADER_MODULE)
    docker_config = tmp_path / "docker-config"
    docker_config.mkdir()
    async with upstream_registry(tmp_path) as upstream, props_serve(
            dsn, tmp_path, "--registry", "127.0.0.1:0", "--registry-upstream", upstream) as served:
        proxy = served.registry
        assert proxy is not None
        images = {kind: f"{proxy}/{kind}:{SESSION}"
                  for kind in ("critic", "grader", "critic/bad")}
        command_label = f"LABEL props.command={json.dumps(json.dumps(grader_command))}"
        labels = {"critic": [], "critic/bad": ["--change", "LABEL props.memory-mb=lots"],
                  "grader": ["--change", command_label,
                             "--change", "LABEL props.host-python=true"]}
        try:
            for kind, image in images.items():
                made = _docker("import", *labels[kind], str(rootfs), image, config=docker_config)
                assert made.returncode == 0, made.stderr

            anonymous = _docker("push", images["critic"], config=docker_config)
            assert anonymous.returncode != 0
            assert "no basic auth credentials" in anonymous.stderr + anonymous.stdout
            _, reader = await tokens.create(store, "puller", ("read",))
            login = _docker("login", proxy, "-u", "ci", "--password-stdin", stdin=reader,
                            config=docker_config)
            assert login.returncode == 0, login.stderr
            denied = _docker("push", images["critic"], config=docker_config)
            assert denied.returncode != 0 and "denied" in (denied.stderr + denied.stdout).lower()

            _, pusher = await tokens.create(store, "pusher", ("push", "read"))
            login = _docker("login", proxy, "-u", "ci", "--password-stdin", stdin=pusher,
                            config=docker_config)
            assert login.returncode == 0, login.stderr
            bad = _docker("push", images["critic/bad"], config=docker_config)
            assert bad.returncode != 0 and "props.memory-mb" in bad.stderr + bad.stdout
            for kind in ("critic", "grader"):
                pushed = _docker("push", images[kind], config=docker_config)
                assert pushed.returncode == 0, pushed.stderr + pushed.stdout

            def engine_digest(image: str) -> str:
                out = _docker("inspect", "--format", "{{json .RepoDigests}}", image,
                              config=docker_config)
                repo = image.rsplit(":", 1)[0]
                return next(str(d).split("@")[1] for d in json.loads(out.stdout)
                            if d.startswith(repo + "@"))

            critic = await definitions.resolve(store, "critic", "critic", SESSION)
            assert critic is not None and critic.digest == engine_digest(images["critic"])
            assert await definitions.resolve(store, "critic", "bad", SESSION) is None
            grader = await definitions.resolve(store, "grader", "grader", SESSION)
            assert grader is not None and grader.digest == engine_digest(images["grader"])
            assert grader.command == grader_command and grader.host_python
            assert grader.image == f"{upstream.removeprefix('http://')}/grader@{grader.digest}"
            async with httpx.AsyncClient() as client:  # the upstream really holds it
                manifest = await client.head(
                    f"{upstream}/v2/grader/manifests/{grader.digest}",
                    headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
                assert manifest.status_code == 200

            # Its labels ask for the host's Python, which a push token cannot grant: nothing
            # grades until the operator grants it. Then the supervisor registers a scorer for
            # the pushed grader and grades every snapshot with it, in containers of the
            # pushed image (pulled from the upstream).
            assert await endpoints.grant_of(store, "grader", grader.digest) is None
            await endpoints.grant(store, catalog.DefinitionGranted(
                agent_type="grader", name="grader", digest=grader.digest, host_python=True))
            async def graded() -> bool:
                rows = await store.pool.fetch(
                    "SELECT status FROM projections.agent_runs WHERE agent_type = 'grader' "
                    "AND digest = $1", grader.digest)
                return bool(rows) and all(r["status"] == "completed" for r in rows)

            await eventually(graded, 120)
            scorers = await store.pool.fetchval(
                "SELECT count(*) FROM props.events WHERE type = 'scorer.registered' "
                "AND data::text LIKE '%' || $1 || '%'", grader.digest.removeprefix("sha256:"))
            assert scorers >= 1
        finally:
            for image in images.values():
                _docker("rmi", "-f", image, config=docker_config)
            if grader_digest := locals().get("grader"):
                _docker("rmi", "-f", grader_digest.image, config=docker_config)
    assert pusher not in served.log.read_text() and reader not in served.log.read_text()


@pytest.mark.slow
async def test_registry_paths_outside_the_spec_are_refused(store: EventStore, dsn: str,
                                                           tmp_path: Path) -> None:
    """`..`, encoded slashes and names outside the grammar answer 400 before the upstream
    sees them; the spec's own paths are forwarded (negative control)."""
    import base64
    import socket

    _, reader = await tokens.create(store, "raw-reader", ("read", "push"))
    auth = base64.b64encode(f"ci:{reader}".encode()).decode()
    async with upstream_registry(tmp_path) as upstream, props_serve(
            dsn, tmp_path, "--registry", "127.0.0.1:0", "--registry-upstream", upstream) as served:
        assert served.registry is not None
        host, port = served.registry.rsplit(":", 1)

        def status(method: str, path: str) -> int:
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}"
                          f"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
                return int(s.makefile("rb").readline().split()[1])

        for method, path in [("GET", "/v2/../../admin/secret"),
                             ("GET", "/v2/critic/../../x/manifests/latest"),
                             ("PUT", "/v2/critic/../grader/manifests/v5"),
                             ("GET", "/v2/critic%2f..%2fgrader/manifests/v5"),
                             ("GET", "/v2/Critic/manifests/latest"),
                             ("GET", "/v2/critic//x/manifests/latest"),
                             ("GET", "/v2/critic/manifests/bad:tag:x"),
                             ("GET", "/v2/critic/secrets")]:
            assert await anyio.to_thread.run_sync(status, method, path) == 400, path
        assert await anyio.to_thread.run_sync(status, "GET", "/v2/") == 200
        assert await anyio.to_thread.run_sync(status, "GET", "/v2/critic/tags/list") == 404
    assert await definitions.resolve(store, "critic", "../grader", "v5") is None


async def test_input_postgresql_cannot_store_is_refused_not_500(store: EventStore, dsn: str,
                                                                tmp_path: Path) -> None:
    await _ready(store)
    async with props_serve(dsn, tmp_path, "--runtime", "local") as served:
        _, secret = await tokens.create(store, "hostile", ("read", "request"))
        requested = "SELECT count(*) FROM props.events WHERE type = 'run.requested'"
        before = await store.pool.fetchval(requested)
        async with served.client(secret) as api:
            raw = {"content-type": "application/json"}
            for body in ['{"definition": "reference", "snapshot": "x", "model": "a\\u0000b"}',
                         '{"definition": "reference", "snapshot": "x", "model": "\\ud800"}',
                         '{"definition": "reference", "snapshot": "x", "model": "m", '
                         '"budget_usd": NaN}',
                         '{"definition": "reference", "snapshot": "x", "model": "m", '
                         '"timeout_seconds": Infinity}',
                         '{"definition": "reference", "snapshot": "x", "model": "m", '
                         '"count": 99999999999999999999999}']:
                answer = await api.post("/api/runs/critic", content=body, headers=raw)
                assert answer.status_code == 422, (body, answer.text)
            for query in ["/api/runs?model=a%00b", "/api/runs?model=%ed%a0%80",
                          "/api/scores?scorer=tiered@99999999999"]:
                answer = await api.get(query)
                assert answer.status_code == 422, (query, answer.text)
            big = '{"model": "' + "x" * (2 * 1024 * 1024) + '"}'
            assert (await api.post("/api/runs/critic", content=big,
                                   headers=raw)).status_code == 413
            # Not over the limit, but invalid: the error quotes a short excerpt only.
            long = _body(model="y" * 500_000)
            answer = await api.post("/api/runs/critic", json=long)
            assert answer.status_code == 422 and len(answer.content) < 2_000
            # Negative control: the same route takes a good body.
            assert (await api.post("/api/runs/critic", json=_body())).status_code == 202
        assert await store.pool.fetchval(requested) == before + 1  # refusals wrote nothing


class _RawRegistry:
    """A client of the proxy speaking the distribution API by hand (what `docker push` does,
    without an engine): blobs by monolithic upload, manifests by PUT."""

    def __init__(self, base: str, secret: str) -> None:
        import base64

        auth = base64.b64encode(f"ci:{secret}".encode()).decode()
        self.http = httpx.AsyncClient(base_url=f"http://{base}", timeout=60,
                                      headers={"Authorization": f"Basic {auth}"})

    async def blob(self, repo: str, data: bytes) -> str:
        import hashlib

        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        started = await self.http.post(f"/v2/{repo}/blobs/uploads/")
        assert started.status_code == 202, started.text
        location = started.headers["location"]  # (its query holds the upload's state)
        done = await self.http.put(f"{location}{'&' if '?' in location else '?'}"
                                   f"digest={digest}", content=data)
        assert done.status_code == 201, done.text
        return digest

    async def manifest(self, repo: str, ref: str, labels: dict[str, str] | None = None,
                       *, raw: bytes | None = None) -> httpx.Response:
        import json

        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"Labels": labels or {}},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()
        digest = await self.blob(repo, config)
        body = raw if raw is not None else json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                       "size": len(config), "digest": digest}, "layers": []}).encode()
        return await self.http.put(
            f"/v2/{repo}/manifests/{ref}", content=body,
            headers={"content-type": "application/vnd.docker.distribution.manifest.v2+json"})


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
async def test_the_registry_proxy_is_a_gate(store: EventStore, dsn: str,
                                            tmp_path: Path) -> None:
    """DELETE refused; a recorded name and tag never move to another digest under a push
    token (the docs' own `reference@local` included), an admin's move is recorded as one; a
    manifest holding `config` twice in two cases is refused; a 600 MB manifest is refused from
    its header and while it streams, the service growing by far less than it; a push token
    logs in (GET /v2/). Negative controls: a fresh tag is taken, the first manifest stored."""
    import json

    await definitions.push(store, definitions.reference_local())
    _, pusher = await tokens.create(store, "gate-pusher", ("push",))
    _, admin_secret = await tokens.create(store, "gate-admin", ("admin",))
    async with upstream_registry(tmp_path) as upstream, props_serve(
            dsn, tmp_path, "--registry", "127.0.0.1:0", "--registry-upstream", upstream) as served:
        assert served.registry is not None
        push = _RawRegistry(served.registry, pusher)
        admin = _RawRegistry(served.registry, admin_secret)
        assert (await push.http.get("/v2/")).status_code == 200  # docker login
        first = await push.manifest("critic/gated", "v1")
        assert first.status_code == 201, first.text
        digest = first.headers["docker-content-digest"]
        moved = await push.manifest("critic/gated", "v1", {"props.network": "true"})
        assert moved.status_code == 409, moved.text
        takeover = await push.manifest("critic/reference", "local", {"props.network": "true"})
        assert takeover.status_code == 409, takeover.text
        assert (await push.http.delete(f"/v2/critic/gated/manifests/{digest}")).status_code \
            == 405
        assert (await admin.http.delete(f"/v2/critic/gated/manifests/{digest}")).status_code \
            == 405
        by_admin = await admin.manifest("critic/gated", "v1", {"props.cpus": "2"})
        assert by_admin.status_code == 201, by_admin.text

        config = await push.blob("critic/twice", json.dumps({"config": {}}).encode())
        twice = ('{"schemaVersion": 2, "mediaType": '
                 '"application/vnd.docker.distribution.manifest.v2+json", '
                 f'"config": {{"digest": "{config}", "size": 12, "mediaType": "x"}}, '
                 f'"Config": {{"digest": "{config}", "size": 13, "mediaType": "x"}}, '
                 '"layers": []}').encode()
        refused = await push.manifest("critic/twice", "v1", raw=twice)
        assert refused.status_code == 400 and "twice" in refused.text

        pid = served.pid
        before = _rss_kb(pid)
        def declared_huge() -> int:  # (httpx will not send less than it declares)
            import socket

            host, port = str(served.registry).rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=30) as s:
                s.sendall(f"PUT /v2/critic/huge/manifests/v1 HTTP/1.1\r\nHost: x\r\n"
                          f"Authorization: {push.http.headers['authorization']}\r\n"
                          f"Content-Length: {600 * 1024 * 1024}\r\n\r\n{{}}".encode())
                return int(s.makefile("rb").readline().split()[1])

        assert await anyio.to_thread.run_sync(declared_huge) == 413

        async def chunks() -> AsyncIterator[bytes]:
            block = b" " * (1024 * 1024)
            for _ in range(600):
                yield block

        try:
            streamed = await push.http.put("/v2/critic/huge/manifests/v2", content=chunks())
            assert streamed.status_code == 413
        except httpx.TransportError:
            pass  # the proxy answered and closed before the body was all sent
        assert _rss_kb(pid) - before < 200 * 1024
        await push.http.aclose()
        await admin.http.aclose()

    gated = [d for d in await definitions.all_pushed(store, "critic") if d.name == "gated"]
    assert [d.digest == digest for d in gated] == [True, False]
    records = [r for r in await store.read_stream("definition-critic")
               if getattr(r.event, "name", "") == "gated"]
    assert records[1].metadata.get("tag_override") is True
    assert "tag_override" not in records[0].metadata
    assert await definitions.resolve(store, "critic", "reference", "local") == \
        definitions.reference_local()
    assert await definitions.resolve(store, "critic", "huge", "v1") is None


async def test_the_registry_proxy_keeps_its_own_house(store: EventStore, dsn: str,
                                                    tmp_path: Path) -> None:
    """A push token stores nothing outside critic/ and grader/ (the probe pushed whole images
    under repositories props never records) and at most its quota of bytes a day (it stored
    ~200 MB blobs no manifest named, without bound). Controls: a blob under critic/ within
    the quota is stored; another token's quota is its own."""
    _, pusher = await tokens.create(store, "house-pusher", ("push", "read"))
    _, other = await tokens.create(store, "house-other", ("push", "read"))
    async with upstream_registry(tmp_path) as upstream, props_serve(
            dsn, tmp_path, "--registry", "127.0.0.1:0", "--registry-upstream", upstream,
            "--registry-upload-quota-mb", "1") as served:
        assert served.registry is not None
        push, second = _RawRegistry(served.registry, pusher), _RawRegistry(served.registry, other)
        outside = await push.http.post("/v2/library/anything/blobs/uploads/")
        assert outside.status_code == 403 and "critic" in outside.text
        assert (await push.manifest("critic/house", "v1")).status_code == 201  # the control
        await push.blob("critic/house", b"x" * 600_000)  # within the 1 MiB
        started = await push.http.post("/v2/critic/house/blobs/uploads/")
        location = started.headers["location"]
        over = await push.http.put(f"{location}{'&' if '?' in location else '?'}digest=sha256:"
                                   f"{'0' * 64}", content=b"y" * 600_000)
        assert over.status_code == 429 and "quota" in over.text, over.text
        await second.blob("critic/house", b"z" * 600_000)  # another token's own quota
        await push.http.aclose()
        await second.http.aclose()


async def test_blobs_no_manifest_names_are_bounded_per_token(store: EventStore, dsn: str,
                                                            tmp_path: Path) -> None:
    """Within its day's quota, a push token stored blobs no manifest named, without bound
    (the probe: ~200 MB each). Past its share of unnamed bytes its uploads are refused (429)
    until a manifest names them. Negative control: on the code before, the third upload
    started (202). Controls: a manifest naming the blobs frees the share; another token's
    share is its own."""
    import json

    _, pusher = await tokens.create(store, "unnamed-pusher", ("push", "read"))
    _, other = await tokens.create(store, "unnamed-other", ("push", "read"))
    async with upstream_registry(tmp_path) as upstream, props_serve(
            dsn, tmp_path, "--registry", "127.0.0.1:0", "--registry-upstream", upstream,
            "--registry-unreferenced-mb", "1") as served:
        assert served.registry is not None
        push, second = _RawRegistry(served.registry, pusher), _RawRegistry(served.registry, other)
        layers = [await push.blob("critic/unnamed", bytes([n]) * 600_000) for n in (1, 2)]
        refused = await push.http.post("/v2/critic/unnamed/blobs/uploads/")
        assert refused.status_code == 429 and "none of its manifests names" in refused.text
        await second.blob("critic/unnamed", b"z" * 600_000)  # another token's own share
        named = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                       "size": 600_000, "digest": layers[0]},
            "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                        "size": 600_000, "digest": layers[1]}]}).encode()
        stored = await push.http.put(
            "/v2/critic/unnamed/manifests/sha256:" + hashlib.sha256(named).hexdigest(),
            content=named,
            headers={"content-type": "application/vnd.docker.distribution.manifest.v2+json"})
        assert stored.status_code == 201, stored.text
        await push.blob("critic/unnamed", b"w" * 600_000)  # the share is free again
        await push.http.aclose()
        await second.http.aclose()


@pytest.mark.slow
async def test_the_registry_proxy_bounds_a_config_blob_before_reading_it(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    """The probe's critical reproduction: a manifest naming a huge config blob. A declared
    size over the limit is refused before a byte is fetched; a blob larger than its manifest
    says is refused from the upstream's header, the service growing by far less than it; a
    3 MiB props.config label is refused (400, nothing stored), not answered 500. Negative
    control: the same push with a small config and labels is recorded."""
    import json

    _, pusher = await tokens.create(store, "big-pusher", ("push",))
    async with upstream_registry(tmp_path) as upstream, props_serve(
            dsn, tmp_path, "--registry", "127.0.0.1:0", "--registry-upstream", upstream) as served:
        assert served.registry is not None
        push = _RawRegistry(served.registry, pusher)
        big = await push.blob("critic/big", b"{" + b" " * (48 * 1024 * 1024) + b"}")

        def manifest(digest: str, size: int) -> bytes:
            return json.dumps({
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "size": size, "digest": digest}, "layers": []}).encode()

        before = _rss_kb(served.pid)
        declared = await push.manifest("critic/big", "v1",
                                       raw=manifest(big, 1_200_000_000))
        assert declared.status_code == 400 and "declared" in declared.text, declared.text
        understated = await push.manifest("critic/big", "v2", raw=manifest(big, 2_000))
        assert understated.status_code == 400 and "larger" in understated.text
        assert _rss_kb(served.pid) - before < 24 * 1024  # the 48 MiB blob was never held
        label = await push.manifest("critic/big", "v3",
                                    {"props.config": json.dumps({"x": "y" * 3_000_000})})
        assert label.status_code == 400 and "props.config" in label.text, label.text
        fine = await push.manifest("critic/big", "v4", {"props.config": '{"x": 1}'})
        assert fine.status_code == 201, fine.text
        await push.http.aclose()
    recorded = {d.tag: d for d in await definitions.all_pushed(store, "critic")
                if d.name == "big"}
    assert set(recorded) == {"v4"} and recorded["v4"].config == {"x": 1}


@pytest.mark.slow
async def test_an_evaluation_through_the_api(store: EventStore, dsn: str,
                                             tmp_path: Path) -> None:
    """POST a plan: recorded and its cases requested (the service runs them); the same plan
    again requests nothing; a changed one under the name is 409; GET follows it to the end."""
    await _ready(store)
    plan = {"name": "over-http", "examples": ["csvtool/*", "logparse/*"], "epochs": 1,
            "critic": [{"definition": "reference", "ref": "local"}]}
    async with props_serve(dsn, tmp_path, "--runtime", "local") as served, \
            served.client(served.admin) as api:
        first = await api.post("/api/evaluations", json=plan)
        assert first.status_code == 202, first.text
        assert first.json() == {"name": "over-http", "version": 1, "cases": 2,
                                     "resumed": False, "requested": 2}

        async def complete() -> bool:
            shown = await api.get("/api/evaluations/over-http")
            return bool(shown.status_code == 200 and shown.json()["complete"])

        await eventually(complete, 120)
        doc = (await api.get("/api/evaluations/over-http")).json()
        assert doc["counts"] == {"scored": 2} and [c["definition"] for c in doc["critics"]] \
            == ["reference"] and len(doc["cases"]) == 2
        again = (await api.post("/api/evaluations", json=plan)).json()
        assert again["resumed"] and again["requested"] == 0  # nothing twice
        changed = await api.post("/api/evaluations", json=plan | {"epochs": 2})
        assert changed.status_code == 409 and "recorded with another plan" in changed.text
        assert (await api.post("/api/evaluations", params={"new_version": "true"},
                               json=plan | {"epochs": 2})).json()["version"] == 2
        assert (await api.get("/api/evaluations/nope")).status_code == 404
        assert _loc(await api.post("/api/evaluations", json=plan | {"epochs": 0})) == [
            ["body", "epochs"]]
        _, reading = await tokens.create(store, "reader", ("read",))
        async with served.client(reading) as reader:
            assert (await reader.post("/api/evaluations", json=plan)).status_code == 403
            assert (await reader.get("/api/evaluations/over-http")).status_code == 200
