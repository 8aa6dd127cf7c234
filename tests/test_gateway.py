"""No secret enters a run: the model gateway holds the keys, and what outsiders push grants
nothing (issue 54).

The gateway is tested as a real server on its Unix socket (httpx over the socket, as a run's
agent reaches it), in front of a real HTTP server on loopback that stands for the model's
endpoint. The end-to-end tests run the LLM critic, and a critic that dumps what it was given,
on local processes and in Docker and Podman containers, with a canary key in the launcher's
environment: the canary reaches the endpoint (the control: it was there to leak) and appears
in no event, no blob, no container log and no run's environment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import zstandard

from props.core.domain import catalog, chat, definitions, endpoints
from props.core.domain.archive import exports
from props.core.log.store import EventStore
from props.reactors.gateway import Gateway
from props.reactors.runtimes.container_runtime import ContainerRuntime
from props.tools.http import registry
from tests.conftest import REFERENCE_IMAGE, docker_or_skip, once_per_ci, podman_or_skip
from tests.fake_openai import chat_server as _chat_server
from tests.fake_openai import completion
from tests.reactor_helpers import (
    finished,
    register_endpoint,
    request,
    serving,
    sync_samples,
)

CANARY_VARIABLE = "PROPS_TEST_CANARY_MODEL_KEY".removeprefix("PROPS_TEST_")  # not PROPS_*
ANSWER = {"issues": [{"start": 1, "end": 1, "severity": "low", "rationale": "a finding"}]}


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    key = f"sk-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(CANARY_VARIABLE, key)
    return key


@contextlib.contextmanager
def echoing_endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An endpoint that answers one finding per request and, as some providers' errors do,
    echoes the Authorization header it was sent inside its answer."""
    holder: list[list[dict[str, Any]]] = []

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        auth = holder[0][-1]["auth"] if holder and holder[0] else None
        found = {"issues": [{**ANSWER["issues"][0], "rationale": f"you sent {auth}"}]}
        return completion(json.dumps(found))

    with _chat_server(answer) as (url, seen):
        holder.append(seen)
        yield url, seen


@contextlib.asynccontextmanager
async def gateway_on(store: EventStore, tmp_path: Path) -> AsyncIterator[Gateway]:
    gateway = Gateway(store, tmp_path / "gateway", "test")
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.serve)
        try:
            yield gateway
        finally:
            tg.cancel_scope.cancel()


