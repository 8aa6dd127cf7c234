"""`props bench log`: the event store against the raw PostgreSQL operations under it.

Same database, same row shape (~300 B data, ~100 B metadata), same indexes: the raw table is
`LIKE props.events INCLUDING ALL` (no triggers) with the unique indexes of the guarantees
props keeps beside its partitioned log (see benchmarks/raw.py), so each ratio is exactly the
cost props adds.
Raw and props blocks alternate, so drift of a noisy machine hits both sides alike.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import asyncpg
import orjson

from props.core.domain import catalog, streams
from props.core.domain.store import open_store
from props.core.log import database
from props.core.log.bulk import gc_paused
from props.core.log.checkpoints import START
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.tools.checks.benchmarks import peers as peer_stores
from props.tools.checks.benchmarks.raw import raw_events_table
from props.tools.checks.benchmarks.report import Check, Report
from props.tools.command_line.render import Console

COLUMNS = ["event_id", "stream_id", "stream_version", "type", "schema_version", "data",
           "metadata"]
RAW_INSERT = (
    "INSERT INTO bench_raw.events (event_id, stream_id, stream_version, type, schema_version, "
    "data, metadata) VALUES ($1, $2, $3, $4, $5, $6, $7)"
)
RAW_INSERT_NOTIFY = (
    f"WITH ins AS ({RAW_INSERT} RETURNING 1) SELECT pg_notify('bench_raw', '') FROM ins"
)
RAW_KEYSET = (
    "SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version, "
    "data, metadata, recorded_at FROM props.events WHERE global_position > $1 "
    "ORDER BY global_position LIMIT $2"
)


async def raw_read_all(pool: asyncpg.Pool,
                       typed: Mapping[tuple[str, int], Callable[[str], object]] | None = None,
                       ) -> tuple[int, float]:
    """The raw baseline of a read: keyset pages of the events, JSON decoded with orjson.
    With `typed` (validators by type and version, e.g. the registry's), each event of those
    types has its data validated into its model instead, and nothing else is decoded: the
    floor of any typed read (a page's models are kept until the next page, as any read that
    returns them must, with the cyclic GC paused for the page as props pauses it).
    Returns (events, seconds)."""
    t0 = time.perf_counter()
    n, last = 0, 0
    loads = orjson.loads
    while True:
        page = await pool.fetch(RAW_KEYSET, last, 1000)
        if not page:
            return n, time.perf_counter() - t0
        if typed is None:
            for r in page:
                loads(r[7])
                loads(r[8])
        else:  # the page's events kept, as a read returns them, the GC paused as props does
            with gc_paused():
                events = [validate(r[7]) for r in page
                          if (validate := typed.get((r[5], r[6]))) is not None]
            del events
        n += len(page)
        last = page[-1][0]


def _validate_loaded(validate: Callable[[object], object], data: str) -> object:
    return validate(orjson.loads(data))


def multirow_insert(rows: int) -> str:
    values = ", ".join(
        "(" + ", ".join(f"${r * 7 + c + 1}" for c in range(7)) + ")" for r in range(rows)
    )
    return (f"INSERT INTO bench_raw.events (event_id, stream_id, stream_version, type, "
            f"schema_version, data, metadata) VALUES {values}")


class Rows:
    """Events of the benchmark's row shape, with their exact stored JSON."""

    def __init__(self) -> None:
        probe = self._event(uuid.UUID(int=0), "")
        pad = max(0, 300 - len(probe.model_dump_json()))
        self.rationale = "r" * pad

    def _event(self, run: uuid.UUID, rationale: str) -> catalog.IssueReported:
        return catalog.IssueReported(
            run_id=run, issue_id="issue-1", severity="high", rationale=rationale,
            locations=[catalog.Location(file="src/parser/tokens.py",
                                        ranges=[catalog.LineRange(start=120, end=134)])],
        )

    def new(self, run: uuid.UUID) -> NewEvent:
        meta = {"correlation_id": str(run), "causation_id": str(uuid.uuid4()), "actor": "bench"}
        return NewEvent(self._event(run, self.rationale), uuid.uuid4(), meta)

    @staticmethod
    def raw(stream: str, version: int, new: NewEvent) -> tuple[Any, ...]:
        return (new.event_id, stream, version, new.event.type_name, new.event.schema_version,
                new.event.model_dump_json(), orjson.dumps(new.metadata).decode())


Block = Callable[[], Awaitable[tuple[int, float]]]


async def _alternate(rounds: int, raw: Block, ours: Block) -> tuple[float, float]:
    """Run raw and props blocks alternately; return rows/s of each over all rounds.

    Each block times itself (rows, seconds), so preparing its input is not counted.
    """
    rates = await alternate_sides(rounds, {"raw": raw, "ours": ours})
    return rates["raw"], rates["ours"]


async def alternate_sides(rounds: int, sides: Mapping[str, Block]) -> dict[str, float]:
    """Run one block of each side per round, the order rotated every round (so a drift of
    the machine falls on every side alike, and each side takes each place in turn); return
    each side's rows/s over all rounds.

    Each block starts after a full collection of Python's cyclic GC, off the clock: a full
    collection (37-83 ms in a reading process) otherwise lands in whichever block crosses its
    threshold, about one read in ten, on one side only (measured: issue 56)."""
    spent = dict.fromkeys(sides, 0.0)
    done = dict.fromkeys(sides, 0)
    names = list(sides)
    for i in range(rounds):
        shift = i % len(names)
        for side in names[shift:] + names[:shift]:
            gc.collect()
            rows, seconds = await sides[side]()
            done[side] += rows
            spent[side] += seconds
    return {side: done[side] / spent[side] for side in names}


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(dsn: str, quick: bool, console: Console, *, peers: bool = False) -> Report:
    """The log suite; with `peers`, also the same appends and reads through the peers
    (benchmarks/peers.py) in the same run, as ratios of props to each."""
    sizes = (dict(single=600, batches=60, reads=3, wakes=500) if quick
             else dict(single=2000, batches=150, reads=5, wakes=2000))
    report = Report("log", quick)
    rows = Rows()
    async with open_store(dsn, max_connections=4) as store:
        pool = store.pool
        await pool.execute("CREATE SCHEMA bench_raw; " + raw_events_table("bench_raw.events"))
        version = await pool.fetchval("SHOW server_version")
        report.figures["server_version"] = version
        report.figures["data_bytes"] = len(rows.new(uuid.uuid4()).event.model_dump_json())

        # -- 1. one event per transaction ----------------------------------------------------
        console.print("append, one event per transaction ...")
        block = max(10, sizes["single"] // 10)
        raw_state = {"i": 0}
        raw_run = uuid.uuid4()
        our_run = uuid.uuid4()

        # Events are built before the clock starts; turning them into JSON is timed on both
        # sides (raw SQL needs the JSON text too).
        async def raw_single() -> tuple[int, float]:
            events = [rows.new(raw_run) for _ in range(block)]
            t0 = time.perf_counter()
            for new in events:
                i = raw_state["i"] = raw_state["i"] + 1
                await pool.execute(RAW_INSERT, *rows.raw(streams.run(raw_run), i, new))
            return block, time.perf_counter() - t0

        async def our_single() -> tuple[int, float]:
            events = [rows.new(our_run) for _ in range(block)]
            t0 = time.perf_counter()
            for new in events:
                await store.append(streams.run(our_run), [new])
            return block, time.perf_counter() - t0

        raw_rate, our_rate = await _alternate(10, raw_single, our_single)
        report.figures["append_single"] = {"props_per_s": round(our_rate),
                                           "raw_insert_per_s": round(raw_rate)}
        report.checks.append(Check("append_single_vs_insert", our_rate / raw_rate, ">=", 0.8))

        # -- 2. 100 events per call ------------------------------------------------------------
        console.print("append, 100 events per call ...")
        multi = multirow_insert(100)
        per_round = max(1, sizes["batches"] // 10)

        def batch(run: uuid.UUID) -> list[NewEvent]:
            return [rows.new(run) for _ in range(100)]

        def batches() -> list[tuple[uuid.UUID, list[NewEvent]]]:
            return [(run, batch(run)) for run in (uuid.uuid4() for _ in range(per_round))]

        async def raw_multirow() -> tuple[int, float]:
            todo = batches()
            t0 = time.perf_counter()
            for run, events in todo:
                stream = streams.run(run)
                args = [v for n, e in enumerate(events, 1) for v in rows.raw(stream, n, e)]
                await pool.execute(multi, *args)
            return per_round * 100, time.perf_counter() - t0

        async def raw_copy() -> tuple[int, float]:
            todo = batches()
            t0 = time.perf_counter()
            for run, events in todo:
                records = [rows.raw(streams.run(run), n, e) for n, e in enumerate(events, 1)]
                await pool.copy_records_to_table(
                    "events", schema_name="bench_raw", columns=COLUMNS, records=records
                )
            return per_round * 100, time.perf_counter() - t0

        async def our_batch() -> tuple[int, float]:
            todo = batches()
            t0 = time.perf_counter()
            for run, events in todo:
                await store.append(streams.run(run), events, expected_version=0)
            return per_round * 100, time.perf_counter() - t0

        raw_rate, our_rate = await _alternate(10, raw_multirow, our_batch)
        copy_rate, our_rate2 = await _alternate(4, raw_copy, our_batch)
        report.figures["append_batch100"] = {
            "props_per_s": round(our_rate), "raw_multirow_insert_per_s": round(raw_rate),
            "raw_copy_per_s": round(copy_rate),
            "ratio_to_copy": round(our_rate2 / copy_rate, 3),
        }
        report.checks.append(Check("append_batch100_vs_insert", our_rate / raw_rate, ">=", 1.0))

        # -- 3. read everything through the fence ---------------------------------------------
        total = await store.pool.fetchval("SELECT count(*) FROM props.events")
        console.print(f"read all {total:,} events ...")

        async def raw_read() -> tuple[int, float]:
            return await raw_read_all(pool)

        async def our_read() -> tuple[int, float]:
            t0 = time.perf_counter()
            n = 0
            async for b in store.iter_all(START, batch_size=1000):
                n += len(b)
            return n, time.perf_counter() - t0

        # pydantic's two fast paths from the stored text: its own JSON parser, or orjson's
        # dicts validated (which is faster depends on the shapes; the floor takes the faster).
        from_json = store.registry.current_validators
        from_dicts = {key: functools.partial(
            _validate_loaded, store.registry.require(key[0]).__pydantic_validator__.validate_python)
            for key in from_json}

        async def floor_json() -> tuple[int, float]:
            return await raw_read_all(pool, typed=from_json)

        async def floor_dicts() -> tuple[int, float]:
            return await raw_read_all(pool, typed=from_dicts)

        rounds = sizes["reads"] * 2
        raw_rate, our_rate = await _alternate(rounds, raw_read, our_read)
        json_rate, dicts_rate = await _alternate(rounds, floor_json, floor_dicts)
        floor_rate = max(json_rate, dicts_rate)
        # The floor itself measured beside props in one alternation, for the ratio.
        floor = floor_json if json_rate >= dicts_rate else floor_dicts
        floor_rate2, our_rate2 = await _alternate(rounds, floor, our_read)
        report.figures["read_all"] = {
            "events": total, "props_typed_per_s": round(our_rate),
            "raw_keyset_orjson_per_s": round(raw_rate),
            "raw_keyset_pydantic_json_per_s": round(json_rate),
            "raw_keyset_pydantic_dicts_per_s": round(dicts_rate),
            "typed_floor": "validate_json" if json_rate >= dicts_rate else "orjson+validate",
            "read_all_vs_raw": round(our_rate / raw_rate, 3),  # reported: no target
            "pydantic_floor_ratio": round(floor_rate / raw_rate, 3),
        }
        report.checks.append(Check("read_all_vs_typed_floor", our_rate2 / floor_rate2, ">=",
                                   0.9))

        # -- 4. wake-up latency ------------------------------------------------------------------
        console.print("wake-up latency ...")
        report.figures["wake"], ratio = await _wake_latency(store, rows, sizes["wakes"])
        report.checks.append(Check("wake_p99_vs_notify", ratio, "<=", 2.0))

        # -- 5. the peers, side by side ------------------------------------------------------
        if peers:
            console.print("the peers side by side: eventsourcing, Message DB ...")
            await _side_by_side(store, rows, sizes, report)
    return report


PEERS: dict[str, Callable[[str], contextlib.AbstractAsyncContextManager[peer_stores.Peer]]] = {
    "eventsourcing": peer_stores.eventsourcing_peer, "message_db": peer_stores.message_db_peer}
# What each peer is compared on: props' rate over the peer's, in one alternation (>= 1: ahead).
PEER_WORKLOADS = ("append_single", "append_batch100", "read_all")


async def _side_by_side(store: EventStore, rows: Rows, sizes: Mapping[str, int],
                        report: Report) -> None:
    """Props and every peer that installs, alternating block by block on the same workload:
    one event per transaction, 100 per transaction (a new stream each), then a read of
    everything each holds. props' read is its typed read (events validated into their
    models); a peer's read decodes its JSON with orjson and builds nothing, so the read ratio
    leans towards the peers. A peer that cannot run gives NORUN checks, with its reason."""
    async with contextlib.AsyncExitStack() as stack:
        opened: dict[str, peer_stores.Peer] = {}
        reasons: dict[str, str] = {}
        for name, opener in PEERS.items():
            try:
                opened[name] = await stack.enter_async_context(opener(store.dsn))
            except peer_stores.Unavailable as e:
                reasons[name] = str(e)
        block = max(10, sizes["single"] // 10)
        per_round = max(1, sizes["batches"] // 10)

        def fresh(count: int) -> tuple[str, list[NewEvent]]:
            run = uuid.uuid4()
            return streams.run(run), [rows.new(run) for _ in range(count)]

        def as_peer(stream: str, events: list[NewEvent]) -> list[peer_stores.Event]:
            return [(e.event_id, stream, e.event.type_name, e.event.model_dump_json(),
                     orjson.dumps(e.metadata).decode()) for e in events]

        def single(peer: peer_stores.Peer | None) -> Block:
            async def go() -> tuple[int, float]:
                stream, events = fresh(block)
                if peer is None:
                    t0 = time.perf_counter()
                    for new in events:
                        await store.append(stream, [new])
                else:  # JSON made inside the clock, as props makes it inside append
                    t0 = time.perf_counter()
                    await peer.append_each(as_peer(stream, events))
                return block, time.perf_counter() - t0
            return go

        def batched(peer: peer_stores.Peer | None) -> Block:
            async def go() -> tuple[int, float]:
                todo = [fresh(100) for _ in range(per_round)]
                t0 = time.perf_counter()
                for stream, events in todo:
                    if peer is None:
                        await store.append(stream, events, expected_version=0)
                    else:
                        await peer.append_batch(as_peer(stream, events))
                return per_round * 100, time.perf_counter() - t0
            return go

        def read(peer: peer_stores.Peer | None) -> Block:
            async def go() -> tuple[int, float]:
                t0 = time.perf_counter()
                if peer is None:
                    n = 0
                    async for b in store.iter_all(START, batch_size=1000):
                        n += len(b)
                else:
                    n = await peer.read_all()
                return n, time.perf_counter() - t0
            return go

        figures: dict[str, Any] = {}
        sides = {"props": None, **opened}
        for workload, make, rounds in (("append_single", single, 10),
                                       ("append_batch100", batched, 10),
                                       ("read_all", read, sizes["reads"] * 2)):
            if not opened:
                break
            rates = await alternate_sides(rounds, {k: make(p) for k, p in sides.items()})
            figures.setdefault("props", {})[f"{workload}_per_s"] = round(rates["props"])
            for name in opened:
                figures.setdefault(name, {})[f"{workload}_per_s"] = round(rates[name])
                figures[name][f"props_vs_{workload}"] = round(rates["props"] / rates[name], 3)
        for name, peer in opened.items():
            figures[name]["version"] = peer.version
        for name, reason in reasons.items():
            figures[name] = {"norun": reason}
        report.figures["peers"] = figures
        for name in PEERS:
            for workload in PEER_WORKLOADS:
                value = figures[name].get(f"props_vs_{workload}")
                report.checks.append(Check(f"{workload}_vs_{name}", value, ">=", 1.0,
                                           reason=reasons.get(name)))


async def _wake_latency(store: EventStore, rows: Rows, samples: int) -> tuple[dict[str, Any],
                                                                                float]:
    """Append commit -> subscriber delivery, against a raw NOTIFY round trip.

    props: the clock starts when `append` returns (the commit is acknowledged) and stops when
    the subscription yields the event: the notification, the fence read it triggers, and
    decoding. Raw: the clock starts before a bare `NOTIFY` and stops in the LISTEN callback
    on another connection. Reported alongside: props from before the append call (the
    append's own commit included) and a raw INSERT + pg_notify from before its statement.
    """
    listener = await database.connect(store.dsn)
    sender = await database.connect(store.dsn)
    arrived: dict[str, anyio.Event] = {}
    stamps: dict[str, float] = {}

    def on_raw(_c: object, _pid: int, channel: str, _payload: object) -> None:
        stamps[channel] = time.perf_counter()
        arrived[channel].set()

    await listener.add_listener("bench_raw", on_raw)
    await listener.add_listener("bench_pure", on_raw)
    ours: list[float] = []
    ours_end_to_end: list[float] = []
    delivered_before_return = 0
    raw: list[float] = []
    pure: list[float] = []
    head = (await store.fence_status()).last_visible or START
    run = uuid.uuid4()
    try:
        async with store.subscribe(head, category="run") as sub, anyio.create_task_group() as tg:
            expected: dict[uuid.UUID, anyio.Event] = {}
            got: dict[uuid.UUID, float] = {}

            async def consume() -> None:
                async for batch in sub:
                    for rec in batch:
                        if rec.event_id in expected:
                            got[rec.event_id] = time.perf_counter()
                            expected[rec.event_id].set()

            tg.start_soon(consume, name="bench-wake-consumer")
            await anyio.sleep(0.2)
            for i in range(samples):
                new = rows.new(run)
                expected[new.event_id] = anyio.Event()
                t_call = time.perf_counter()
                await store.append(streams.run(run), [new])
                t_commit = time.perf_counter()
                with anyio.fail_after(10):
                    await expected[new.event_id].wait()
                if got[new.event_id] < t_commit:
                    delivered_before_return += 1
                ours.append(max(0.0, got[new.event_id] - t_commit))
                ours_end_to_end.append(got[new.event_id] - t_call)

                arrived["bench_pure"] = anyio.Event()
                t0 = time.perf_counter()
                await sender.execute("NOTIFY bench_pure")
                with anyio.fail_after(10):
                    await arrived["bench_pure"].wait()
                pure.append(stamps["bench_pure"] - t0)

                arrived["bench_raw"] = anyio.Event()
                t0 = time.perf_counter()
                await sender.execute(RAW_INSERT_NOTIFY, *rows.raw("run-raw", i + 1, new))
                with anyio.fail_after(10):
                    await arrived["bench_raw"].wait()
                raw.append(stamps["bench_raw"] - t0)
                await anyio.sleep(0.002)
            tg.cancel_scope.cancel()
    finally:
        await listener.close()
        await sender.close()

    def ms(xs: list[float]) -> dict[str, float]:
        return {"p50_ms": round(statistics.median(xs) * 1000, 3),
                "p99_ms": round(_pct(xs, 0.99) * 1000, 3)}

    figures = {"samples": samples, "props_commit_to_delivery": ms(ours),
               "raw_notify_round_trip": ms(pure),
               "props_append_call_to_delivery": ms(ours_end_to_end),
               "raw_insert_notify_to_callback": ms(raw),
               "delivered_before_append_returned": delivered_before_return}
    return figures, _pct(ours, 0.99) / _pct(pure, 0.99)
