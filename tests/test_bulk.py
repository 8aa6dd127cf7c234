"""Helpers of bulk work: derived ids equal to the standard library's, writes in order."""

from __future__ import annotations

import hashlib
import random
import string
import uuid

import anyio
import anyio.lowlevel
import pytest

from props.core.log import bulk

NAMESPACE = uuid.UUID("0b8f6f57-3c8a-4f64-8d57-2b3f3f1a9e21")


def uuid5(namespace: uuid.UUID, name: str) -> uuid.UUID:
    return bulk.uuid_from_hash(hashlib.sha1(namespace.bytes + name.encode()).digest(), 5)


def test_uuids_from_hashes_equal_the_standard_librarys() -> None:
    # Derived ids must not change under a stored log: a different id appends an event again.
    rng = random.Random(5)
    alphabet = string.printable + "éß漢字🙂"
    for _ in range(2000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        fast, slow = uuid5(NAMESPACE, name), uuid.uuid5(NAMESPACE, name)
        assert fast == slow and hash(fast) == hash(slow) and str(fast) == str(slow)
        assert isinstance(fast, uuid.UUID) and fast.version == 5
    v8 = bulk.uuid_from_hash(hashlib.sha256(b"x").digest(), 8)
    assert v8.version == 8 and v8.variant == uuid.RFC_4122
    # Negative control: the comparison can fail.
    assert uuid5(uuid.uuid4(), "x") != uuid.uuid5(NAMESPACE, "x")


async def test_writes_happen_one_at_a_time_in_order() -> None:
    log: list[str] = []
    done: list[int] = []

    async def write(n: int) -> int:
        log.append(f"start {n}")
        await anyio.sleep(0.01 * (3 - n % 3))  # later writes are quicker: order must hold
        log.append(f"end {n}")
        return n

    async with bulk.WriteAhead(done.append) as ahead:
        for n in range(6):
            await ahead.submit(write(n))
            await anyio.lowlevel.checkpoint()  # the caller's own work, meanwhile the write runs
        await ahead.settle()
    assert done == list(range(6))
    assert log == [f"{what} {n}" for n in range(6) for what in ("start", "end")]


async def test_a_failed_write_is_raised_by_the_next_call() -> None:
    async def fail() -> None:
        raise RuntimeError("disk full")

    async with bulk.WriteAhead[None]() as ahead:
        await ahead.submit(fail())
        with pytest.raises(RuntimeError, match="disk full"):
            await ahead.settle()


async def test_the_write_in_flight_lands_when_the_caller_fails() -> None:
    landed: list[int] = []

    async def write() -> int:
        await anyio.sleep(0.05)
        return 1

    with pytest.raises(KeyboardInterrupt):
        async with bulk.WriteAhead(landed.append) as ahead:
            await ahead.submit(write())
            raise KeyboardInterrupt
    assert landed == [1]


async def test_a_failed_write_leaves_the_block_as_itself() -> None:
    """Raised as it came, not inside the task group's exception group: callers catch the
    log's own errors by type (a group would slip past `except AppendConflict`)."""
    async def fail() -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        async with bulk.WriteAhead[None]() as ahead:
            await ahead.submit(fail())


async def test_a_write_is_submitted_only_inside_its_block() -> None:
    """No write runs in a task nobody waits for: outside `async with` there is no group."""
    async def write() -> None:
        return None

    ahead: bulk.WriteAhead[None] = bulk.WriteAhead()
    pending = write()
    with pytest.raises(RuntimeError, match="outside"):
        await ahead.submit(pending)
    pending.close()