def call(gateway: Gateway, credential: str, **body: Any) -> httpx.Response:
    """A chat completion through the gateway's socket, as a run's agent sends it."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(gateway.socket_path)),
                      timeout=30) as client:
        return client.post("http://gateway/v1/chat/completions",
                           headers={"Authorization": f"Bearer {credential}"},
                           json={"model": "asked-for", "messages": [
                               {"role": "user", "content": "hi"}], **body})


def llm_definition(name: str, config: dict[str, Any], **fields: Any
                   ) -> catalog.DefinitionPushed:
    command = [sys.executable, "-m", "props.reactors.agents.llm_critic"]
    return catalog.DefinitionPushed(
        agent_type="critic", name=name, tag="test", runtime="local", image="local:llm",
        command=command, config=config, digest=definitions.local_digest(command, config),
        **fields)


async def gateway_calls(store: EventStore, run_id: uuid.UUID) -> list[catalog.GatewayCalled]:
    return [r.event for r in await store.read_stream(f"gateway-{run_id}")
            if isinstance(r.event, catalog.GatewayCalled)]


# -- the gateway itself ----------------------------------------------------------------------


async def test_a_credential_opens_only_its_run_and_only_while_it_runs(
        store: EventStore, tmp_path: Path, canary: str) -> None:
    with echoing_endpoint() as (url, seen):
        await register_endpoint(store, "model", url, key_env=CANARY_VARIABLE)
        definition = llm_definition("llm", {"endpoint": "model"})
        await definitions.push(store, definition)
        async with gateway_on(store, tmp_path) as gateway:
            run_id = uuid.uuid4()
            credential = await gateway.admit(run_id, "the-run-model", definition, 0)
            answered = await anyio.to_thread.run_sync(lambda: call(gateway, credential))
            assert answered.status_code == 200, answered.text
            # The key was attached by the gateway, and the echo of it scrubbed on the way back.
            assert seen[-1]["auth"] == f"Bearer {canary}"
            assert canary not in answered.text and "withheld" in answered.text
            assert seen[-1]["body"]["model"] == "the-run-model"  # the run's, not the asked
            forged = f"{run_id}.{'0' * 64}"
            other = gateway.credential(uuid.uuid4())  # a well-made credential of no run here
            for bad in (forged, other, "none", canary):
                refused = await anyio.to_thread.run_sync(call, gateway, bad)
                assert refused.status_code == 401, (bad, refused.text)
            gateway.retire(run_id)
            ended = await anyio.to_thread.run_sync(lambda: call(gateway, credential))
            assert ended.status_code == 401  # it died with the run
    assert len(seen) == 1  # nothing refused was forwarded
    [recorded] = await gateway_calls(store, run_id)
    assert (recorded.endpoint, recorded.outcome, recorded.http_status) == ("model", "answered",
                                                                           200)


async def test_the_budget_holds_before_each_call_and_limits_are_the_endpoints(
        store: EventStore, tmp_path: Path) -> None:
    with echoing_endpoint() as (url, seen):
        # 100 tokens in at $2,000/Mtok: $0.20 a call, against a budget of $0.30.
        await register_endpoint(store, "pricey", url, price_in_per_mtok=2000.0,
                                max_tokens=64, requests_per_minute=100)
        definition = llm_definition("llm", {"endpoint": "pricey"})
        await definitions.push(store, definition)
        async with gateway_on(store, tmp_path) as gateway:
            run_id = uuid.uuid4()
            credential = await gateway.admit(run_id, "m", definition, 0.3)
            statuses = []
            for _ in range(3):
                answer = await anyio.to_thread.run_sync(
                    lambda: call(gateway, credential, max_tokens=10_000))
                statuses.append(answer.status_code)
            assert statuses == [200, 200, 402]
            assert answer.headers[chat.GATEWAY_OUTCOME] == "over_budget"
            assert [s["body"]["max_tokens"] for s in seen] == [64, 64]  # clamped
            # A restarted launcher counts what the run spent before: still refused.
            again = await gateway.admit(run_id, "m", definition, 0.3)
            refused = await anyio.to_thread.run_sync(lambda: call(gateway, again))
            assert refused.status_code == 402
    calls = await gateway_calls(store, run_id)
    assert [c.outcome for c in calls] == ["answered", "answered", "over_budget", "over_budget"]
    assert sum(c.cost_usd for c in calls) == pytest.approx(0.4)


async def test_an_endpoint_keeps_its_rate(store: EventStore, tmp_path: Path) -> None:
    with echoing_endpoint() as (url, seen):
        await register_endpoint(store, "slow", url, requests_per_minute=1)
        definition = llm_definition("llm", {"endpoint": "slow"})
        await definitions.push(store, definition)
        async with gateway_on(store, tmp_path) as gateway:
            credential = await gateway.admit(uuid.uuid4(), "m", definition, 0)
            first = await anyio.to_thread.run_sync(lambda: call(gateway, credential))
            second = await anyio.to_thread.run_sync(lambda: call(gateway, credential))
    assert (first.status_code, second.status_code, len(seen)) == (200, 429, 1)
    assert second.headers["Retry-After"]


async def test_a_run_asks_only_for_an_answer_and_pays_for_what_it_could_have_used(
        store: EventStore, tmp_path: Path) -> None:
    """What a run's body may say beyond an answer is not forwarded (another route, several
    answers a call, a stream); an answer without usage is charged its whole allowance; a
    run refused again and again writes one event, not one a call (the probe wrote 311)."""
    def no_usage(body: dict[str, Any]) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", "content": "{}"}}]}

    with _chat_server(no_usage) as (url, seen):
        # $1,000 per million answer tokens: 64 tokens allowed cost $0.064 a call.
        await register_endpoint(store, "open", url, price_out_per_mtok=1000.0, max_tokens=64)
        definition = llm_definition("llm", {"endpoint": "open"})
        await definitions.push(store, definition)
        async with gateway_on(store, tmp_path) as gateway:
            run_id = uuid.uuid4()
            credential = await gateway.admit(run_id, "m", definition, 0.05)
            first = await anyio.to_thread.run_sync(lambda: call(
                gateway, credential, n=64, models=["pricier"], api_base="http://x",
                stream=True, max_completion_tokens=99_999, temperature=0.5))
            assert first.status_code == 200
            for _ in range(30):
                refused = await anyio.to_thread.run_sync(call, gateway, credential)
                assert refused.status_code == 402
    [sent] = [s["body"] for s in seen]
    assert sent["n"] == 1 and sent["stream"] is False and sent["max_tokens"] == 64
    assert {"models", "api_base", "max_completion_tokens"} & set(sent) == set()
    assert sent["temperature"] == 0.5  # what asks for an answer goes on (the control)
    calls = await gateway_calls(store, run_id)
    assert [c.outcome for c in calls] == ["answered", "over_budget"]
    assert calls[0].tokens_out == 64 and calls[0].cost_usd == pytest.approx(0.064)


async def test_each_decision_of_the_operator_takes_effect(store: EventStore) -> None:
    """A revoke after a grant after a revoke, and an endpoint moved back to its first URL,
    are each in force (the probe: the same decision twice was taken as already stored, so
    the last revoke said done and the grant stayed)."""
    digest = "sha256:" + "2" * 64

    def decision(network: bool) -> catalog.DefinitionGranted:
        return catalog.DefinitionGranted(agent_type="critic", name="x", digest=digest,
                                         network=network)

    for network in (False, True, False, True, False):
        await endpoints.grant(store, decision(network))
        grant = await endpoints.grant_of(store, "critic", digest)
        assert (grant is not None and grant.network) is network
    for port in (1111, 2222, 1111):
        assert await register_endpoint_says_new(store, f"http://127.0.0.1:{port}/v1")
        found = await endpoints.resolve(store, "ep")
        assert found is not None and found.base_url.endswith(f":{port}/v1")
    assert not await register_endpoint_says_new(store, "http://127.0.0.1:1111/v1")


async def register_endpoint_says_new(store: EventStore, url: str) -> bool:
    return await endpoints.register(store, catalog.EndpointRegistered(name="ep", base_url=url))


# -- what an outsider pushes grants nothing ---------------------------------------------------


async def test_a_push_through_the_registry_grants_nothing_until_the_operator_does(
        store: EventStore, tmp_path: Path) -> None:
    """An image's labels may describe a critic (its endpoint by name, network, the host's
    Python): recorded as described and granted nothing, so the gateway forwards nothing for
    its runs; the operator's grant of that digest lets it through (the control)."""
    labels = {"props.command": json.dumps(["python3", "-m", "x"]),
              "props.config": json.dumps({"endpoint": "model"}),
              "props.network": "true", "props.host-python": "true"}
    pushed = registry.definition_from_labels("critic", "outsider", "v1", "reg/critic/outsider",
                                             labels)
    pushed = pushed.model_copy(update={"digest": "sha256:" + "1" * 64})
    await definitions.push(store, pushed, actor="token:pusher", outsider=True)
    [record] = [r for r in await store.read_stream("definition-critic")]
    assert isinstance(record.event, catalog.DefinitionPushed)
    asked = ["network", "host-python", "endpoint model"]
    assert record.metadata["asked_grants"] == asked
    assert await endpoints.grant_of(store, "critic", pushed.digest) is None
    assert endpoints.ungranted(record.event, None) == asked  # its runs fail not_granted
    effective = endpoints.as_granted(record.event, None)
    assert (effective.limits.network, effective.host_python) == (False, False)
    with echoing_endpoint() as (url, seen):
        await register_endpoint(store, "model", url)
        async with gateway_on(store, tmp_path) as gateway:
            credential = await gateway.admit(uuid.uuid4(), "m", record.event, 0)
            refused = await anyio.to_thread.run_sync(lambda: call(gateway, credential))
            assert refused.status_code == 403 and seen == []
            await endpoints.grant(store, catalog.DefinitionGranted(
                agent_type="critic", name="outsider", digest=pushed.digest,
                endpoints=["model"]))
            credential = await gateway.admit(uuid.uuid4(), "m", record.event, 0)
            allowed = await anyio.to_thread.run_sync(lambda: call(gateway, credential))
            assert allowed.status_code == 200 and len(seen) == 1
    grant = await endpoints.grant_of(store, "critic", pushed.digest)
    assert endpoints.ungranted(pushed, grant) == ["network", "host-python"]  # not granted
    granted = endpoints.as_granted(pushed, grant)
    assert (granted.limits.network, granted.host_python) == (False, False)


