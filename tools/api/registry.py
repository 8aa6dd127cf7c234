"""An OCI distribution (Docker registry v2) proxy in front of an upstream registry.

Every request needs a token: pulls the `read` scope, pushes the `push` scope (`docker login`
sends it as the password of Basic auth). Requests are forwarded to the upstream as they come,
streamed both ways. A manifest pushed by tag under `critic[/NAME]` or `grader[/NAME]`
becomes a `definition.pushed` event with the manifest's digest (what `docker push` prints),
so the grader supervisor picks up a pushed grader on its own. The image may carry its
definition in labels (`props.command` a JSON list, `props.config` a JSON object,
`props.host-python`, `props.network`, `props.memory-mb`, `props.cpus`, `props.max-events`);
labels that do not parse refuse the push before the upstream stores the manifest.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import pydantic
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from props.core.domain import catalog, definitions, vocabulary
from props.core.log.events import describe_validation_error
from props.core.log.store import EventStore
from props.tools.api.auth import Denied, authorize

log = logging.getLogger("props.registry")
# The distribution spec's grammar: a repository name, a tag or digest, and the only paths
# under /v2/ a client may ask for. Anything else (`..`, empty parts, encoded slashes) is
# refused before it reaches the upstream, which would normalise it somewhere else.
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_NAME = rf"{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_DIGEST = r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[A-Za-z0-9=_-]+"
_PATH = re.compile(
    rf"^(?:|_catalog|(?P<name>{_NAME})/(?:tags/list|manifests/(?:{_TAG}|{_DIGEST})"
    rf"|blobs/{_DIGEST}|blobs/uploads/(?:[A-Za-z0-9._=-]+)?))$")
_MANIFEST = re.compile(rf"^(?P<repo>{_NAME})/manifests/(?P<ref>{_TAG}|{_DIGEST})$")
MAX_NAME = 255  # the spec's limit on a repository name
# Hop-by-hop headers (RFC 9110 7.6.1) and what the proxy sets itself.
_DROP = {"host", "authorization", "connection", "keep-alive", "transfer-encoding", "te",
         "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"}
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the distribution spec's suggested limit


def _error(status: int, code: str, message: str,
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"errors": [{"code": code, "message": message}]}, status_code=status,
                        headers=headers)


def _refused_path(request: Request, path: str) -> Response | None:
    """A 400 for a path outside the distribution spec (checked on the raw bytes too: a
    percent-encoded `/` or `.` must not slip a `..` past the grammar)."""
    raw = request.scope.get("raw_path", b"").split(b"?")[0].decode("latin-1")
    match = _PATH.match(path)
    if match is None or "%" in raw or raw != f"/v2/{path}" or \
            len(match["name"] or "") > MAX_NAME:
        return _error(400, "NAME_INVALID", "not a registry path of the distribution spec "
                      "(/v2/NAME/manifests/REF, /v2/NAME/blobs/DIGEST, ...)")
    return None


class ManifestInvalid(Exception):
    pass


def agent_of(repo: str) -> tuple[catalog.AgentType, str] | None:
    """`critic` -> (critic, critic); `critic/NAME` -> (critic, NAME); others: not agents."""
    first, _, rest = repo.partition("/")
    if first not in ("critic", "grader"):
        return None
    return ("critic" if first == "critic" else "grader"), (rest or first)


def definition_from_labels(agent_type: catalog.AgentType, name: str, tag: str, image: str,
                           labels: dict[str, str]) -> catalog.DefinitionPushed:
    """The definition an image's labels describe (the digest is filled in after the push)."""
    def parsed(key: str, default: Any) -> Any:
        if key not in labels:
            return default
        try:
            return json.loads(labels[key])
        except ValueError:
            raise ManifestInvalid(f"label {key} is not JSON: {labels[key][:80]!r}") from None

    try:
        return catalog.DefinitionPushed(
            agent_type=agent_type, name=name, tag=tag, digest="sha256:" + "0" * 64,
            runtime="docker", image=image, command=parsed("props.command", []),
            config=parsed("props.config", {}),
            host_python=parsed("props.host-python", False),
            limits=catalog.AgentLimits(
                network=parsed("props.network", False), cpus=parsed("props.cpus", 1.0),
                memory_mb=parsed("props.memory-mb", 512),
                max_events=parsed("props.max-events", 2000)))
    except pydantic.ValidationError as exc:
        raise ManifestInvalid("the image's props.* labels do not make a definition: "
                              + describe_validation_error("definition.pushed", exc)) from None


