"""An OCI distribution (Docker registry v2) proxy in front of an upstream registry.

Every request needs a token: pulls the `read` scope, pushes the `push` scope (`docker login`
sends it as the password of Basic auth; its `GET /v2/` takes either). Requests are forwarded
to the upstream as they come, streamed both ways. A manifest pushed by tag under
`critic[/NAME]` or `grader[/NAME]` becomes a `definition.pushed` event with the manifest's
digest (what `docker push` prints), so the grader supervisor picks up a pushed grader on its
own. The image may carry its definition in labels (`props.command` a JSON list, `props.config`
a JSON object, `props.host-python`, `props.network`, `props.memory-mb`, `props.cpus`,
`props.max-events`); labels that do not parse refuse the push before the upstream stores the
manifest. Labels describe a critic and grant nothing: a push token's definition is recorded
without network, the host's binaries, an endpoint or a cap of its own (what its labels asked
for is kept in the event's metadata: `props.max-events` is asked, never in force), and its
config may not carry a URL or a key; the operator grants with `props definitions grant`
(core/domain/endpoints.py).

The proxy is a gate, not a pipe. A manifest's size is checked from its header and again while
it streams (nothing is kept past the limit). DELETE is refused: a recorded definition's image
stays pullable. A recorded name and tag never change digest under a push token (the push is
refused: a new image is a new tag); an admin token may move it, and the definition event says
it was an override and by whom. The manifest and the image config are read as the registry
and the engine read them (Go's JSON matches keys case-insensitively, the last one winning), so
a document holding one key twice, in any case, is refused rather than read two ways.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pydantic
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from props.core.domain import catalog, definitions, endpoints, image_refs, tokens, vocabulary
from props.core.log import leadership
from props.core.log.events import describe_validation_error
from props.core.log.store import EventStore
from props.tools.http.auth import Denied, authorize

log = logging.getLogger("props.registry")
# The distribution spec's grammar: a repository name, a tag or digest, and the only paths
# under /v2/ a client may ask for. Anything else (`..`, empty parts, encoded slashes) is
# refused before it reaches the upstream, which would normalise it somewhere else.
_NAME, _TAG = image_refs.REPOSITORY, image_refs.TAG
_DIGEST = r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[A-Za-z0-9=_-]+"
_PATH = re.compile(
    rf"^(?:|_catalog|(?P<name>{_NAME})/(?:tags/list|manifests/(?:{_TAG}|{_DIGEST})"
    rf"|blobs/{_DIGEST}|blobs/uploads/(?:[A-Za-z0-9._=-]+)?))$")
_MANIFEST = re.compile(rf"^(?P<repo>{_NAME})/manifests/(?P<ref>{_TAG}|{_DIGEST})$")
MAX_NAME = image_refs.MAX_NAME  # the spec's limit on a repository name
# Hop-by-hop headers (RFC 9110 7.6.1) and what the proxy sets itself.
_DROP = {"host", "authorization", "connection", "keep-alive", "transfer-encoding", "te",
         "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"}
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the distribution spec's suggested limit
MAX_CONFIG_BYTES = MAX_MANIFEST_BYTES  # an image config is read whole: bounded the same
MAX_LABEL_BYTES = 64 * 1024  # one props.* label (a definition's config is small)
# What one token may upload in a day (blobs and manifests): a push token stored ~200 MB blobs
# that no manifest named, with no bound (the probe: 805 -> 1,208 MB in one run).
DEFAULT_UPLOAD_QUOTA_BYTES = 8 * 1024**3
# Of which, blobs that none of the token's manifests names yet: a push uploads its layers,
# then the manifest that names them; bytes left unnamed are storage nobody can pull by a
# definition. Past this, the token's uploads wait for a manifest (or the day to pass).
DEFAULT_UNREFERENCED_BYTES = 2 * 1024**3
QUOTA_WINDOW_SECONDS = 86_400.0
_UPLOAD = re.compile(r"/blobs/uploads/(?P<session>[A-Za-z0-9._=-]*)$")


class _OverQuota(Exception):
    pass


class UploadQuota:
    """Bytes each token uploaded in the last day, counted as they stream, and of those the
    blobs that none of its manifests has named yet (this process's count: one proxy per
    deployment)."""

    def __init__(self, limit: int, unreferenced: int = DEFAULT_UNREFERENCED_BYTES) -> None:
        self.limit = limit
        self.unreferenced_limit = unreferenced
        self._sent: dict[str, deque[tuple[float, int]]] = {}
        # Bytes of each upload not completed yet, since when: unnamed too (the upstream holds
        # the partial upload), and expired with the day, so that sessions a token opens and
        # never completes neither escape its share nor pile up in this process.
        self._sessions: dict[tuple[str, str], tuple[float, int]] = {}
        self._unnamed: dict[str, dict[str, tuple[float, int]]] = {}  # digest: (when, bytes)

    def used(self, token: str) -> int:
        sent = self._sent.setdefault(token, deque())
        while sent and sent[0][0] < time.monotonic() - QUOTA_WINDOW_SECONDS:
            sent.popleft()
        return sum(n for _, n in sent)

    def take(self, token: str, size: int) -> None:
        if self.used(token) + size > self.limit:
            raise _OverQuota
        self._sent[token].append((time.monotonic(), size))

    async def counted(self, token: str, body: AsyncIterator[bytes],
                      session: str = "") -> AsyncIterator[bytes]:
        """`body` as it streams, each chunk charged to `token` (and to its upload `session`,
        if one); cut once over its quota (the upstream is left a partial upload, which it
        never stores)."""
        async for chunk in body:
            self.take(token, len(chunk))
            if session:
                at, sent = self._sessions.get((token, session), (time.monotonic(), 0))
                self._sessions[(token, session)] = (at, sent + len(chunk))
            yield chunk

    def unnamed(self, token: str) -> int:
        """Bytes of blobs `token` uploaded in the last day that none of its manifests names."""
        since = time.monotonic() - QUOTA_WINDOW_SECONDS
        held = self._unnamed.setdefault(token, {})
        for digest in [d for d, (at, _) in held.items() if at < since]:
            del held[digest]
        for key in [k for k, (at, _) in self._sessions.items() if at < since]:
            del self._sessions[key]
        open_uploads = sum(n for (t, _), (_, n) in self._sessions.items() if t == token)
        return sum(n for _, n in held.values()) + open_uploads

    def completed(self, token: str, session: str, digest: str) -> None:
        """The upload `session` stored the blob `digest`: unnamed until a manifest names it."""
        _, size = self._sessions.pop((token, session), (0.0, 0))
        self._unnamed.setdefault(token, {})[digest] = (time.monotonic(), size)

    def named(self, token: str, manifest: dict[str, Any]) -> None:
        """`token` stored `manifest`: the blobs it names are referenced."""
        held = self._unnamed.get(token, {})
        listed = [_key(manifest, "layers"), _key(manifest, "manifests")]
        for part in [_key(manifest, "config"),
                     *(p for parts in listed if isinstance(parts, list) for p in parts)]:
            digest = _key(part, "digest") if isinstance(part, dict) else None
            if isinstance(digest, str):
                held.pop(digest, None)


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


def _unambiguous(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are distinct even case-insensitively (json's object hook)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key.lower() in seen:
            raise ManifestInvalid(f"the document holds the key {key[:40]!r} twice (in some "
                                  f"case): the registry and the engine would read another one")
        seen.add(key.lower())
    return dict(pairs)


def parse_document(data: bytes, what: str) -> dict[str, Any]:
    """`data` as a JSON object whose every key is unambiguous (see `_unambiguous`)."""
    try:
        doc = json.loads(data, object_pairs_hook=_unambiguous)
    except (ValueError, RecursionError):
        raise ManifestInvalid(f"the {what} is not JSON") from None
    if not isinstance(doc, dict):
        raise ManifestInvalid(f"the {what} is not a JSON object")
    return doc


def _key(doc: dict[str, Any], name: str) -> Any:
    """The value of `name` as Go reads it: whatever the key's case (one at most, checked)."""
    return next((v for k, v in doc.items() if k.lower() == name.lower()), None)


