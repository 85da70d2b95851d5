"""The stage-1 rollup cache (analysis/stage1/cache.py). An optimisation, never a source of truth: a run that
uses it gives what a cold run gives (every figure within 1e-9 relative), through overlaps, refined hours,
compactions, re-written files, a push and a deleted cache; `--no-cache` forces a cold run; a dataset where the
cache cannot be written is a cold run with a note; concurrent runs are safe."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from tests.analysis_helpers import T0, ends, gpu_rows, proc_rows, write
from tests.helpers import run_cli

from gpuaudit import schema, store
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.analysis.pipeline import analyze
from gpuaudit.analysis.stage1 import cache as rcache

REL_TOL = 1e-9
REPO = Path(__file__).resolve().parents[1]


def _close(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            if k != "generated_at":
                _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _day(root: Path, day: int) -> None:
    """One day of data with what de-duplication has to undo: an import over agent data (the agent wins), a copy
    of part of each hour of one GPU (an overlap factor), one GPU under two host names, and an agent started at
    10:30 over an import (hours streams cover only in part: refined per minute)."""
    start = T0 + dt.timedelta(days=day)
    a = gpu_rows("node-a", "GPU-A", 1440, start=start, sm=lambda i: 0.1 + 0.8 * ((i // 90) % 2),
                 procs=lambda i: int((i // 90) % 2))
    imported = gpu_rows("node-a", "GPU-A", 1440, start=start, sm=0.5, source="prometheus-dcgm")
    copy = [r for i, r in enumerate(a) if i % 60 < 20]
    b = gpu_rows("node-b", "GPU-B", 1440, start=start, sm=lambda i: (i % 7) / 10, procs=1)
    b_alias = gpu_rows("node-b-alias", "GPU-B", 1440, start=start, sm=lambda i: (i % 7) / 10, procs=1)
    c_import = gpu_rows("node-c", "GPU-C", 1440, start=start, sm=0.3, source="prometheus-dcgm", procs=1)
    c_agent = gpu_rows("node-c", "GPU-C", 1440 - 630, start=start + dt.timedelta(minutes=630), sm=0.9, procs=1)
    procs = (proc_rows("node-a", "GPU-A", ends(a, lambda i: (i // 90) % 2 == 1), user="alice", job_id="7")
             + proc_rows("node-b", "GPU-B", ends(b), user="bob", job_id="8")
             + proc_rows("node-c", "GPU-C", ends(c_import), user="carol", pod="p-1"))
    write(root, a + copy + b + c_agent, procs)
    write(root, imported + b_alias + c_import)


def _fleet(root: Path, days: int = 3) -> Path:
    for d in range(days):
        _day(root, d)
    return root


def _result(root: Path | str, *, cache: bool = True, **kw: Any) -> dict[str, Any]:
    return json.loads(json.dumps(analyze(root, overrides=Overrides(**kw), cache=cache).to_dict(), default=str))


def _entries(root: Path) -> list[Path]:
    return sorted((root / rcache.DIR).glob(f"*{rcache.SUFFIX}"))


def _hit(root: Path | str) -> bool:
    return rcache.lookup(root).hit is not None


def _same_as_cold(root: Path) -> None:
    """A run through the cache (a miss that fills it, then a hit) equals a cold run."""
    cold = _result(root, cache=False)
    first = _result(root)
    assert _hit(root), "the run filled the cache"
    _close(cold, first)
    _close(cold, _result(root))


def test_a_warm_run_equals_a_cold_one_through_every_change(tmp_path: Path) -> None:
    """29.2: overlaps and refined hours; then a compaction, one more day, a file re-written under its own name
    (size and mtime restored: the footer tells), and the cache deleted: each time the cached run equals a cold
    run, and the entry of a snapshot that changed is never used again."""
    root = _fleet(tmp_path / "data")
    _same_as_cold(root)
    key = rcache.lookup(root).key

    stats = store.compact(root)
    assert stats.files_before > stats.files_after  # something was merged
    assert not _hit(root), "an entry of files a compaction replaced is not used"
    _same_as_cold(root)

    _day(root, 3)  # one more day of data
    assert not _hit(root)
    _same_as_cold(root)

    victim = sorted((root / schema.SAMPLES).rglob("*.parquet"))[0]
    st = victim.stat()
    frame = pl.read_parquet(victim, hive_partitioning=False)
    frame = frame.with_columns((pl.col("sm_active") * 0.5).alias("sm_active"))
    frame.write_parquet(victim.with_name("rewritten.tmp"))
    os.replace(victim.with_name("rewritten.tmp"), victim)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not _hit(root), "a file re-written under the same name invalidates"
    _same_as_cold(root)

    shutil.rmtree(root / rcache.DIR)
    _same_as_cold(root)
    assert key not in {p.stem for p in _entries(root)}


def test_a_push_between_runs(tmp_path: Path) -> None:
    """29.2: a collection target fed by pushes: the cached report on it equals a cold one after each push."""
    from gpuaudit.push.run import push

    node, target = tmp_path / "node", tmp_path / "target"
    _fleet(node, days=2)
    push(node, target)
    _same_as_cold(target)
    _day(node, 2)
    store.compact(node)
    push(node, target)
    assert not _hit(target)
    _same_as_cold(target)
    assert _entries(target)


def test_no_cache_neither_uses_nor_fills_the_cache(tmp_path: Path) -> None:
    """29.1: `--no-cache` forces a cold run: it ignores an entry (here a doctored one, which a cached run does
    use: proof it is read) and writes none."""
    root = _fleet(tmp_path / "data", days=2)
    _result(root, cache=False)
    assert not (root / rcache.DIR).exists()
    cold = _result(root)
    found = rcache.lookup(root)
    assert found.hit is not None
    doctored = found.hit.gpu_hours.with_columns(pl.col("real_s") * 0.5)
    import dataclasses

    rcache.store(found.directory, found.key, dataclasses.replace(found.hit, gpu_hours=doctored))
    assert _result(root) != cold  # the cache is what a warm run reads
    _close(cold, _result(root, cache=False))
    r = run_cli("analyze", "--data", str(root), "--json", "--no-cache")
    assert r.returncode == 0, r.stderr
    _close(cold, json.loads(r.stdout))


def test_a_dataset_the_cache_cannot_be_written_in_is_a_cold_run_with_a_note(tmp_path: Path) -> None:
    """29.1: a read-only dataset (no write permission; as root, without the capabilities that override it):
    the report is the cold run's, with one note on stderr, and nothing is written."""
    root = _fleet(tmp_path / "data", days=2)
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: permissions cannot be enforced")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    dirs = [root, *[p for p in root.rglob("*") if p.is_dir()]]
    for d in dirs:
        d.chmod(0o555)
    try:
        r = subprocess.run([*prefix, sys.executable, "-m", "gpuaudit", "analyze", "--json", "--data", str(root)],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    finally:
        for d in dirs:
            d.chmod(0o755)
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "rollup cache" in line]
    assert len(notes) == 1 and notes[0].startswith("gpuaudit: note: "), r.stderr
    assert "Traceback" not in r.stderr
    assert not (root / rcache.DIR).exists()
    _close(_result(root, cache=False), json.loads(r.stdout))


