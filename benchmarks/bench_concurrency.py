"""Readers during a compaction and a push's prune (issue 16, item 1 and its benchmark).

A node dataset of >= 3,000 small files (both tables; `quick`: 400) is compacted by `gpuaudit compact` in a
separate process while this process reads it in a loop, as `gpuaudit sql` does: open the dataset (locked
down), count both views, close; plus one reader kept open from before the compaction, queried again each
round. Then the node is pushed to a collection directory, compacted, and pushed again (the prune of the
superseded files) while the loop reads the collection directory. Every read's row counts are compared with
the truth (the rows written): exact every time is the target. Side by side: a read's latency with nothing
running vs during the compaction.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

COUNT = "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM processes)"
MIN_READS = 20
FRESH_THREADS = 2  # fresh `sql`-style readers at once
HELD_READERS = 2  # readers opened before the writer starts, each queried in a loop


def _fig(figure: str, value: Any, unit: str, baseline: str | None, baseline_value: Any, ratio: Any,
         target: str | None, met: bool | None, note: str) -> dict[str, Any]:
    return {"figure": figure, "value": value, "unit": unit, "baseline": baseline, "baseline_value": baseline_value,
            "ratio": ratio, "target": target, "met": met, "note": note}


def _build(root: Path, min_files: int) -> tuple[int, int, int]:
    """A node dataset of at least `min_files` small files, the same number in each partition (2 hosts x 2 days x
    2 tables), as an agent's flushes are. Returns (sample rows, process rows, files)."""
    import polars as pl

    from gpuaudit import schema, store
    from gpuaudit.sim import bulk as sim
    from gpuaudit.store import writer
    from gpuaudit.util.atomic import publish

    src = root.parent / f"source-{root.name}"
    sim.simulate(src, "mixed", gpus=16, days=2, interval_s=300, seed=7)
    con = store.connect()
    files = 0
    try:
        with store.open_dataset(src) as ds:
            # An agent's flushes: the telemetry tables (the simulator's allocations are no node's files).
            frames = {t: ds.query(f"SELECT * FROM {schema.VIEW_NAMES[t]}") for t in (schema.SAMPLES, schema.PROCESSES)}
        staging = store.base.staging_dir(root)
        cols = {t: ", ".join(schema.quote_ident(c.name) for c in schema.stored_columns(t)) for t in schema.TABLES}
        parts = {t: df.select("host", pl.col("date").cast(pl.String)).unique().sort("host", "date").rows()
                 for t, df in frames.items()}
        flushes = -(-min_files // sum(len(p) for p in parts.values()))
        for table, df in frames.items():
            df = df.with_columns(pl.col("date").cast(pl.String), (pl.int_range(pl.len()) % flushes).alias("_k"))
            con.register("_all", df)
            for host, date in parts[table]:
                part = store.partition_dir(root, table, host, date)
                for k in range(flushes):
                    staged = staging / f"{uuid.uuid4().hex}.parquet"
                    writer.copy_to(con, f"SELECT {cols[table]} FROM _all WHERE host = ? AND date = ? AND _k = ?",
                                   staged, [host, date, k])
                    publish(staged, part / f"agent-{k:05d}-{uuid.uuid4().hex[:8]}.parquet")
                    files += 1
            con.unregister("_all")
        return frames[schema.SAMPLES].height, frames[schema.PROCESSES].height, files
    finally:
        con.close()


def _read(root: Path) -> tuple[tuple[int, int], float, int, int]:
    """One `gpuaudit sql`-style read: ((samples, processes), seconds, files skipped, relists)."""
    from gpuaudit import store
    from gpuaudit.store import sqlquery

    t0 = time.perf_counter()
    with store.open_dataset(root, strict=True) as ds:
        table = sqlquery.run_query(ds, COUNT)
        row = [table.column(i)[0].as_py() for i in range(2)]
        return (row[0], row[1]), time.perf_counter() - t0, len(ds.skipped), ds.relists


def _loop_while(proc: subprocess.Popen[bytes], root: Path, held: list[Any], truth: tuple[int, int]
                ) -> dict[str, Any]:
    """Read `root` until `proc` exits, every count against `truth`: fresh `sql`-style reads in FRESH_THREADS
    threads and, each in a thread of its own, queries through the readers `held` (opened before `proc`)."""
    fresh: list[tuple[tuple[int, int], float, int, int]] = []
    held_counts: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def fresh_reads() -> None:
        try:
            while proc.poll() is None:
                fresh.append(_read(root))
        except BaseException as e:  # reported below: a failed read is a failed benchmark
            errors.append(e)

    def held_reads(ds: Any) -> None:
        try:
            while proc.poll() is None:
                n = ds.fetchall(COUNT)[0]
                held_counts.append((int(n[0]), int(n[1])))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=fresh_reads) for _ in range(FRESH_THREADS)]
    threads += [threading.Thread(target=held_reads, args=(ds,)) for ds in held]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    seen = [c for c, *_ in fresh] + held_counts
    return {"reads": len(seen), "fresh": len(fresh), "held": len(held_counts),
            "exact": sum(c == truth for c in seen), "skipped": sum(s for _, _, s, _ in fresh),
            "relists": sum(r for *_, r in fresh) + sum(ds.relists for ds in held),
            "min_samples": min((c[0] for c in seen), default=0), "latency": [t for _, t, _, _ in fresh]}