def test_labels_that_carry_a_url_or_a_key_are_refused_before_anything_is_stored() -> None:
    for config in ({"base_url": "http://127.0.0.1:9/v1"}, {"api_key_env": "OPENAI_API_KEY"}):
        with pytest.raises(registry.ManifestInvalid, match="props endpoints add"):
            registry.definition_from_labels("critic", "x", "v1", "reg/critic/x",
                                            {"props.config": json.dumps(config)})


# -- end to end: a canary key never reaches a run -----------------------------------------------

# A critic that reports what it was given: its whole environment, what it sees of the
# gateway's folder, and whether the launcher's secret of the credentials is in reach.
DUMPER = """
import json, os
from props.reactors.agents.sdk import Agent
with Agent.from_environment() as a:
    where = os.environ.get("PROPS_GATEWAY", "").removeprefix("unix:")
    folder = os.path.dirname(where) if where else ""
    seen = {"env": dict(os.environ),
            "gateway_folder": sorted(os.listdir(folder)) if folder else None}
    a.issue("csvtool/cli.py", 1, 1, json.dumps(seen)[:3900])
"""


async def everything_recorded(store: EventStore, scratch: Path) -> bytes:
    """Every event's data and metadata, every blob (container logs, messages), and the
    whole log as `props export` writes it (decompressed)."""
    rows = await store.sql.fetch("SELECT data::text || metadata::text FROM props.events")
    blobs = await store.sql.fetch("SELECT encode(sha256, 'hex') FROM props.blobs")
    out = [str(r[0]).encode() for r in rows]
    out += [await store.get_blob(str(b[0])) for b in blobs]
    exported = scratch / "everything.jsonl.zst"
    await exports.export(store, exports.Selection(), exported)
    with zstandard.ZstdDecompressor().stream_reader(exported.open("rb")) as reader:
        out.append(reader.read())
    return b"\n".join(out)