def test_rows_left_out_for_their_time_are_never_cached(tmp_path: Path) -> None:
    """29.1: a row more than a day in the future is left out relative to the clock, so a later run may read
    it: such a snapshot is not cached."""
    root = _fleet(tmp_path / "data", days=2)
    future = gpu_rows("node-z", "GPU-Z", 3, start=dt.datetime.now(dt.UTC) + dt.timedelta(days=3))
    write(root, future)
    _close(_result(root, cache=False), _result(root))
    assert not _entries(root)


def test_concurrent_reports_are_safe(tmp_path: Path) -> None:
    """29.1: two reports at once on a dataset with no entry yet: both give the cold figures, one whole entry
    is left and no staging file."""
    root = _fleet(tmp_path / "data", days=2)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "gpuaudit", "analyze", "--json", "--data", str(root)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    cold = _result(root, cache=False)
    for out, _err in outs:
        _close(cold, json.loads(out))
    assert len(_entries(root)) == 1
    names = sorted(p.name for p in (root / rcache.DIR).iterdir())  # the entry and its stamp, no staging file
    assert [n for n in names if not n.endswith(rcache.STAMP_SUFFIX)] == [_entries(root)[0].name]
    assert sum(n.endswith(rcache.STAMP_SUFFIX) for n in names) == 1
    _close(cold, _result(root))


