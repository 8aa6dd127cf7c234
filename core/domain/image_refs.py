"""Image references as the operator types them, checked where they enter (`props definitions
build --push`, `--base`): the grammar of the distribution reference that Docker and its
registry read (github.com/distribution/reference), bounded, so a typo is refused in one line
before anything is built, pushed or recorded.

`REGISTRY/REPOSITORY:TAG` for a push: the registry must be named (a first part with a dot or
a port, or `localhost`): without one Docker would send the image to Docker Hub, which a
cluster on a private network never pulls from. A digest is never given to a push: it is
what the registry answers.
"""

from __future__ import annotations

import dataclasses
import re

MAX_NAME = 255  # the reference's bound on REGISTRY/REPOSITORY
# The distribution spec's grammar of a repository's path components and of a tag (the
# registry proxy checks its paths with the same: props.tools.http.registry).
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = rf"{PATH_COMPONENT}(?:/{PATH_COMPONENT})*"
TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_HOST_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]{{1,5}})?"
_DIGEST = r"sha256:[0-9a-f]{64}"
_REFERENCE = re.compile(
    rf"(?:(?P<registry>{_HOST})/)?(?P<repository>{REPOSITORY})"
    rf"(?::(?P<tag>{TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)


@dataclasses.dataclass(frozen=True)
class Reference:
    registry: str | None  # None: Docker's default (Docker Hub), or an image only local
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + \
            (f"@{self.digest}" if self.digest else "")

    def pinned(self, digest: str) -> str:
        """The reference every node pulls the same bytes by: the name and the digest."""
        return f"{self.name}@{digest}"


def parse(text: str) -> Reference:
    """`text` as an image reference, or ValueError saying what is wrong with it."""
    shown = text[:80] + ("..." if len(text) > 80 else "")
    match = _REFERENCE.fullmatch(text)
    if match is None:
        raise ValueError(f"{shown!r} is not an image reference: REGISTRY/REPOSITORY:TAG, "
                         f"the repository in lower case letters, digits and . _ - / "
                         f"(e.g. localhost:5000/critics/mine:1)")
    first = match["registry"]
    if first is not None and not ("." in first or ":" in first or first == "localhost"):
        # Docker reads `team/critic` as a repository of Docker Hub, not a registry `team`.
        if not re.fullmatch(PATH_COMPONENT, first):
            raise ValueError(f"{shown!r}: a registry's name has a dot or a port "
                             f"(registry.example:5000), or is localhost")
        registry, repository = None, f"{first}/{match['repository']}"
    else:
        registry, repository = first, match["repository"]
    port = registry.rpartition(":")[2] if registry and ":" in registry else None
    if port is not None and not 0 < int(port) < 65536:
        raise ValueError(f"{shown!r}: the registry's port {port} is not from 1 to 65535")
    ref = Reference(registry, repository, match["tag"], match["digest"])
    if len(ref.name) > MAX_NAME:
        raise ValueError(f"{shown!r} is longer than {MAX_NAME} characters before its tag")
    return ref


def push_target(text: str) -> Reference:
    """Where `props definitions build` pushes: a named registry and a tag, no digest."""
    ref = parse(text)
    if ref.digest is not None:
        raise ValueError(f"{text[:80]!r} names a digest: a push names a tag "
                         f"(REGISTRY/REPOSITORY:TAG), and the registry answers the digest")
    if ref.registry is None:
        raise ValueError(f"{text[:80]!r} names no registry: REGISTRY/REPOSITORY:TAG, the "
                         f"registry with a dot or a port, or localhost (localhost:5000/"
                         f"critics/mine:1), the one every node pulls from")
    if ref.tag is None:
        raise ValueError(f"{text[:80]!r} names no tag: REGISTRY/REPOSITORY:TAG")
    return ref
