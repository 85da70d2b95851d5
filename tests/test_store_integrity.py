"""Adversarial input to the store reader, `gpuaudit sql` and `gpuaudit compact`: queries that try to write or
reach outside the dataset, concurrent compactions, malformed journals, foreign or out-of-contract files,
and output that cannot be written."""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from tests.analysis_helpers import T0, gpu_rows, proc_rows, write
from tests.helpers import run_cli
from tests.store_helpers import _fragmented, count, raw_file, samples_frame

from gpuaudit import schema, store
from gpuaudit.errors import GpuauditError
from gpuaudit.store import sqlquery


def snapshot(*dirs: Path) -> dict[str, bytes]:
    """Every file under `dirs` with its bytes: what must not change."""
    return {str(p): p.read_bytes() for d in dirs for p in sorted(d.rglob("*")) if p.is_file()}








# ---------------------------------------------------------------------------------- gpuaudit sql is read-only


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    store.write_table(root, schema.SAMPLES, samples_frame(600))
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the dataset holding one Parquet file that no query may read or touch."""
    d = tmp_path / "outside"
    d.mkdir()
    duckdb.sql(f"COPY (SELECT 42 AS secret) TO '{d / 'other.parquet'}' (FORMAT parquet)")
    return d


def _serialized_copy(target: Path) -> str:
    """json_execute_serialized_sql runs a statement at execution time: invisible to a parser."""
    text = duckdb.sql(
        "SELECT json_serialize_sql(?)", params=[f"WITH t AS (COPY (SELECT 1 AS a) TO '{target}') SELECT * FROM t"]
    ).fetchall()[0][0]
    return "SELECT * FROM json_execute_serialized_sql('" + text.replace("'", "''") + "')"


ATTACKS = [
    "EXPLAIN ANALYZE COPY (SELECT * FROM samples) TO '{out}/x.parquet'",
    "EXPLAIN ANALYZE COPY (SELECT * FROM samples) TO '{root}/gpu_samples' (FORMAT parquet, PARTITION_BY (host), "
    "OVERWRITE)",
    "EXPLAIN (FORMAT json, ANALYZE) COPY (SELECT 1 AS a) TO '{out}/y.csv'",
    "EXPLAIN ANALYZE /* hi */ (FORMAT json) COPY (SELECT 1 AS a) TO '{out}/z.csv'",
    "WITH t AS (COPY (SELECT 1 AS a) TO '{out}/cte.csv') SELECT * FROM t",
    "WITH t AS (COPY (SELECT 1 AS a) TO '{victim}' (FORMAT parquet, USE_TMP_FILE false)) SELECT * FROM t",
    "EXPLAIN ANALYZE WITH t AS (COPY (SELECT 1 AS a) TO '{out}/e.csv') SELECT * FROM t",
    "SELECT * FROM (WITH t AS (COPY (SELECT 1 AS a) TO '{out}/sub.csv') SELECT * FROM t)",
    "SERIALIZED",
    "SELECT * FROM read_csv('/etc/passwd')",
    "EXPLAIN ANALYZE SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_parquet('{out}/*.parquet')",
    "SELECT * FROM glob('{out}/*')",
    "ATTACH '{out}/x.db'",
    "ATTACH ':memory:' AS m",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA enable_profiling",
    "SET temp_directory = '{out}'",
    "CALL checkpoint()",
    "SELECT * FROM checkpoint()",
    "SELECT 1; COPY samples TO '{out}/m.csv'",
    "SELECT 1; SELECT 2",
    "CREATE TEMP TABLE t AS SELECT 1",
    "EXPORT DATABASE '{out}/exp'",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_sql_cannot_write_or_reach_outside_the_dataset(data: Path, outside: Path, attack: str) -> None:
    victim = sorted(data.rglob("*.parquet"))[0]
    sql = attack.format(root=data, out=outside, victim=victim)
    sql = _serialized_copy(outside / "ser.csv") if attack == "SERIALIZED" else sql
    before = snapshot(data.parent)
    with store.open_dataset(data) as ds, pytest.raises(GpuauditError) as err:
        sqlquery.run_query(ds, sql)
    assert "\n" not in str(err.value)
    assert snapshot(data.parent) == before  # nothing written, nothing deleted, nothing created
    assert count(data) == 600


def test_explain_analyze_copy_through_the_cli_leaves_the_dataset_alone(data: Path, outside: Path) -> None:
    before = snapshot(data.parent)
    r = run_cli("sql", "-d", str(data), f"EXPLAIN ANALYZE COPY (SELECT * FROM samples) TO '{data}/gpu_samples' "
                "(FORMAT parquet, PARTITION_BY (host), OVERWRITE)")
    assert r.returncode == 2 and r.stderr.startswith("gpuaudit: error: refused:"), r.stderr
    assert r.stderr.count("\n") == 1
    assert snapshot(data.parent) == before


def test_read_only_sql_still_answers_queries(data: Path) -> None:
    victim = sorted(data.rglob("*.parquet"))[0]
    with store.open_dataset(data) as ds:
        for sql in ("SELECT count(*) AS n FROM samples", "DESCRIBE samples", "SUMMARIZE samples", "SHOW TABLES",
                    "EXPLAIN SELECT * FROM samples", "EXPLAIN ANALYZE SELECT count(*) FROM samples",
                    "FROM duckdb_settings() LIMIT 1", "WITH x AS (SELECT 1 AS a) SELECT * FROM x",
                    "SELECT sum(n) FROM (SELECT unnest([1, 2]) AS n) JOIN range(3) ON true",
                    f"SELECT count(*) FROM parquet_schema('{victim}')"):
            assert sqlquery.run_query(ds, sql).num_rows >= 1, sql
        assert sqlquery.run_query(ds, "FROM samples").num_rows == 600


def test_a_strict_dataset_reads_its_files_and_nothing_else(data: Path, outside: Path) -> None:
    with store.open_dataset(data, strict=True) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(600,)]
        for sql in (f"SELECT * FROM '{outside}/other.parquet'", "SET enable_external_access = true",
                    f"COPY samples TO '{outside}/s.csv'"):
            with pytest.raises(GpuauditError):
                ds.fetchall(sql)
    assert sorted(p.name for p in outside.iterdir()) == ["other.parquet"]


# ------------------------------------------------------------------------------------------------ compaction




COMPACTOR = textwrap.dedent(
    """
    import sys
    from gpuaudit import store
    sys.stdin.readline()
    stats = store.compact(sys.argv[1])
    print(stats.files_before, stats.files_after, flush=True)
    """
)


def test_two_concurrent_compactions_never_duplicate_rows(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _fragmented(root, hosts=16)
    n = count(root)
    procs = [subprocess.Popen([sys.executable, "-c", COMPACTOR, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:  # both are started and waiting: release them together
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert count(root) == n
    # One of them merged everything; the other found one file per partition.
    assert sorted(o.split() for o, _ in outs) == [["0", "0"], ["48", "16"]]


def test_a_second_compaction_waits_for_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _fragmented(root, hosts=2)
    n = count(root)
    with store.compaction_lock(root):
        before = snapshot(root)
        proc = subprocess.Popen([sys.executable, "-m", "gpuaudit", "compact", "-d", str(root)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        line = proc.stderr.readline()  # printed before it blocks: no timing involved
        assert line.startswith("gpuaudit: warning: waiting for another compaction"), line
        assert snapshot(root) == before and proc.poll() is None
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "compacted 2 partitions: 6 files -> 2" in out
    assert count(root) == n


def test_compact_no_wait_refuses_while_another_runs(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _fragmented(root, hosts=1)
    with store.compaction_lock(root):
        before = snapshot(root)
        r = run_cli("compact", "-d", str(root), "--no-wait")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("gpuaudit: error: another compaction") and "Traceback" not in r.stderr
        assert snapshot(root) == before


def test_compact_reports_true_byte_counts_when_a_partition_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _fragmented(root, writes=3, hosts=1)  # node-0: one partition of 3 files
    # A third partition of two files, one damaged past its footer: nothing to merge there.
    late = samples_frame(4, hosts=("node-z",)).with_columns(ts=pl.col("ts") + timedelta(days=5))
    store.write_table(root, schema.SAMPLES, late)
    store.write_table(root, schema.SAMPLES, late.with_columns(ts=pl.col("ts") + timedelta(minutes=1)))
    damaged = sorted(store.partition_dir(root, schema.SAMPLES, "node-z", "2026-03-06").glob("*.parquet"))[0]
    raw = bytearray(damaged.read_bytes())
    raw[40:-300] = b"\x55" * (len(raw) - 340)
    damaged.write_bytes(bytes(raw))
    before = sum(p.stat().st_size for p in root.rglob("*.parquet"))
    r = run_cli("compact", "-d", str(root))
    assert r.returncode == 0, r.stderr
    after = sum(p.stat().st_size for p in root.rglob("*.parquet"))
    assert f"{before:,} -> {after:,} bytes ({before - after:,} saved)" in r.stdout, r.stdout
    assert "5 files -> 3" in r.stdout  # one merged file + the z partition's two, left in place


@pytest.mark.parametrize("journal", [
    "[]", "{}", '{"new": 5}', "\x00\xffnot json", '{"new": "NEW", "old": "abc"}', '{"new": "NEW", "old": [5]}',
    '{"new": "NEW", "old": ["NEW"]}', '{"new": "NEW", "old": ["../../../../outside/keep.parquet"]}',
    '{"new": "NEW", "old": ["."]}',
])
def test_a_malformed_journal_is_reported_and_ignored(tmp_path: Path, journal: str, caplog) -> None:
    root = tmp_path / "data"
    _fragmented(root, writes=2, hosts=1)
    keep = tmp_path / "outside" / "keep.parquet"
    keep.parent.mkdir()
    keep.write_bytes(b"precious")
    part = store.partition_dir(root, schema.SAMPLES, "node-0", "2026-03-01")
    newest = sorted(part.glob("*.parquet"))[-1].name
    bad = part / ".compact-bad.json"
    bad.write_bytes(journal.replace("NEW", newest).encode("utf-8", "surrogateescape"))
    n = 2 * 20
    assert count(root) == n  # nothing hidden
    assert f"malformed compaction journal {bad}" in caplog.text
    caplog.clear()
    store.compact(root)
    assert f"malformed compaction journal {bad}" in caplog.text
    assert count(root) == n  # nothing deleted or duplicated
    assert keep.read_bytes() == b"precious"


# ----------------------------------------------------------------------------- the reader checks the contract


def test_percent_sm_active_in_one_days_file_is_excluded(tmp_path: Path) -> None:
    from gpuaudit.analysis import analyze

    root = write(tmp_path / "data", gpu_rows("h", "GPU-0", 1440, sm=0.5, procs=1))
    day2 = gpu_rows("h", "GPU-0", 1440, start=T0 + timedelta(days=1), sm=50.0, duty=0.9, procs=1)
    path = raw_file(root, schema.SAMPLES, day2[:-1], "percent")  # the last row ends on the next date
    result = analyze(root)
    assert result.utilization.real_utilization.value == pytest.approx(0.5)
    with store.open_dataset(root) as ds:  # left out whole, as a file (its duty cycle of 0.9 is percent too)
        assert ds.rejected_rows() == []
        assert ds.skipped == [(path, "values above 1: percent, not fractions? (sm_active up to 50)")]


def test_a_row_from_1970_does_not_stretch_the_trial(tmp_path: Path) -> None:
    from gpuaudit.analysis import analyze

    rows = gpu_rows("h", "GPU-0", 2 * 1440 - 1, sm=0.5, procs=1)
    rows += gpu_rows("h", "GPU-0", 1, start=datetime(1970, 1, 1, tzinfo=UTC), sm=0.5)
    root = write(tmp_path / "data", rows)  # the writer takes any ts: a reset clock gets this far
    result = analyze(root)
    assert result.trial.days < 3
    with store.open_dataset(root) as ds:
        [(table, reason, n)] = ds.rejected_rows()
        assert (table, n) == (schema.SAMPLES, 1) and reason.startswith("ts ")


def test_a_varchar_column_does_not_abort_analyze_or_sql(tmp_path: Path) -> None:
    root = write(tmp_path / "data", gpu_rows("h", "GPU-0", 1439, sm=0.5, procs=1))
    day2 = gpu_rows("h", "GPU-0", 1439, start=T0 + timedelta(days=1), sm=0.25, procs=1)
    text = pl.col("sm_active").cast(pl.String)
    raw_file(root, schema.SAMPLES, day2, "strings", change=lambda f: f.with_columns(  # "0.25", and 3 x "n/a"
        sm_active=pl.when(pl.int_range(pl.len()) < 3).then(pl.lit("n/a")).otherwise(text)))
    # ts as text is fine (UTC); ts as an integer is not a timestamp: that file is left out whole.
    day3 = gpu_rows("h", "GPU-1", 10, start=T0 + timedelta(days=1), sm=0.5)
    raw_file(root, schema.SAMPLES, day3, "textts",
             change=lambda f: f.with_columns(pl.col("ts").dt.to_string("%Y-%m-%d %H:%M:%S")))
    intts = raw_file(root, schema.SAMPLES, day3, "intts",
                     change=lambda f: f.with_columns(pl.col("ts").cast(pl.Int64)))
    r = run_cli("analyze", "-d", str(root), "--json")
    assert r.returncode == 0, r.stderr
    real = json.loads(r.stdout)["utilization"]["real_utilization"]["value"]
    assert 0.25 < real < 0.5
    r = run_cli("sql", "-d", str(root), "SELECT count(*) AS n, max(sm_active) AS m FROM samples", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"n": 1439 + 1436 + 10, "m": 0.5}]
    with store.open_dataset(root) as ds:
        types = dict(ds.fetchall("SELECT column_name, column_type FROM (DESCRIBE samples)"))
        assert types["sm_active"] == "FLOAT" and types["ts"] == "TIMESTAMP WITH TIME ZONE"
        assert ds.rejected_rows() == [(schema.SAMPLES, "sm_active not convertible to FLOAT", 3)]
        assert ds.skipped == [(intts, "ts is BIGINT, not a TIMESTAMP or TIMESTAMPTZ")]


def test_out_of_contract_rows_are_excluded_and_counted(tmp_path: Path, caplog) -> None:
    root = tmp_path / "data"
    good = gpu_rows("h", "GPU-0", 20, sm=0.5, procs=1)
    bad = gpu_rows("h", "GPU-1", 13, sm=0.5, procs=1)
    for row, edit in zip(bad, [
        {"sm_active": -1.5}, {"sm_active": float("nan")}, {"duty_cycle": -0.5}, {"interval_s": 0.0},
        {"interval_s": 1e6}, {"power_w": -5.0}, {"energy_j": float("inf")}, {"mem_used_bytes": -1},
        {"gpu_uuid": None}, {"ts": datetime(2035, 1, 1, tzinfo=UTC)}, {"gpu_fraction": -7.0},
        {"tensor_active": float("-inf")}, {"n_processes": None},
    ], strict=True):
        row.update(edit)
    path = raw_file(root, schema.SAMPLES, good + bad)
    procs = [{**p, "sm_util": None} for p in proc_rows("h", "GPU-0", [T0 + timedelta(minutes=i) for i in range(5)])]
    # (A fraction above 1 would leave the whole file out as percent-valued: test_store_conformance.py.)
    procs[0]["sm_util"], procs[1]["mem_used_bytes"], procs[2]["ts"] = -2.0, -1, datetime(1999, 12, 31, tzinfo=UTC)
    raw_file(root, schema.PROCESSES, procs)
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(20,)]
        assert ds.fetchall("SELECT count(*) FROM processes") == [(2,)]
        got = sorted(ds.rejected_rows())
    assert got == sorted([
        (schema.SAMPLES, "sm_active outside 0-1", 1), (schema.SAMPLES, "sm_active is NaN or infinite", 1),
        (schema.SAMPLES, "duty_cycle outside 0-1", 1), (schema.SAMPLES, "interval_s not in (0, 86400]", 2),
        (schema.SAMPLES, "power_w negative", 1), (schema.SAMPLES, "energy_j is NaN or infinite", 1),
        (schema.SAMPLES, "mem_used_bytes negative", 1), (schema.SAMPLES, "gpu_uuid is null", 1),
        (schema.SAMPLES, "ts before 2000-01-01 or more than 1 day in the future", 1),
        (schema.SAMPLES, "gpu_fraction outside 0-1", 1), (schema.SAMPLES, "tensor_active is NaN or infinite", 1),
        (schema.SAMPLES, "n_processes is null", 1),
        (schema.PROCESSES, "sm_util outside 0-1", 1), (schema.PROCESSES, "mem_used_bytes negative", 1),
        (schema.PROCESSES, "ts before 2000-01-01 or more than 1 day in the future", 1),
    ])
    assert f"excluded 1 gpu_samples row: sm_active outside 0-1 (in {path})" in caplog.text
    # "now" is injectable: in 2035 the 2035 row is in range.
    with store.open_dataset(root, now=datetime(2035, 1, 1, tzinfo=UTC)) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(21,)]
    with store.open_dataset(root, now=datetime(2034, 12, 30, tzinfo=UTC)) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(20,)]


def test_nan_is_excluded_even_where_file_statistics_leave_it_out(tmp_path: Path) -> None:
    # Contract types exactly: Arrow's writer keeps NaN out of min/max, which DuckDB then trusts to drop a
    # range filter; only an explicit finite check catches the row.
    root = tmp_path / "data"
    rows = gpu_rows("h", "GPU-0", 10, sm=0.5)
    rows[0]["sm_active"], rows[1]["power_w"] = float("nan"), float("nan")
    raw_file(root, schema.SAMPLES, rows)
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*), sum(sm_active), sum(power_w) FROM samples") == [(8, 4.0, 2400.0)]
        assert sorted(ds.rejected_rows()) == [(schema.SAMPLES, "power_w is NaN or infinite", 1),
                                              (schema.SAMPLES, "sm_active is NaN or infinite", 1)]


def test_a_file_without_the_required_columns_is_skipped_naming_it(tmp_path: Path, caplog) -> None:
    root = tmp_path / "data"
    store.write_table(root, schema.SAMPLES, samples_frame(10, hosts=("h",)))
    stranger = store.partition_dir(root, schema.SAMPLES, "h", "2026-03-01") / "stranger.parquet"
    pl.DataFrame({"a": [1, 2], "b": ["x", "y"]}).write_parquet(stranger)
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(10,)]
        assert [p for p, _ in ds.skipped] == [stranger]
        assert "missing required column" in ds.skipped[0][1]
        names = [r[0] for r in ds.fetchall("SELECT column_name FROM (DESCRIBE samples)")]
        assert names == [*schema.column_names(schema.SAMPLES), "date"]  # nothing foreign leaks into the view
    assert str(stranger) in caplog.text


# -------------------------------------------------------------------------------------------- sql output


def test_out_to_a_missing_directory_is_one_line(data: Path, tmp_path: Path) -> None:
    target = tmp_path / "nope" / "x.csv"
    r = run_cli("sql", "-d", str(data), "SELECT 1 AS a", "--format", "csv", "--out", str(target))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"gpuaudit: error: cannot write {target}")
    assert not target.parent.exists()


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_out_to_a_full_disk_is_one_line(data: Path, tmp_path: Path, fmt: str) -> None:
    if not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)):
        pytest.skip("no /dev/full device here")
    full = tmp_path / "full"  # through a link: a writer that deletes its failed output deletes only the link
    full.symlink_to("/dev/full")
    r = run_cli("sql", "-d", str(data), "SELECT * FROM samples", "--format", fmt, "--out", str(full))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "No space left on device" in r.stderr


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_failed_write_leaves_the_old_file_and_no_partial_one(data: Path, tmp_path: Path, fmt: str) -> None:
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    target = out_dir / f"r.{fmt}"
    target.write_text("old\n")

    def small_disk() -> None:  # writes past 8 KiB fail with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    big = "SELECT *, random() AS r FROM samples, range(20)"  # ~100 KB in either format
    r = subprocess.run([sys.executable, "-m", "gpuaudit", "sql", "-d", str(data), big,
                        "--format", fmt, "--out", str(target)], capture_output=True, text=True,
                       preexec_fn=small_disk, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"gpuaudit: error: cannot write {target}")
    assert [p.name for p in out_dir.iterdir()] == [target.name] and target.read_text() == "old\n"


def _result(data: Path, sql: str):
    with store.open_dataset(data) as ds:
        return sqlquery.run_query(ds, sql)


def test_csv_of_nested_values_is_json_text(data: Path) -> None:
    table = _result(data, "SELECT [1, 2] AS l, {'a': 1, 'b': 'x'} AS s, MAP {'k': 1.5::DOUBLE} AS m, "
                          "'\\xAA'::BLOB AS b, 3 AS n")
    [header, row] = list(csv.reader(io.StringIO(sqlquery.write_output(table, "csv", None))))
    assert header == ["l", "s", "m", "b", "n"]
    assert json.loads(row[0]) == [1, 2] and json.loads(row[1]) == {"a": 1, "b": "x"}
    assert json.loads(row[2]) == {"k": 1.5} and row[3] == "aa" and row[4] == "3"


def test_json_output_is_strict_json_and_keeps_duplicate_names(data: Path, tmp_path: Path) -> None:
    def strict(text: str):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))

    table = _result(data, "SELECT 'nan'::DOUBLE AS x, '-inf'::FLOAT AS y, [1.5, 'inf'::DOUBLE] AS l, "
                          "{'v': 'nan'::DOUBLE} AS s, 2.5::DOUBLE AS z")
    assert strict(sqlquery.write_output(table, "json", None)) == [
        {"x": None, "y": None, "l": [1.5, None], "s": {"v": None}, "z": 2.5}]
    table = _result(data, "SELECT 1 AS a, 2 AS a, 3 AS a_1")
    assert strict(sqlquery.write_output(table, "json", None)) == [{"a": 1, "a_2": 2, "a_1": 3}]
    out = tmp_path / "dup.parquet"
    sqlquery.write_output(_result(data, "SELECT 1 AS a, 2 AS a"), "parquet", out)
    assert duckdb.sql(f"SELECT * FROM '{out}'").fetchall() == [(1, 2)]
    assert duckdb.sql(f"SELECT * FROM '{out}'").columns == ["a", "a_1"]