async def canary_run(store: EventStore, runtimes: list[ContainerRuntime], canary: str,
                     image: dict[str, Any], scratch: Path,
                     caplog: pytest.LogCaptureFixture) -> None:
    """The LLM critic and the dumper, both naming the canary's endpoint, on `runtimes`:
    the canary is in no event, blob, export, service log line or run's environment."""
    caplog.set_level(logging.DEBUG)
    await sync_samples(store)
    with echoing_endpoint() as (url, seen):
        await register_endpoint(store, "canary", url, key_env=CANARY_VARIABLE)
        config = {"endpoint": "canary", "mode": "per-file", "structured": "tolerant"}
        critic = [sys.executable, "-m", "props.reactors.agents.llm_critic"]
        dumper = [sys.executable, "-c", DUMPER]
        for name, command in (("llm", critic), ("dumper", dumper)):
            await definitions.push(store, catalog.DefinitionPushed(
                agent_type="critic", name=name, tag="test", command=command, config=config,
                digest=image.get("digest") or definitions.local_digest(command, config),
                **{k: v for k, v in image.items() if k != "digest"}))
        [llm] = await request(store, "llm", ref="test", budget=1.0)
        [dumper_run] = await request(store, "dumper", ref="test")
        async with serving(store, runtimes):
            done = await finished(store, [llm, dumper_run], seconds=300)
    assert done[llm].status == "completed", done[llm]
    assert done[dumper_run].status == "completed", done[dumper_run]
    assert seen and {s["auth"] for s in seen} == {f"Bearer {canary}"}  # the key was used
    recorded = await everything_recorded(store, scratch)
    recorded += caplog.text.encode()  # every line the services logged meanwhile
    assert canary.encode() not in recorded
    assert canary[-12:].encode() not in recorded  # not even a piece of it
    [dumped] = [r.event for r in await store.read_stream(f"run-{dumper_run}")
                if isinstance(r.event, catalog.IssueReported)]
    given = json.loads(dumped.rationale)
    assert chat.CREDENTIAL_VARIABLE in given["env"]  # its own credential, and no key
    assert CANARY_VARIABLE not in given["env"]
    assert given["gateway_folder"] == ["gateway.sock"]  # the socket alone: no secret
    findings = [r.event for r in await store.read_stream(f"run-{llm}")
                if isinstance(r.event, catalog.IssueReported)]
    assert findings and all("withheld" in f.rationale for f in findings)


async def test_a_canary_key_reaches_the_endpoint_and_nothing_else_local(
        store: EventStore, tmp_path: Path, canary: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from props.reactors.runtimes.local_runtime import LocalRuntime

    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await canary_run(store, [LocalRuntime(tmp_path / "runs", trust_commands=True)], canary,
                     {"runtime": "local", "image": "local:canary"}, tmp_path, caplog)


async def _in_containers(store: EventStore, tmp_path: Path, canary: str,
                         monkeypatch: pytest.MonkeyPatch, rt: Any,
                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    info = await rt.docker.images.inspect(REFERENCE_IMAGE)
    await canary_run(store, [rt], canary, {"runtime": "docker", "image": REFERENCE_IMAGE,
                                           "digest": info["Id"], "host_python": True},
                     tmp_path, caplog)


@once_per_ci
async def test_a_canary_key_never_enters_a_docker_container(
        store: EventStore, tmp_path: Path, canary: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async with docker_or_skip() as rt:
        await _in_containers(store, tmp_path, canary, monkeypatch, rt, caplog)


@once_per_ci
async def test_a_canary_key_never_enters_a_podman_container(
        store: EventStore, tmp_path: Path, canary: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async with podman_or_skip() as rt:
        await _in_containers(store, tmp_path, canary, monkeypatch, rt, caplog)