def _compaction(root: Path, truth: tuple[int, int]) -> dict[str, Any]:
    """`gpuaudit compact` of `root` while it is read; also how many replaced files it kept for the readers."""
    from gpuaudit import store

    held = [store.open_dataset(root) for _ in range(HELD_READERS)]  # opened before the compaction
    t0 = time.perf_counter()
    proc = _cli("compact", "--data", str(root))
    try:
        out = _loop_while(proc, root, held, truth)
    finally:
        for ds in held:
            ds.close()
    out["seconds"] = time.perf_counter() - t0
    assert proc.wait() == 0, proc.stderr.read().decode() if proc.stderr else ""
    out["kept"] = len(list(root.glob("gpu_*/*/*/agent-*.parquet")))
    return out


MAX_ROUNDS = 8  # compactions of fresh copies of the same files, until MIN_READS reads were made during them


def _rounds(root: Path, pristine: Path, truth: tuple[int, int], *, prepared: bool) -> dict[str, Any]:
    """_compaction of `root`, then of fresh copies of `pristine` (the same files), until MIN_READS reads were
    made during compactions: one compaction of 3,000 files lasts a few seconds, a fresh read of them as long."""
    from gpuaudit.store import readers

    total: dict[str, Any] = {}
    for i in range(MAX_ROUNDS):
        target = root
        if i:
            target = root.parent / f"{root.name}-round{i}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(pristine, target, symlinks=True)
            if prepared:
                readers.prepare(target)
        r = _compaction(target, truth)
        if not total:
            total = dict(r, rounds=1)
        else:
            for k in ("reads", "fresh", "held", "exact", "skipped", "relists", "seconds"):
                total[k] += r[k]
            total["latency"] = total["latency"] + r["latency"]
            total["min_samples"] = min(total["min_samples"], r["min_samples"])
            total["rounds"] += 1
            shutil.rmtree(target, ignore_errors=True)
        if total["reads"] >= MIN_READS:
            break
    return total


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gpuaudit", *args], env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def run(work: Path, quick: bool) -> list[dict[str, Any]]:
    from gpuaudit import push, store
    from gpuaudit.store import readers

    min_files = 400 if quick else 3000
    node, central = work / "node", work / "central"
    n_samples, n_procs, files = _build(node, min_files)
    truth = (n_samples, n_procs)
    t_push = time.perf_counter()
    push.push(node, central)  # the collection directory holds the flushes before the node compacts them
    push_s = time.perf_counter() - t_push
    idle = [_read(node)[1]]

    # First compaction ever (no lock files yet: the readers cannot hold the files, they list again), then the
    # same files where an earlier compaction left the lock files (the readers hold the replaced files).
    again = work / "node-again"
    pristine = work / "node-pristine"
    shutil.copytree(node, again, symlinks=True)
    shutil.copytree(node, pristine, symlinks=True)
    readers.prepare(again)
    first = _rounds(node, pristine, truth, prepared=False)
    held_round = _rounds(again, pristine, truth, prepared=True)
    _cli("compact", "--data", str(again)).wait()  # no reader open now: removes what the first one kept
    left = len(list(again.glob("gpu_*/*/*/agent-*.parquet")))

    # The push that ships the merged files and prunes the flushes from the collection directory, read meanwhile.
    held = [store.open_dataset(central) for _ in range(HELD_READERS)]
    proc = _cli("push", "--data", str(node), "--to", str(central))
    prune = _loop_while(proc, central, held, truth)
    for ds in held:
        ds.close()
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 0, err
    after_prune = len(list(central.glob("gpu_*/*/*/agent-*.parquet")))
    subprocess.run([sys.executable, "-m", "gpuaudit", "push", "--data", str(node), "--to", str(central)],
                   check=True, env=_env(), stdout=subprocess.DEVNULL)  # no reader now: prunes what was kept
    pruned_later = after_prune - len(list(central.glob("gpu_*/*/*/agent-*.parquet")))
    both = first["latency"] + held_round["latency"]
    lat = statistics.median(both) if both else float("nan")
    idle_s = statistics.median(idle)
    size = f"{files:,} small files ({n_samples:,} sample + {n_procs:,} process rows)"

    def reads(r: dict[str, Any], what: str) -> dict[str, Any]:
        return _fig(f"reads during `gpuaudit compact` of {size}, {what}, that saw the exact row count",
                    r["exact"], "reads", "reads during the compaction", r["reads"], r["exact"] / max(r["reads"], 1),
                    f"every read exact, >= {MIN_READS} reads", r["exact"] == r["reads"] >= MIN_READS,
                    f"{r['fresh']} fresh `sql`-style reads (open, locked down, count both views) + {r['held']} "
                    f"through {HELD_READERS} readers opened before the compaction; fewest sample rows seen "
                    f"{r['min_samples']:,} of {n_samples:,}; files called unreadable: {r['skipped']}; relists: "
                    f"{r['relists']}; replaced files kept for the readers: {r['kept']}; "
                    f"{r['rounds']} compaction(s) of the same files, {r['seconds']:.0f} s in all")

    return [
        reads(first, "the first ever (no lock files: readers list again)"),
        reads(held_round, "lock files present (readers hold the replaced files)"),
        _fig("replaced files kept while readers were open, then removed by the next compaction", held_round["kept"],
             "files", "files before the compaction", files, None, "0 left after a compaction with no reader open",
             left == 0, f"{left} left after the next `gpuaudit compact`"),
        _fig("read latency during the compaction (median)", lat, "s", "same read, nothing else running",
             idle_s, lat / idle_s if idle_s else None, None, None,
             "a fresh open lists and checks every file (footers), so it grows with the file count"),
        _fig(f"reads of a collection directory during `gpuaudit push`'s prune of {files:,} flushes that saw the "
             "exact row count", prune["exact"], "reads", "reads during the push", prune["reads"],
             prune["exact"] / max(prune["reads"], 1), "every read exact", prune["exact"] == prune["reads"],
             f"{prune['fresh']} fresh + {prune['held']} held reads; files called unreadable: {prune['skipped']}; "
             f"relists: {prune['relists']}; superseded flushes left on the target while readers were open: "
             f"{after_prune}, removed by the next push with no reader: {pruned_later}; first push {push_s:.0f} s"),
    ]
