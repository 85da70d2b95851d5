"""The dataset contract on disk: atomic writes, readers that survive damage, compaction, the schema."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from tests.store_helpers import T0, samples_frame

from gpuaudit import schema, store
from gpuaudit.errors import GpuauditError


def test_write_partitions_by_host_and_utc_date(tmp_path: Path) -> None:
    paths = store.write_table(tmp_path, schema.SAMPLES, samples_frame())
    # 600 rows, 300 per host at 20 s from 23:00 UTC: each host crosses midnight -> 2 dates x 2 hosts.
    rel = sorted(str(p.relative_to(tmp_path).parent) for p in paths)
    assert rel == [
        "gpu_samples/host=node-a/date=2026-03-01",
        "gpu_samples/host=node-a/date=2026-03-02",
        "gpu_samples/host=node-b/date=2026-03-01",
        "gpu_samples/host=node-b/date=2026-03-02",
    ]
    ds = store.open_dataset(tmp_path)
    got = ds.query("SELECT host, date::VARCHAR AS d, count(*) AS n FROM samples GROUP BY ALL ORDER BY ALL")
    assert got.rows() == [("node-a", "2026-03-01", 180), ("node-a", "2026-03-02", 120),
                          ("node-b", "2026-03-01", 180), ("node-b", "2026-03-02", 120)]
    assert not list((tmp_path / ".staging").iterdir())


def test_roundtrip_types_units_and_schema_version(tmp_path: Path) -> None:
    df = samples_frame(4)
    store.write_table(tmp_path, schema.SAMPLES, df)
    ds = store.open_dataset(tmp_path)
    cols = dict(ds.fetchall("SELECT column_name, column_type FROM (DESCRIBE samples)"))
    for c in schema.SAMPLE_COLUMNS:
        assert cols[c.name] == {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}.get(c.sql_type, c.sql_type), c.name
    row = ds.query("SELECT * FROM samples ORDER BY ts, host LIMIT 1").row(0, named=True)
    assert row["ts"] == T0 and row["ts"].tzinfo is not None
    assert row["sm_active"] == pytest.approx(0.0) and row["mig_instance"] is None
    f = next((tmp_path / schema.SAMPLES).rglob("*.parquet"))
    kv = duckdb.sql(f"SELECT key::VARCHAR, value::VARCHAR FROM parquet_kv_metadata('{f}')").fetchall()
    assert (schema.SCHEMA_VERSION_KEY, str(schema.SCHEMA_VERSION)) in kv


def test_columnar_lists_input_matches_frame_input(tmp_path: Path) -> None:
    df = samples_frame(20)
    store.write_table(tmp_path / "a", schema.SAMPLES, df)
    store.write_table(tmp_path / "b", schema.SAMPLES, df.to_dict(as_series=False))
    q = "SELECT * EXCLUDE (date) FROM samples ORDER BY host, ts"
    assert store.open_dataset(tmp_path / "a").query(q).equals(store.open_dataset(tmp_path / "b").query(q))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.with_columns(sm_active=pl.col("sm_active") * 100), "outside 0-1 in 'sm_active'"),
        (lambda d: d.drop("gpu_uuid"), "missing required column(s) gpu_uuid"),
        (lambda d: d.with_columns(bogus=pl.lit(1)), "unknown column(s) bogus"),
        (lambda d: d.with_columns(host=pl.lit(None, dtype=pl.Utf8)), "null values in required column 'host'"),
    ],
)
def test_bad_rows_are_refused_and_nothing_is_written(tmp_path: Path, change, message: str) -> None:
    with pytest.raises(GpuauditError, match=message.replace("(", r"\(").replace(")", r"\)")):
        store.write_table(tmp_path, schema.SAMPLES, change(samples_frame(10)))
    assert not (tmp_path / schema.SAMPLES).exists()


def test_hostile_hostnames_roundtrip(tmp_path: Path) -> None:
    host = "<script>alert('x')</script> \"q\"/../%2F"
    store.write_table(tmp_path, schema.SAMPLES, samples_frame(4, hosts=(host,)))
    [part] = list((tmp_path / schema.SAMPLES).iterdir())
    assert part.parent == tmp_path / schema.SAMPLES  # one safe path component, no traversal
    assert store.open_dataset(tmp_path).fetchall("SELECT DISTINCT host FROM samples") == [(host,)]


def test_empty_or_missing_dataset_has_complete_views(tmp_path: Path) -> None:
    ds = store.open_dataset(tmp_path / "nothing-here")
    assert ds.fetchall("SELECT count(*) FROM samples") == [(0,)]
    assert ds.fetchall("SELECT count(*) FROM processes") == [(0,)]
    names = [r[0] for r in ds.fetchall("SELECT column_name FROM (DESCRIBE processes)")]
    assert set(schema.column_names(schema.PROCESSES)) <= set(names)


def test_old_files_without_a_new_column_still_read(tmp_path: Path) -> None:
    # An "old" file written before gpu_name existed, next to a new one.
    old = samples_frame(4).drop("gpu_index")
    part = store.partition_dir(tmp_path, schema.SAMPLES, "node-a", "2026-03-01")
    part.mkdir(parents=True)
    old.filter(pl.col("host") == "node-a").drop("host").write_parquet(part / "old.parquet")
    store.write_table(tmp_path, schema.SAMPLES, samples_frame(4))
    ds = store.open_dataset(tmp_path)
    assert ds.fetchall("SELECT count(*), count(gpu_index) FROM samples WHERE host = 'node-a'") == [(4, 2)]


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif how == "middle":
        for i in range(40, len(data) - 300):
            data[i] = 0x55
        path.write_bytes(bytes(data))
    elif how == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["truncate", "garbage", "middle", "empty"])
def test_damaged_file_is_skipped_with_a_warning_naming_it(tmp_path: Path, how: str, caplog) -> None:
    store.write_table(tmp_path, schema.SAMPLES, samples_frame(600))
    victim = sorted((tmp_path / schema.SAMPLES).rglob("*.parquet"))[0]
    _damage(victim, how)
    ds = store.open_dataset(tmp_path)
    n = ds.fetchall("SELECT count(*) FROM samples")[0][0]
    assert n == 600 - 180  # the victim held node-a's 180 rows of the first day
    assert [p for p, _ in ds.skipped] == [victim]
    assert str(victim) in caplog.text


def test_compaction_merges_and_keeps_every_row(tmp_path: Path) -> None:
    for k in range(5):
        store.write_table(tmp_path, schema.SAMPLES, samples_frame(40).with_columns(
            ts=pl.col("ts") + timedelta(minutes=10 * k)))
    before = store.open_dataset(tmp_path).query("SELECT * FROM samples ORDER BY ALL")
    stats = store.compact(tmp_path)
    assert (stats.files_before, stats.files_after) == (10, 2)
    assert all(len(list(p.glob("*.parquet"))) == 1 for p in (tmp_path / schema.SAMPLES).glob("*/*"))
    after = store.open_dataset(tmp_path).query("SELECT * FROM samples ORDER BY ALL")
    assert after.equals(before)


def test_interrupted_compaction_never_shows_rows_twice(tmp_path: Path) -> None:
    for k in range(3):
        store.write_table(tmp_path, schema.SAMPLES, samples_frame(4, hosts=("h",)).with_columns(
            ts=pl.col("ts") + timedelta(minutes=5 * k)))
    part = next((tmp_path / schema.SAMPLES).glob("*/*"))
    old = sorted(p.name for p in part.glob("*.parquet"))
    # Simulate a crash after the merged file was published but before the old ones were deleted.
    merged = store.open_dataset(tmp_path).query("SELECT * EXCLUDE (host, date) FROM samples")
    merged.write_parquet(part / "compact-x.parquet")
    (part / ".compact-dead.json").write_text(json.dumps({"new": "compact-x.parquet", "old": old}))
    assert store.open_dataset(tmp_path).fetchall("SELECT count(*) FROM samples") == [(12,)]
    stats = store.compact(tmp_path)
    assert stats.recovered == 1
    assert [p.name for p in part.glob("*.parquet")] == ["compact-x.parquet"]
    assert store.open_dataset(tmp_path).fetchall("SELECT count(*) FROM samples") == [(12,)]


def test_a_journal_whose_merged_file_never_landed_is_ignored(tmp_path: Path) -> None:
    store.write_table(tmp_path, schema.SAMPLES, samples_frame(4, hosts=("h",)))
    part = next((tmp_path / schema.SAMPLES).glob("*/*"))
    old = [p.name for p in part.glob("*.parquet")]
    (part / ".compact-dead.json").write_text(json.dumps({"new": "never.parquet", "old": old}))
    assert store.open_dataset(tmp_path).fetchall("SELECT count(*) FROM samples") == [(4,)]


WRITER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime, timedelta
    import polars as pl
    from gpuaudit import schema, store
    n = 400_000
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    df = pl.DataFrame({
        "ts": pl.datetime_range(t0, t0 + timedelta(seconds=n - 1), "1s", eager=True, time_zone="UTC"),
        "interval_s": [1.0] * n, "host": ["h"] * n, "gpu_uuid": ["GPU-0"] * n, "gpu_fraction": [1.0] * n,
        "sm_active": (pl.int_range(0, n, eager=True) % 997 / 997).cast(pl.Float32), "n_processes": [1] * n,
        "source": ["simulated"] * n,
    })
    print("ready", flush=True)
    while True:
        store.write_table(sys.argv[1], schema.SAMPLES, df)
    """
)


