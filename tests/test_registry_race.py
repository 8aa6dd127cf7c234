"""The registry proxy decides a tag once: concurrent pushes through a real `props serve` to a
real upstream (Debian's docker-registry), as `docker push` would send them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anyio
import httpx
import pytest

from props.core.domain import definitions, tokens
from props.core.log.store import EventStore
from tests.test_api import _RawRegistry, props_serve, upstream_registry

PUSHES = 8


def _manifest(config_digest: str, size: int) -> bytes:
    return json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "size": size, "digest": config_digest}, "layers": []}).encode()


async def _bodies(push: _RawRegistry, repo: str, count: int) -> list[bytes]:
    """`count` manifests of distinct images (their configs uploaded first)."""
    out = []
    for n in range(count):
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"Labels": {"props.cpus": f"{1 + n / 10}"}},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()
        out.append(_manifest(await push.blob(repo, config), len(config)))
    return out


async def _put_all(push: _RawRegistry, puts: list[tuple[str, bytes]]) -> list[httpx.Response]:
    """Every (path, manifest) PUT at once."""
    answers: list[httpx.Response | None] = [None] * len(puts)

    async def put(i: int, path: str, body: bytes) -> None:
        answers[i] = await push.http.put(path, content=body, headers={
            "content-type": "application/vnd.docker.distribution.manifest.v2+json"})

    async with anyio.create_task_group() as tg:
        for i, (path, body) in enumerate(puts):
            tg.start_soon(put, i, path, body)
    return [a for a in answers if a is not None]


@pytest.mark.slow
async def test_concurrent_pushes_of_one_new_tag_record_one_digest(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    """8 pushes of 8 different images under one new tag, at once: one is stored and recorded,
    the others are refused (409), and the upstream's tag names the recorded digest. Before
    the tag was one decision, several passed the check and each was recorded (the probe: two
    digests for one tag). Negative control: 8 pushes of 8 new tags at once all succeed (the
    tag's key serialises one tag, not the proxy)."""
    _, pusher = await tokens.create(store, "race-pusher", ("push", "read"))
    async with upstream_registry(tmp_path) as upstream, props_serve(
            dsn, tmp_path, "--registry", "127.0.0.1:0", "--registry-upstream", upstream) as served:
        assert served.registry is not None
        push = _RawRegistry(served.registry, pusher)
        raced = await _put_all(push, [("/v2/critic/raced/manifests/v1", body)
                                      for body in await _bodies(push, "critic/raced", PUSHES)])
        spread = await _put_all(push, [(f"/v2/critic/spread/manifests/t{n}", body)
                                       for n, body in enumerate(
                                           await _bodies(push, "critic/spread", PUSHES))])
        await push.http.aclose()
        async with httpx.AsyncClient() as client:
            upstream_tag = await client.head(
                f"{upstream}/v2/critic/raced/manifests/v1",
                headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    assert sorted(r.status_code for r in raced) == [201] + [409] * (PUSHES - 1), \
        [r.text for r in raced]
    [won] = [r for r in raced if r.status_code == 201]
    recorded = [d for d in await definitions.all_pushed(store, "critic") if d.name == "raced"]
    assert [d.digest for d in recorded] == [won.headers["docker-content-digest"]]
    assert upstream_tag.headers["docker-content-digest"] == recorded[0].digest
    assert recorded[0].digest == "sha256:" + hashlib.sha256(won.request.content).hexdigest()
    assert [r.status_code for r in spread] == [201] * PUSHES
    assert len({d.tag for d in await definitions.all_pushed(store, "critic")
                if d.name == "spread"}) == PUSHES