async def read_bounded(request: Request, limit: int) -> bytes | None:
    """The body, or None once it is over `limit` (from its header, or as it streams: never
    more than `limit` bytes held)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


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
        config = parsed("props.config", {})
        if isinstance(config, dict):
            endpoints.check_config(config)
        return catalog.DefinitionPushed(
            agent_type=agent_type, name=name, tag=tag, digest="sha256:" + "0" * 64,
            runtime="docker", image=image, command=parsed("props.command", []),
            config=config, host_python=parsed("props.host-python", False),
            limits=catalog.AgentLimits(
                network=parsed("props.network", False), cpus=parsed("props.cpus", 1.0),
                memory_mb=parsed("props.memory-mb", 512),
                max_events=parsed("props.max-events", None)))
    except endpoints.EndpointRefused as exc:
        raise ManifestInvalid(str(exc)) from None
    except pydantic.ValidationError as exc:
        raise ManifestInvalid("the image's props.* labels do not make a definition: "
                              + describe_validation_error("definition.pushed", exc)) from None


class RegistryProxy:
    def __init__(self, store: EventStore, upstream: str, pull_from: str | None = None,
                 upload_quota: int = DEFAULT_UPLOAD_QUOTA_BYTES,
                 unreferenced: int = DEFAULT_UNREFERENCED_BYTES) -> None:
        self.store = store
        self.quota = UploadQuota(upload_quota, unreferenced)
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
        path = request.path_params["path"]
        if request.method == "DELETE":
            return _error(405, "UNSUPPORTED", "props' registry deletes nothing: a recorded "
                          "definition's image must stay pullable for its runs")
        scope: vocabulary.Scope = "read" if request.method in ("GET", "HEAD") else "push"
        try:
            token = await authorize(self.store, request.headers.get("authorization"), scope)
        except Denied as exc:
            if exc.status == 401:
                return _error(401, "UNAUTHORIZED", exc.message,
                              {"WWW-Authenticate": 'Basic realm="props registry"'})
            if path != "" or not await self._may_log_in(request):
                return _error(403, "DENIED", exc.message)
            # `docker login` checks GET /v2/ only: a push token logs in to push.
            return JSONResponse({})
        if (bad := _refused_path(request, path)) is not None:
            return bad
        if scope == "push" and (bad := self._outside_its_house(path, token)) is not None:
            return bad
        manifest = _MANIFEST.match(path) if request.method == "PUT" else None
        if manifest is None:
            if scope == "read":
                return await self._forward(request, path, request.stream())
            return await self._upload(request, path, token)
        body = await read_bounded(request, MAX_MANIFEST_BYTES)
        if body is None:
            return _error(413, "SIZE_INVALID", f"a manifest is at most "
                          f"{MAX_MANIFEST_BYTES // (1024 * 1024)} MiB: nothing was stored")
        try:
            self.quota.take(token.name, len(body))
        except _OverQuota:
            return self._over_quota(token)
        agent = agent_of(manifest["repo"])
        try:
            doc = parse_document(body, "manifest")
            if agent is None or manifest["ref"].startswith("sha256:"):
                return self._named(token, doc, await self._forward(request, path, body))
            repo, tag = manifest["repo"], manifest["ref"]
            definition = definition_from_labels(
                agent[0], agent[1], tag, f"{self.pull_from}/{repo}",
                await self._labels(repo, doc))
        except ManifestInvalid as exc:
            return _error(400, "MANIFEST_INVALID", str(exc))
        digest = "sha256:" + hashlib.sha256(body).hexdigest()  # what the registry will name
        # The check, the upstream's store and the record are one decision per tag: two
        # concurrent pushes of one new tag would otherwise both pass the check and both be
        # recorded (two digests for one tag). The key is held on a connection of its own.
        async with leadership.exclusive(self.store.dsn,
                                        leadership.definition_tag(*agent, tag)):
            return self._named(token, doc, await self._decide(request, path, body, token,
                                                              definition, digest))

    async def _upload(self, request: Request, path: str, token: tokens.Token) -> Response:
        """A blob upload (or any other push-scope request but a manifest), charged to the
        token as it streams; refused while the token holds more unnamed blobs than its
        share. A completed upload's blob is unnamed until a manifest of the token names it."""
        upload = _UPLOAD.search(path)
        if upload is not None and \
                self.quota.unnamed(token.name) >= self.quota.unreferenced_limit:
            log.warning("token %s holds blobs no manifest names", token.name,
                        extra={"token": token.name})
            return _error(429, "TOOMANYREQUESTS", f"this token uploaded "
                          f"{self.quota.unreferenced_limit // 1024**2} MiB of blobs that none "
                          f"of its manifests names: push a manifest that names them, or wait "
                          f"for the day to pass (registry_unreferenced_mb in the service's "
                          f"settings)")
        session = upload["session"] if upload is not None else ""
        try:
            response = await self._forward(
                request, path, self.quota.counted(token.name, request.stream(), session))
        except _OverQuota:
            return self._over_quota(token)
        digest = request.query_params.get("digest")
        if upload is not None and response.status_code == 201 and digest:
            self.quota.completed(token.name, session, digest)
        return response

    def _named(self, token: tokens.Token, manifest: dict[str, Any],
               response: Response) -> Response:
        if response.status_code == 201:
            self.quota.named(token.name, manifest)
        return response

    async def _decide(self, request: Request, path: str, body: bytes, token: tokens.Token,
                      definition: catalog.DefinitionPushed, digest: str) -> Response:
        """Refuse a moved tag (unless an admin moves it), else forward and record."""
        what = f"{definition.agent_type} {definition.name}:{definition.tag}"
        override = await self._moves_a_tag(definition, digest)
        if override and not token.allows("admin"):
            return _error(409, "DENIED", f"{what} is recorded with another digest: push the "
                          f"new image under a new tag (an admin token may move the tag, "
                          f"recorded as an override)")
        response = await self._forward(request, path, body)
        stored = response.headers.get("docker-content-digest", "")
        if response.status_code == 201 and stored:
            recorded = definition.model_copy(update={
                "digest": stored, "image": f"{definition.image}@{stored}"})
            # Recorded after the upstream stored it: if this fails, the push fails and
            # docker retries it; the event id derives from name, tag and digest.
            # A push token describes a critic; it grants nothing (network, the host's
            # binaries, endpoints): recorded without, and the operator grants them.
            await definitions.push(self.store, recorded, actor=f"token:{token.name}",
                                   override=override, outsider=True)
            asks = endpoints.asks(recorded)
            log.info("definition pushed: %s = %s%s%s", what, stored,
                     " (an admin moved the tag)" if override else "",
                     f"; its labels ask for {', '.join(asks)}, which a push does not grant: "
                     f"its runs fail not_granted until an operator runs props definitions "
                     f"grant" if asks else "",
                     extra={"token": token.name})
        return response

    def _outside_its_house(self, path: str, token: tokens.Token) -> Response | None:
        """A push anywhere but under `critic[/NAME]` or `grader[/NAME]`, the repositories
        props records, is refused: the upstream holds nothing props does not know of."""
        match = _PATH.match(path)
        name = match["name"] if match is not None else None
        if name is not None and agent_of(name) is not None:
            return None
        log.warning("refused a push outside critic/ and grader/: %s", path[:200],
                    extra={"token": token.name})
        return _error(403, "DENIED", "props' registry takes pushes under critic[/NAME] and "
                      "grader[/NAME] only (the repositories it records as definitions)")

    def _over_quota(self, token: tokens.Token) -> Response:
        log.warning("token %s is over its upload quota", token.name,
                    extra={"token": token.name})
        return _error(429, "TOOMANYREQUESTS", f"this token uploaded its "
                      f"{self.quota.limit // 1024**2} MiB of the last 24 h: nothing more is "
                      f"stored until that frees (registry_upload_quota_mb in the service's "
                      f"settings)")

    async def _may_log_in(self, request: Request) -> bool:
        try:
            await authorize(self.store, request.headers.get("authorization"), "push")
        except Denied:
            return False
        return True

    async def _moves_a_tag(self, definition: catalog.DefinitionPushed, digest: str) -> bool:
        """Whether `definition`'s name and tag are recorded with a digest other than
        `digest` (whatever runtime recorded them: a local `reference@local` too)."""
        return any(d.name == definition.name and d.tag == definition.tag
                   and d.digest != digest
                   for d in await definitions.all_pushed(self.store, definition.agent_type))

    async def _labels(self, repo: str, manifest: dict[str, Any]) -> dict[str, str]:
        config = _key(manifest, "config")
        if not isinstance(config, dict) or not isinstance(_key(config, "digest"), str):
            return {}  # an index (several platforms): no single config to read labels from
        digest = _key(config, "digest")
        size = _key(config, "size")
        # The size the manifest declares is checked before a byte is fetched, and the blob
        # again as it streams: a pusher's 1 GB "config" must not be held by the service.
        if type(size) is not int or not 0 <= size <= MAX_CONFIG_BYTES:
            raise ManifestInvalid(f"the config blob is declared {str(size)[:40]} bytes: at "
                                  f"most {MAX_CONFIG_BYTES // (1024 * 1024)} MiB are read")
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ManifestInvalid(f"the config blob's digest {digest[:80]!r} is not sha256")
        content = await self._blob_bounded(repo, digest, min(size, MAX_CONFIG_BYTES))
        if hashlib.sha256(content).hexdigest() != digest.removeprefix("sha256:"):
            raise ManifestInvalid(f"the config blob {digest} is not the one its digest names")
        image = _key(parse_document(content, "image config"), "config")
        labels = _key(image, "labels") if isinstance(image, dict) else None
        if not isinstance(labels, dict):
            return {}
        kept = {k: v for k, v in labels.items() if k.startswith("props.") and isinstance(v, str)}
        if (big := next((k for k, v in kept.items()
                         if len(v.encode()) > MAX_LABEL_BYTES), None)) is not None:
            raise ManifestInvalid(f"label {big[:80]} is over {MAX_LABEL_BYTES // 1024} KiB")
        return kept

    async def _blob_bounded(self, repo: str, digest: str, limit: int) -> bytes:
        """The blob `digest` of `repo`, refused once it is over `limit` bytes (from its
        header, or as it streams: never more than `limit` bytes held)."""
        url = f"{self.upstream}/v2/{repo}/blobs/{digest}"
        async with self.client.stream("GET", url, follow_redirects=True) as blob:
            if blob.status_code != 200:
                raise ManifestInvalid(f"the config blob {digest} is not in the registry "
                                      f"(upstream said {blob.status_code})")
            declared = blob.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise ManifestInvalid(f"the config blob {digest} is larger than its manifest "
                                      f"says ({declared} > {limit} bytes)")
            content = bytearray()
            async for chunk in blob.aiter_bytes():
                content += chunk
                if len(content) > limit:
                    raise ManifestInvalid(f"the config blob {digest} is larger than its "
                                          f"manifest says (over {limit} bytes)")
        return bytes(content)

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