def test_report_json_from_the_cache_equals_a_cold_one(tmp_path: Path) -> None:
    """29.2: `gpuaudit report` (report.json) warm, and after a changed price, equals `--no-cache`."""
    root = _fleet(tmp_path / "data", days=2)
    cfg = tmp_path / "price.toml"
    cfg.write_text("[cloud]\ninstance_usd_per_hour = 40.0\n")
    for extra in ([], ["--config", str(cfg)]):
        outs = []
        for flags in (["--no-cache"], [], []):
            out = tmp_path / f"r{len(outs)}"
            r = run_cli("report", "--data", str(root), "--out", str(out), "--format", "json", "-q", *extra,
                        *flags)
            assert r.returncode == 0, r.stderr
            outs.append(json.loads((out / "report.json").read_text()))
        _close(outs[0], outs[1])
        _close(outs[0], outs[2])
    assert len(_entries(root)) == 1  # a price is not part of stage 1


def test_s3_dataset_cache_lives_under_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """29.1: an s3:// dataset caches on this machine under $XDG_CACHE_HOME, keyed by the URL; a push that
    changes the objects invalidates."""
    pytest.importorskip("moto")
    from tests.s3_helpers import moto_s3

    from gpuaudit.push.run import push

    node = _fleet(tmp_path / "node", days=2)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with moto_s3() as s3:
        url = f"s3://{s3.new_bucket()}/fleet"
        push(node, url)
        _same_as_cold(url)  # type: ignore[arg-type]
        where = rcache.cache_dir(url)
        assert where.is_relative_to(tmp_path / "xdg" / "gpuaudit" / "rollups")
        assert list(where.glob(f"*{rcache.SUFFIX}"))
        _day(node, 2)
        push(node, url)
        assert not _hit(url)
        _same_as_cold(url)  # type: ignore[arg-type]


def test_files_the_reader_leaves_out_keep_their_place_in_the_key(tmp_path: Path) -> None:
    """29.1: a damaged file, an exact copy of a file and a file outside the contract are part of the snapshot:
    the warm run hits, says what the cold run says about them, and equals it; mending the damaged file
    invalidates."""
    import duckdb

    root = _fleet(tmp_path / "data", days=2)
    first = sorted((root / schema.SAMPLES).rglob("*.parquet"))[0]
    shutil.copy(first, first.with_name("copy-of-first.parquet"))
    damaged = first.with_name("damaged.parquet")
    damaged.write_bytes(b"PAR1" + b"\0" * 64)
    duckdb.execute(f"COPY (SELECT 1 AS x) TO '{first.with_name('not-ours.parquet')}'")
    cold = _result(root, cache=False)
    said = [w for w in json.dumps(cold).split('"') if w.startswith("left out file")]
    assert len(said) >= 3, said  # the copy, the damaged file, the foreign one: in the result's warnings
    _same_as_cold(root)
    damaged.unlink()
    shutil.copy(first, damaged)
    assert not _hit(root)


