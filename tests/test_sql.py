"""`gpuaudit sql` and `gpuaudit compact` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from tests.helpers import REPO, run_cli
from tests.store_helpers import samples_frame

from gpuaudit import schema, store


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    store.write_table(root, schema.SAMPLES, samples_frame(600))
    return root


def test_table_output_is_aligned(data: Path) -> None:
    r = run_cli("sql", "--data", str(data), "SELECT host, count(*) AS n FROM samples GROUP BY host ORDER BY host")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["host    n", "------  ---", "node-a  300", "node-b  300", "(2 rows)"]


def test_csv_json_parquet_outputs(data: Path, tmp_path: Path) -> None:
    q = "SELECT host, sum(sm_active) AS s FROM samples GROUP BY host ORDER BY host"
    csv = run_cli("sql", "-d", str(data), q, "--format", "csv")
    assert csv.stdout.splitlines()[0] == '"host","s"' and len(csv.stdout.splitlines()) == 3
    js = json.loads(run_cli("sql", "-d", str(data), q, "--format", "json").stdout)
    assert [r["host"] for r in js] == ["node-a", "node-b"]
    assert js[0]["s"] == pytest.approx(120.0, rel=1e-4)  # node-a: 0, .2, .4, .6, .8, 60 times each
    out = tmp_path / "r.parquet"
    assert run_cli("sql", "-d", str(data), q, "--format", "parquet", "--out", str(out)).returncode == 0
    assert duckdb.sql(f"SELECT count(*) FROM '{out}'").fetchall() == [(2,)]
    r = run_cli("sql", "-d", str(data), q, "--format", "parquet")
    assert r.returncode != 0 and "needs --out" in r.stderr


def test_data_from_environment_variable(data: Path) -> None:
    r = run_cli("sql", "SELECT count(*) AS n FROM samples", env={"GPUAUDIT_DATA": str(data)})
    assert r.returncode == 0 and "600" in r.stdout


@pytest.mark.parametrize(
    "statement",
    [
        "COPY samples TO '/tmp/x.csv'",
        "ATTACH '/tmp/x.db'",
        "CREATE TABLE t AS SELECT 1",
        "INSERT INTO samples SELECT * FROM samples",
        "SET threads = 1",
        "INSTALL httpfs",
        "SELECT 1; DROP VIEW samples",
    ],
)
def test_writes_and_attaches_are_refused(data: Path, statement: str) -> None:
    r = run_cli("sql", "-d", str(data), statement)
    assert r.returncode == 2
    assert r.stderr.startswith("gpuaudit: error: refused:") or "one statement" in r.stderr
    assert "Traceback" not in r.stderr


def test_errors_are_one_line(data: Path, tmp_path: Path) -> None:
    for args in (["SELEC 1"], ["SELECT nope FROM samples"], ["--file", "sql/no_such.sql"],
                 ["SELECT 1", "--format", "xml"]):
        r = run_cli("sql", "-d", str(data), *args)
        assert r.returncode != 0 and "Traceback" not in r.stderr, args
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("gpuaudit: error:"), r.stderr
    r = run_cli("sql", "-d", str(tmp_path / "missing"), "SELECT 1")
    assert r.returncode == 2 and "no dataset at" in r.stderr


def test_canned_queries_run_from_any_directory(data: Path, tmp_path: Path) -> None:
    r = run_cli("sql", "-d", str(data), "--file", "sql/fleet_summary.sql", "--format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)
    assert row["gpus"] == 2 and row["sample_rows"] == 600
    assert row["real_util"] == pytest.approx(0.45, abs=1e-6)  # sm_active cycles 0.0 .. 0.9
    assert row["runtime_util"] == pytest.approx(0.5)
    lines = run_cli("sql", "--list").stdout.splitlines()
    listed = [line.split()[0] for line in lines]
    # Users see their queries with a line each; the analyzer's own stage-1 queries are not listed.
    assert sorted(p.stem for p in (REPO / "sql").glob("*.sql") if not p.stem.startswith("analysis_")) == sorted(listed)
    assert {"fleet_summary", "gpu_summary"} <= set(listed)
    assert all(len(line.split(None, 1)) == 2 for line in lines), lines  # a description on every line


def test_views_statements_work_in_a_plain_duckdb_client(data: Path) -> None:
    r = run_cli("sql", "-d", str(data), "--views")
    con = duckdb.connect()
    for statement in filter(str.strip, r.stdout.split(";\n")):
        con.execute(statement)
    assert con.sql("SELECT count(*) FROM samples").fetchall() == [(600,)]
    assert con.sql("SELECT count(*) FROM processes").fetchall() == [(0,)]


def test_corrupt_file_warns_and_query_still_answers(data: Path) -> None:
    victim = sorted(data.rglob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    r = run_cli("sql", "-d", str(data), "SELECT count(*) AS n FROM samples")
    assert r.returncode == 0
    assert "420" in r.stdout
    assert f"gpuaudit: warning: skipping unreadable file {victim}" in r.stderr


def test_compact_command(data: Path) -> None:
    store.write_table(data, schema.SAMPLES, samples_frame(600))
    r = run_cli("compact", "-d", str(data))
    assert r.returncode == 0, r.stderr
    assert "compacted 4 partitions: 8 files -> 4" in r.stdout
    assert store.open_dataset(data).fetchall("SELECT count(*) FROM samples") == [(1200,)]


def test_canned_stage_one_queries_run_in_gpuaudit_sql(data: Path) -> None:
    """sql/analysis_rollup.sql and analysis_demand.sql read the de-duplicating view `gpu_streams`: the same totals
    as the analyzer's rollup."""
    from gpuaudit.analysis.stage1.rollup import load_rollups

    roll = load_rollups(data)
    for name, frame in (("analysis_rollup", roll.gpu_hours), ("analysis_demand", roll.demand)):
        r = run_cli("sql", "-d", str(data), "--file", f"sql/{name}.sql", "--format", "json")
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        assert len(rows) == frame.height
        assert sum(x["observed_s"] for x in rows) == pytest.approx(float(frame["observed_s"].sum()))