def test_writer_killed_mid_file_leaves_no_partial_file(tmp_path: Path) -> None:
    """SIGKILL a writer at random moments: every visible file is complete, whatever the timing."""
    rng = random.Random(7)
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 1.5))  # the kill lands at a random point of a write: the input, not a wait
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    visible = list((tmp_path / schema.SAMPLES).rglob("*.parquet"))
    for f in visible:
        assert store.parquet_problem(f) is None, f
    ds = store.open_dataset(tmp_path)
    # The writer writes the same rows each time: its files are exact copies, read once (never damaged).
    assert all("an exact copy of" in why for _, why in ds.skipped), ds.skipped
    # Whole files only: each holds exactly one complete UTC day of the writer's 400,000 one-second rows.
    counts = ds.fetchall("SELECT filename, count(*) FROM read_parquet(?) GROUP BY 1", [[str(f) for f in visible]])
    assert {n for _, n in counts} <= {86_400, 400_000 - 4 * 86_400}
    # Leftovers of killed writers stay in .staging, outside the tables, where no reader looks.
    assert all(p.parent.name == store.STAGING for p in tmp_path.rglob("*") if p.is_file()
               and schema.SAMPLES not in p.parts)


def test_data_root_resolution(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUAUDIT_DATA", raising=False)
    assert store.data_root(None) == Path("gpuaudit-data")
    monkeypatch.setenv("GPUAUDIT_DATA", str(tmp_path))
    assert store.data_root(None) == tmp_path
    assert store.data_root(tmp_path / "x") == tmp_path / "x"


def test_sidecar_json_roundtrip(tmp_path: Path) -> None:
    store.write_json(tmp_path, "simulation.json", {"a": 1})
    assert store.read_json(tmp_path, "simulation.json") == {"a": 1}
    (tmp_path / "broken.json").write_text("{")
    assert store.read_json(tmp_path, "broken.json") is None
    assert store.read_json(tmp_path, "missing.json") is None


def test_files_are_sorted_and_presorted_input_writes_the_same_rows(tmp_path: Path) -> None:
    df = samples_frame(600)
    shuffled = df.sample(fraction=1.0, shuffle=True, seed=3)
    store.write_table(tmp_path / "shuffled", schema.SAMPLES, shuffled)
    store.write_table(tmp_path / "presorted", schema.SAMPLES, df.sort("host", "gpu_uuid", "ts"), presorted=True)
    con = duckdb.connect()
    for f in (tmp_path / "shuffled").rglob("*.parquet"):  # the writer sorted what it was given
        ts = [r[0] for r in con.sql(f"SELECT ts FROM read_parquet('{f}', file_row_number = true) "
                                    "ORDER BY file_row_number").fetchall()]
        assert ts == sorted(ts)
    q = "SELECT * EXCLUDE (date) FROM samples ORDER BY host, ts"
    a = store.open_dataset(tmp_path / "shuffled").query(q)
    assert a.equals(store.open_dataset(tmp_path / "presorted").query(q)) and a.height == 600


def test_duty_cycle_only_sources_cannot_carry_sm_active(tmp_path: Path) -> None:
    df = samples_frame(10).with_columns(source=pl.lit(schema.SOURCE_NVML))
    with pytest.raises(GpuauditError, match="duty-cycle-only source"):
        store.write_table(tmp_path, schema.SAMPLES, df)
    store.write_table(tmp_path, schema.SAMPLES, df.with_columns(sm_active=pl.lit(None, dtype=pl.Float32)))
    assert store.open_dataset(tmp_path).fetchall("SELECT count(*), count(sm_active) FROM samples") == [(10, 0)]
