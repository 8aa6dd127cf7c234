"""Content-addressed blobs: sha256 of the raw bytes as key, zstd-compressed bytes as value.

Compression and hashing of large content run in a worker thread, never on the event loop.
A blob read back is verified against its hash, so a corrupted row is an error, not data.
"""

from __future__ import annotations

import hashlib

import anyio.to_thread
import asyncpg
import zstandard

from props.core.log import database, errors
from props.schema import queries

_Q = queries.load("events")
_INLINE_LIMIT = 64 * 1024  # below this, threading costs more than it saves
_LEVEL = 3


def _pack(data: bytes) -> tuple[bytes, str, bytes]:
    digest = hashlib.sha256(data).digest()
    packed = zstandard.ZstdCompressor(level=_LEVEL).compress(data)
    if len(packed) >= len(data):  # incompressible: keep the raw bytes
        return digest, "none", data
    return digest, "zstd", packed


def _unpack(sha_hex: str, size: int, compression: str, content: bytes) -> bytes:
    if compression == "zstd":
        try:
            data = zstandard.ZstdDecompressor().decompress(content, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise errors.CorruptBlob(f"blob {sha_hex} does not decompress: {exc}") from exc
    else:
        data = content
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha_hex:
        raise errors.CorruptBlob(
            f"blob {sha_hex} does not match its hash: the stored row is corrupt"
        )
    return data


def _digest(sha_hex: str) -> bytes:
    try:
        digest = bytes.fromhex(sha_hex)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise errors.BlobNotFound(f"{sha_hex!r} is not a sha256 (64 hex digits)")
    return digest


def packed(data: bytes) -> tuple[bytes, int, str, bytes]:
    """A blob row (sha256, size, compression, content), for bulk writers."""
    digest, compression, content = _pack(data)
    return digest, len(data), compression, content


async def put(conn: asyncpg.Pool | database.Connection, data: bytes) -> str:
    """Store `data` once; return its sha256 (hex). Storing the same bytes again is a no-op."""
    if len(data) > _INLINE_LIMIT:
        digest, compression, packed = await anyio.to_thread.run_sync(_pack, data)
    else:
        digest, compression, packed = _pack(data)
    await conn.execute(_Q["put_blob"], digest, len(data), compression, packed)
    return digest.hex()


async def _unpacked(sha_hex: str, size: int, compression: str, content: bytes) -> bytes:
    """A stored blob's bytes, verified; large ones are decompressed off the event loop."""
    if size > _INLINE_LIMIT:
        result: bytes = await anyio.to_thread.run_sync(_unpack, sha_hex, size, compression,
                                                       content)
        return result
    return _unpack(sha_hex, size, compression, content)


async def get_many(conn: asyncpg.Pool | database.Connection,
                   sha_hexes: list[str]) -> dict[str, bytes]:
    """The blobs stored under any of `sha_hexes` (one query), each verified; the hashes with
    no blob are simply absent from the result."""
    rows = await conn.fetch(_Q["get_blobs"], [_digest(h) for h in sha_hexes])
    found: dict[str, bytes] = {}
    for row in rows:
        sha_hex = bytes(row["sha256"]).hex()
        found[sha_hex] = await _unpacked(sha_hex, row["size"], row["compression"],
                                         row["content"])
    return found


async def get(conn: asyncpg.Pool | database.Connection, sha_hex: str) -> bytes:
    """The bytes stored under `sha_hex`, verified against the hash."""
    row = await conn.fetchrow(_Q["get_blob"], _digest(sha_hex))
    if row is None:
        raise errors.BlobNotFound(f"no blob {sha_hex} in this database")
    return await _unpacked(sha_hex, row["size"], row["compression"], row["content"])