class RegistryProxy:
    def __init__(self, store: EventStore, upstream: str, pull_from: str | None = None) -> None:
        self.store = store
        self.upstream = upstream.rstrip("/")
        # The registry address Docker engines pull recorded images from: the upstream itself
        # by default (the proxy gates who may push; pulls of recorded digests need no token).
        self.pull_from = pull_from or urlsplit(self.upstream).netloc
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(60, connect=10))

    async def aclose(self) -> None:
        await self.client.aclose()

    def app(self) -> Starlette:
        methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
        return Starlette(routes=[Route("/v2/{path:path}", self.handle, methods=methods)])

    async def handle(self, request: Request) -> Response:
        scope: vocabulary.Scope = "read" if request.method in ("GET", "HEAD") else "push"
        try:
            token = await authorize(self.store, request.headers.get("authorization"), scope)
        except Denied as exc:
            if exc.status == 401:
                return _error(401, "UNAUTHORIZED", exc.message,
                              {"WWW-Authenticate": 'Basic realm="props registry"'})
            return _error(403, "DENIED", exc.message)
        path = request.path_params["path"]
        if (bad := _refused_path(request, path)) is not None:
            return bad
        manifest = _MANIFEST.match(path) if request.method == "PUT" else None
        agent = agent_of(manifest["repo"]) if manifest else None
        if manifest is None or agent is None or manifest["ref"].startswith("sha256:"):
            return await self._forward(request, path, request.stream())
        body = await request.body()
        if len(body) > MAX_MANIFEST_BYTES:
            return _error(400, "SIZE_INVALID", "manifest larger than 4 MiB")
        repo, tag = manifest["repo"], manifest["ref"]
        try:
            definition = definition_from_labels(
                agent[0], agent[1], tag, f"{self.pull_from}/{repo}",
                await self._labels(repo, body))
        except ManifestInvalid as exc:
            return _error(400, "MANIFEST_INVALID", str(exc))
        response = await self._forward(request, path, body)
        digest = response.headers.get("docker-content-digest", "")
        if response.status_code == 201 and digest:
            recorded = definition.model_copy(update={
                "digest": digest, "image": f"{definition.image}@{digest}"})
            # Recorded after the upstream stored it: if this fails, the push fails and
            # docker retries it; the event id derives from name, tag and digest.
            await definitions.push(self.store, recorded)
            log.info("definition pushed: %s %s:%s = %s", agent[0], agent[1], tag, digest,
                     extra={"token": token.name})
        return response

    async def _labels(self, repo: str, manifest: bytes) -> dict[str, str]:
        try:
            config = json.loads(manifest).get("config") or {}
        except (ValueError, AttributeError):
            raise ManifestInvalid("the manifest is not a JSON object") from None
        if not config.get("digest"):
            return {}  # an index (several platforms): no single config to read labels from
        blob = await self.client.get(f"{self.upstream}/v2/{repo}/blobs/{config['digest']}",
                                     follow_redirects=True)
        if blob.status_code != 200:
            raise ManifestInvalid(f"the config blob {config['digest']} is not in the "
                                  f"registry (upstream said {blob.status_code})")
        try:
            labels = (blob.json().get("config") or {}).get("Labels") or {}
        except (ValueError, AttributeError):
            raise ManifestInvalid(f"the config blob {config['digest']} is not JSON") from None
        return {k: v for k, v in labels.items() if k.startswith("props.")}

    async def _forward(self, request: Request, path: str, body: Any) -> Response:
        url = f"{self.upstream}/v2/{path}"
        if request.url.query:
            url += "?" + request.url.query
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _DROP]
        upstream = await self.client.send(
            self.client.build_request(request.method, url, headers=headers,
                                      content=body if request.method not in ("GET", "HEAD")
                                      else None),
            stream=True)
        out = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROP}
        if "location" in out and out["location"].startswith(self.upstream):
            # Upload sessions and redirects point at the upstream: keep the client on us.
            out["location"] = out["location"][len(self.upstream):]
        return StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code,
                                 headers=out, background=BackgroundTask(upstream.aclose))
