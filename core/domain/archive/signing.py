"""Ed25519 keys that sign export files, and the check of a signature against trusted keys.

An export's manifest holds a sha256 of every line before it and the head of the hash chain
across its events, so a signature over the manifest signs the whole file. Integrity alone
proves nothing about who wrote a file: anybody can write an export from scratch with a chain
that verifies. A signature by a key the importer trusts does.

Keys live in a folder (`$PROPS_HOME/keys` by default): `NAME.key` (the private key, PKCS#8
PEM, readable by its owner only) and `NAME.pub` (the public key, PEM). A trusted-keys folder
holds `*.pub` files only. A key is known by its fingerprint: the first 16 hex characters of
the sha256 of its raw public bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from props.core.log import errors

ALGORITHM = "ed25519"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class SignatureError(errors.PropsError):
    """The export's signature is missing, malformed, wrong, or by a key not trusted;
    nothing was written."""

    exit_code = 65


@dataclasses.dataclass(frozen=True)
class PublicKey:
    name: str
    fingerprint: str
    key: Ed25519PublicKey


def fingerprint(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def default_dir(home: Path) -> Path:
    return home / "keys"


def create(directory: Path, name: str) -> PublicKey:
    """Make a new key pair `NAME.key` / `NAME.pub` in `directory`; never overwrite one."""
    if not _NAME.match(name):
        raise errors.ConfigurationError(f"key name {name!r}: letters, digits, '.', '_' and "
                                        f"'-' only, at most 64")
    directory.mkdir(parents=True, exist_ok=True)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    try:
        fd = os.open(directory / f"{name}.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise errors.ConfigurationError(f"a key named {name} exists in {directory} already"
                                        ) from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public = private.public_key()
    (directory / f"{name}.pub").write_bytes(public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return PublicKey(name, fingerprint(public), public)


def load_public(path: Path) -> PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (ValueError, OSError) as exc:
        raise errors.ConfigurationError(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise errors.ConfigurationError(f"{path}: not an Ed25519 public key")
    return PublicKey(path.stem, fingerprint(key), key)


def public_keys(directory: Path) -> list[PublicKey]:
    """Every `*.pub` in `directory`, by name."""
    if not directory.is_dir():
        raise errors.ConfigurationError(f"{directory} is not a folder of public keys")
    return [load_public(p) for p in sorted(directory.glob("*.pub"))]


def load_private(spec: str, directory: Path) -> Ed25519PrivateKey:
    """A private key by name (in `directory`) or by the path of its `.key` file."""
    path = Path(spec) if ("/" in spec or spec.endswith(".key")) else directory / f"{spec}.key"
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise errors.ConfigurationError(f"no private key {path} (make one with `props keys "
                                        f"create NAME`)") from None
    except (ValueError, TypeError, OSError) as exc:
        raise errors.ConfigurationError(f"{path}: not a PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise errors.ConfigurationError(f"{path}: not an Ed25519 private key")
    return key


def signed_bytes(manifest: dict[str, Any]) -> bytes:
    """What a signature covers: the manifest without its signature, keys sorted."""
    return orjson.dumps({k: v for k, v in manifest.items() if k != "signature"},
                        option=orjson.OPT_SORT_KEYS)


def sign(manifest: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, str]:
    public = key.public_key()
    return {"algorithm": ALGORITHM, "key": fingerprint(public),
            "public_key": base64.b64encode(public.public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw)).decode(),
            "value": base64.b64encode(key.sign(signed_bytes(manifest))).decode()}


def signer(manifest: dict[str, Any], trusted: list[PublicKey] | None) -> str | None:
    """The fingerprint of the key that signed `manifest` (None: unsigned), checked: a
    signature that does not verify is refused, and with `trusted` given, so is an unsigned
    file or one signed by a key not in it."""
    signature = manifest.get("signature")
    if signature is None:
        if trusted is not None:
            raise SignatureError("the file is not signed, and only files signed by a trusted "
                                 "key are accepted (--trusted-keys); nothing was written")
        return None
    try:
        if not isinstance(signature, dict) or signature.get("algorithm") != ALGORITHM:
            raise ValueError("not an ed25519 signature")
        public = Ed25519PublicKey.from_public_bytes(
            base64.b64decode(signature["public_key"], validate=True))
        public.verify(base64.b64decode(signature["value"], validate=True),
                      signed_bytes(manifest))
    except (InvalidSignature, ValueError, KeyError, TypeError) as exc:
        raise SignatureError(f"the file's signature does not verify ({exc or 'invalid'}): "
                             f"it was changed after signing; nothing was written") from None
    found = fingerprint(public)
    if trusted is not None and found not in {k.fingerprint for k in trusted}:
        raise SignatureError(f"the file is signed by key {found}, which is not among the "
                             f"trusted keys ({len(trusted)}); nothing was written")
    return found