def test_one_more_day_reads_only_the_new_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """29.1 (incremental): after one more day of data the cached run reads only the new day's files and merges
    them with the entry (no GPU-hour in both): it equals a cold run. New files over GPU-hours the entry already
    holds (a copy of an old day) cannot be merged: all files are read again, and the result still equals."""
    import logging

    root = _fleet(tmp_path / "data", days=2)
    _same_as_cold(root)
    _day(root, 2)
    with caplog.at_level(logging.INFO, logger="gpuaudit.analysis"):
        warm = _result(root)
    assert any("new file(s) on top of the rollup cache" in r.getMessage() for r in caplog.records), caplog.text
    _close(_result(root, cache=False), warm)
    assert _hit(root)
    _close(_result(root, cache=False), _result(root))

    caplog.clear()
    write(root, gpu_rows("node-a", "GPU-A", 300, start=T0 + dt.timedelta(hours=2), sm=0.7))  # over old hours
    with caplog.at_level(logging.INFO, logger="gpuaudit.analysis"):
        warm = _result(root)
    assert any("cannot be merged" in r.getMessage() for r in caplog.records), caplog.text
    _close(_result(root, cache=False), warm)
    _same_as_cold(root)


def test_a_gpu_that_reports_only_while_held_is_judged_over_the_whole_trial(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    """29.1 (incremental): a GPU held all the time it reports, seen only on the new day, is elastic over the
    whole trial though not over either part (sql/analysis_elastic_gpus.sql): the merge gives way and the
    cloud figures equal a cold run's."""
    import logging

    root = _fleet(tmp_path / "data", days=2)
    _same_as_cold(root)
    assert rcache.lookup(root).hit.elastic_gpus.height == 0  # type: ignore[union-attr]
    start = T0 + dt.timedelta(days=2)
    e = gpu_rows("node-e", "GPU-E", 1440, start=start, sm=0.6, procs=1)
    write(root, e, proc_rows("node-e", "GPU-E", ends(e), user="erin", job_id="9"))
    with caplog.at_level(logging.INFO, logger="gpuaudit.analysis"):
        warm = _result(root, current="cloud")
    assert any("cannot be merged" in r.getMessage() for r in caplog.records), caplog.text
    cold = _result(root, cache=False, current="cloud")
    hit = rcache.lookup(root).hit
    assert hit is not None and "GPU-E" in hit.elastic_gpus["gpu_uuid"].to_list()
    _close(cold, warm)


def test_new_files_that_end_an_hour_the_entry_began_are_merged(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """29.1 (incremental): an agent's next flush, or the next day, usually starts inside a GPU-hour the entry
    already holds (a sample's hour is the one its interval ends in, so a day's first sample ends the day before's
    last hour). Where that GPU-hour is one stream on both sides, in time apart, its sums add up: the new files
    are merged, and the result equals a cold run. Defect: any shared GPU-hour read the whole dataset again, so
    "one more day" (benchmarks, 100 M rows) took 1.19x a cold run instead of a fraction of it. Another stream in
    the shared hour, or samples of the same stream over the same minutes, still cannot be merged."""
    import logging

    root = tmp_path / "data"
    a = gpu_rows("node-a", "GPU-A", 1440, start=T0, sm=lambda i: (i % 9) / 10, procs=lambda i: int(i % 3 > 0))
    b = gpu_rows("node-b", "GPU-B", 1440, start=T0, sm=0.4, procs=1)
    cut = 630 + 17  # 10:47: both sides hold part of the 10:00 hour
    write(root, a[:cut] + b[:cut], proc_rows("node-a", "GPU-A", ends(a[:cut], lambda i: i % 3 > 0), user="alice")
          + proc_rows("node-b", "GPU-B", ends(b[:cut]), user="bob", job_id="8"))
    _same_as_cold(root)
    write(root, a[cut:] + b[cut:], proc_rows("node-a", "GPU-A", ends(a[cut:], lambda i: (i + cut) % 3 > 0),
                                             user="alice") + proc_rows("node-b", "GPU-B", ends(b[cut:]), user="bob",
                                                                       job_id="8"))
    with caplog.at_level(logging.INFO, logger="gpuaudit.analysis"):
        warm = _result(root)
    assert any("new file(s) on top of the rollup cache" in r.getMessage() for r in caplog.records), caplog.text
    _close(_result(root, cache=False), warm)
    _same_as_cold(root)

    for late in (gpu_rows("node-a", "GPU-A", 10, start=T0 + dt.timedelta(hours=23, minutes=20), sm=0.2),  # again
                 gpu_rows("node-a", "GPU-A", 10, start=T0 + dt.timedelta(hours=23, minutes=20), sm=0.2,
                          source="prometheus-dcgm")):  # another stream in the hour
        _result(root)
        caplog.clear()
        write(root, late)
        with caplog.at_level(logging.INFO, logger="gpuaudit.analysis"):
            warm = _result(root)
        assert any("cannot be merged" in r.getMessage() for r in caplog.records), caplog.text
        _close(_result(root, cache=False), warm)


def test_a_gpu_hour_whose_gpu_name_changes_at_the_seam_is_read_again(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """29.1 (incremental): sql/analysis_streams.sql keeps a stream per reported GPU name, so an hour whose
    first part has no name (an import without the info series) and whose rest has one is two streams to a cold
    run, each side one stream alone. Defect (review of the shared-hour merge): the merge added them up as one;
    it must read everything again and equal the cold run."""
    import logging

    root = tmp_path / "data"
    a = gpu_rows("node-a", "GPU-A", 240, start=T0, sm=0.5, procs=1)
    cut = 150  # 02:30
    for r in a[:cut]:
        r["gpu_name"] = None
    write(root, a[:cut])
    _same_as_cold(root)
    write(root, a[cut:])
    with caplog.at_level(logging.INFO, logger="gpuaudit.analysis"):
        warm = _result(root)
    assert any("cannot be merged" in r.getMessage() for r in caplog.records), caplog.text
    _close(_result(root, cache=False), warm)


def test_a_warm_run_finds_its_entry_without_opening_a_data_file(tmp_path: Path, monkeypatch: Any) -> None:
    """29: a warm run at 1,000 GPUs x 90 days spent 7.6 s of its 22 s listing 30,000 files and hashing their
    footers before it could look the entry up. With the tree's stamp recorded, a warm run lists nothing and
    opens no Parquet file, and still equals a cold run."""
    from gpuaudit.store import reader

    root = _fleet(tmp_path / "data", days=2)
    cold = _result(root, cache=False)
    _result(root)  # fills the entry and its stamp
    assert list((root / rcache.DIR).glob(f"*{rcache.STAMP_SUFFIX}"))

    def no_listing(*a: Any, **k: Any) -> Any:
        raise AssertionError("a warm run listed the dataset")

    monkeypatch.setattr(reader, "table_files", no_listing)
    monkeypatch.setattr(rcache, "_footer_digest", no_listing)
    _close(cold, _result(root))


def test_the_stamp_never_hides_a_change(tmp_path: Path) -> None:
    """29: the stamp path must see what the full key sees: a file re-written in place with its size and mtime
    put back (ctime moves), a new file, a removed one, a link re-pointed. Each time the lookup misses and the
    cached run equals a cold one."""
    root = _fleet(tmp_path / "data", days=2)
    _same_as_cold(root)
    victim = sorted((root / schema.SAMPLES).rglob("*.parquet"))[0]
    st = victim.stat()
    frame = pl.read_parquet(victim, hive_partitioning=False)
    frame.with_columns((pl.col("sm_active") * 0.25).alias("sm_active")).write_parquet(tmp_path / "new.parquet")
    new = (tmp_path / "new.parquet").read_bytes()
    with victim.open("r+b") as f:  # in place: the same inode, the mtime put back
        f.write(new)
        f.truncate(len(new))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not _hit(root), "a file re-written in place invalidates the stamp and the key"
    _same_as_cold(root)

    extra = victim.with_name("extra.parquet")
    shutil.copy(tmp_path / "new.parquet", extra)
    assert not _hit(root)
    _same_as_cold(root)
    extra.unlink()
    assert _hit(root), "back to a snapshot seen before: its entry"
    _same_as_cold(root)

    link = victim.with_name("linked.parquet")
    link.symlink_to(tmp_path / "new.parquet")
    _same_as_cold(root)
    frame.write_parquet(tmp_path / "new.parquet")  # the link's target re-written: the link itself unchanged
    assert not _hit(root), "a linked file's content is part of the stamp"
    _same_as_cold(root)


_AHEAD = """
import os, sys, threading
from gpuaudit.store.reader import StampAhead, tree_stamp
root, how = sys.argv[1], sys.argv[2]
if how == "thread":
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
if how == "fail":  # the child's walk fails (whatever the reason); the parent's works
    import gpuaudit.store.reader as reader
    real, parent = reader.tree_stamp, os.getpid()
    def failing_in_the_child(r):
        if os.getpid() != parent:
            raise OSError("the child's walk failed")
        return real(r)
    reader.tree_stamp = failing_in_the_child
ahead = StampAhead(root)
pid = ahead._pid
if how == "close":
    ahead.close()
else:
    got = ahead()
    print(got == tree_stamp(root), ahead() is got)
if how == "thread":
    stop.set()
    other.join()
try:
    os.waitpid(pid, os.WNOHANG) if pid else None
    print(bool(pid), "child left" if pid else "no child")
except ChildProcessError:
    print(bool(pid), "reaped")
"""


def test_the_stamp_taken_ahead_is_the_stamp_and_leaves_no_child(tmp_path: Path) -> None:
    """29: a warm fleet run spent 0.5 s of its 3 s stamping the tree before its imports; a forked child now
    takes the stamp beside them (store.reader.StampAhead). Whatever becomes of the child (it answers, it
    fails, nobody asks), the stamp is tree_stamp's and no child is left behind; a process with another thread
    forks none (a lock that thread holds would stay held in the child). The command's path: a warm `analyze`
    through it equals the run that filled the cache."""
    from tests.helpers import run_bin

    root = _fleet(tmp_path / "data", days=1)

    def ahead(how: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", _AHEAD, str(root), how], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert ahead("answer") == ["True", "True", "True", "reaped"]
    assert ahead("fail") == ["True", "True", "True", "reaped"], "the child failed: the stamp is taken here"
    assert ahead("close") == ["True", "reaped"]
    assert ahead("thread") == ["True", "True", "False", "no", "child"]
    first = run_bin("analyze", "--json", "--data", str(root))
    warm = run_bin("analyze", "--json", "--data", str(root))
    assert first.returncode == warm.returncode == 0, warm.stderr
    _close(json.loads(first.stdout), json.loads(warm.stdout))


def test_a_link_chain_moved_outside_the_root_changes_the_stamp(tmp_path: Path) -> None:
    """29 (review): a file linked through a second link keeps its first link's text and its target's inode
    when the middle link is pointed at a hard link of the same file outside the root; the listing then leaves
    it out (outside the data root), so the stamp and the listing's key must both see where the chain ends (the
    key had the same hole: a link's identity was its final target's). Found by an attacker review."""
    root = _fleet(tmp_path / "data", days=2)
    victim = sorted((root / schema.PROCESSES).rglob("*.parquet"))[0]
    inside, outside = root / "store", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    shutil.move(victim, inside / victim.name)
    os.link(inside / victim.name, outside / victim.name)
    mid = root / "mid"
    mid.symlink_to(inside)
    victim.symlink_to(mid / victim.name)
    _same_as_cold(root)
    mid.unlink()
    mid.symlink_to(outside)
    assert not _hit(root), "the chain now ends outside the root"
    _same_as_cold(root)
