"""What the reader, `gpuaudit sql`, compaction records and gpuaudit's JSON files accept: a percent-valued file
is excluded whole, journals that name each other, deeply nested JSON, unknown statement types, `--out`,
out-of-range timestamps and CSV on stdout each end in a right answer or one error line, never a wrong read."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.analysis_helpers import T0, gpu_rows, write
from tests.helpers import one_error_line, run_cli
from tests.store_helpers import _fragmented, count, raw_file, samples_frame

from gpuaudit import schema, store
from gpuaudit.util import jsonio

DEEP = "[" * 5000 + "]" * 5000  # deeper than Python's recursion limit


def no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr and not re.search(r"^\w+(Error|Exception)\b", r.stderr, re.M), r.stderr


# ---------------------------------------------------------------------------- a percent-valued file, excluded whole


def _idle_fleet(root: Path) -> Path:
    """Day 1 in fractions (2 % SM activity, 3 % duty cycle); day 2 the same fleet written in percent (sm_active
    0-2, duty_cycle 0-3): most of its values are <= 1 and would pass a per-row 0-1 check as 0-100 %."""
    write(root, gpu_rows("h", "GPU-0", 1439, sm=0.02, duty=0.03, procs=1))
    day2 = gpu_rows("h", "GPU-0", 1439, start=T0 + timedelta(days=1), sm=lambda i: float(i % 3),
                    duty=lambda i: float(i % 4), procs=1)
    return raw_file(root, schema.SAMPLES, day2, "percent")


def test_a_percent_file_of_an_idle_fleet_is_excluded_whole(tmp_path: Path) -> None:
    from gpuaudit.analysis import analyze

    root = tmp_path / "data"
    percent = _idle_fleet(root)
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(1439,)]
        [(path, why)] = ds.skipped
        assert path == percent and "values above 1: percent, not fractions?" in why and "sm_active" in why
        assert ds.rejected_rows() == []
    assert analyze(root).utilization.real_utilization.value == pytest.approx(0.02, abs=0.002)
    r = run_cli("sql", "-d", str(root), "SELECT count(*) AS n FROM samples", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"n": 1439}], r.stderr
    assert str(percent) in r.stderr and "percent, not fractions?" in r.stderr


@pytest.mark.parametrize("how", ["text", "no statistics"])
def test_a_percent_file_is_found_without_usable_statistics(tmp_path: Path, how: str) -> None:
    root = tmp_path / "data"
    write(root, gpu_rows("h", "GPU-0", 100, sm=0.5, procs=1))
    rows = gpu_rows("h", "GPU-1", 100, sm=lambda i: float(i % 3), procs=1)
    if how == "text":  # text statistics compare as text ("10" < "9"): the values themselves are read
        raw_file(root, schema.SAMPLES, rows, "percent",
                 change=lambda f: f.with_columns(pl.col("sm_active").cast(pl.String)))
    else:
        path = raw_file(root, schema.SAMPLES, rows, "percent")
        pq.write_table(pq.read_table(path), path, write_statistics=False)
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(100,)]
        assert [p.name for p, _ in ds.skipped] == ["percent.parquet"]


def test_compact_leaves_a_percent_file_out_of_the_merge(tmp_path: Path) -> None:
    root = tmp_path / "data"
    percent = _idle_fleet(root)
    part = percent.parent
    for k in range(2):  # two good files in the percent file's partition
        write(root, gpu_rows("h", f"GPU-{k + 1}", 10, start=T0 + timedelta(days=1), sm=0.5))
    assert count(root) == 1439 + 20
    stats = store.compact(root)
    assert percent.exists() and (percent, stats.skipped[0][1]) in stats.skipped
    assert len(list(part.glob("*.parquet"))) == 2  # the merged good files, and the percent file as it was
    assert count(root) == 1439 + 20


# ----------------------------------------------------------------------------- journals that name each other


def _cycle(root: Path) -> tuple[Path, str, str]:
    _fragmented(root, writes=2, hosts=1)
    part = store.partition_dir(root, schema.SAMPLES, "node-0", "2026-03-01")
    a, b = sorted(f.name for f in part.glob("*.parquet"))
    (part / ".compact-x.json").write_text(json.dumps({"new": a, "old": [b]}), encoding="utf-8")
    (part / ".compact-y.json").write_text(json.dumps({"new": b, "old": [a]}), encoding="utf-8")
    return part, a, b


def test_journals_that_name_each_other_hide_and_delete_nothing(tmp_path: Path, caplog) -> None:
    root = tmp_path / "data"
    part, a, b = _cycle(root)
    assert count(root) == 40  # both files shown
    assert "cycle" in caplog.text and str(part) in caplog.text
    assert store.finish_journals(part) == 0
    assert (part / a).exists() and (part / b).exists()
    store.compact(root)
    assert count(root) == 40  # merged, nothing lost


def test_push_never_prunes_on_journals_that_name_each_other(tmp_path: Path) -> None:
    from gpuaudit.push import push

    root, target = tmp_path / "data", tmp_path / "target"
    _cycle(root)
    push(root, target)
    assert count(target) == 40
    assert len(list(target.rglob("*.parquet"))) == 2


def test_a_chain_of_compactions_still_hides_its_inputs(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _fragmented(root, writes=3, hosts=1)
    part = store.partition_dir(root, schema.SAMPLES, "node-0", "2026-03-01")
    a, b, c = sorted(f.name for f in part.glob("*.parquet"))
    # c merged a (a duplicate of a's rows, as a collection target can hold), then b merged c
    (part / ".compact-1.json").write_text(json.dumps({"new": c, "old": [a]}), encoding="utf-8")
    (part / ".compact-2.json").write_text(json.dumps({"new": b, "old": [c]}), encoding="utf-8")
    assert count(root) == 20


# ---------------------------------------------------------------------------------------- deeply nested JSON


def test_read_json_file_turns_every_failure_into_value_error(tmp_path: Path) -> None:
    for i, content in enumerate([DEEP.encode(), b"\xff\xfe", b"{", b""]):
        f = tmp_path / f"{i}.json"
        f.write_bytes(content)
        with pytest.raises(ValueError):
            jsonio.read_json_file(f)
    with pytest.raises(OSError):
        jsonio.read_json_file(tmp_path / "missing.json")
    assert jsonio.loads(b'{"a": [1]}') == {"a": [1]}


def test_deeply_nested_json_files_are_malformed_not_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _fragmented(root, writes=2, hosts=1)
    part = store.partition_dir(root, schema.SAMPLES, "node-0", "2026-03-01")
    (part / ".compact-x.json").write_text(DEEP, encoding="utf-8")
    (root / "simulation.json").write_text(DEEP, encoding="utf-8")
    (root / "agent-status-h.json").write_text(DEEP, encoding="utf-8")
    r = run_cli("sql", "-d", str(root), "SELECT count(*) AS n FROM samples", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"n": 40}], r.stderr
    assert "malformed compaction journal" in r.stderr
    r = run_cli("agent", "status", "-d", str(root), "--host", "h", "--simulate", "idle")
    no_traceback(r)
    r = run_cli("simulate", "-d", str(root), "--gpus", "8", "--days", "1", "--force")
    # The unreadable simulation.json is named in a warning, then the refusal is the one error line.
    warning, error = r.stderr.strip().splitlines()
    assert warning.startswith("gpuaudit: warning: ignoring unreadable") and "simulation.json" in warning, warning
    one_error_line(subprocess.CompletedProcess(r.args, r.returncode, r.stdout, error), "not written by `gpuaudit "
                   "simulate`")
    r = run_cli("compact", "-d", str(root))
    assert r.returncode == 0, r.stderr
    assert count(root) == 40
    r = run_cli("push", "-d", str(root), "--to", str(tmp_path / "target"))
    assert r.returncode == 0, r.stderr
    manifest = next((root / ".push").rglob("manifest.jsonl"))
    manifest.write_text(DEEP + "\n" + manifest.read_text(encoding="utf-8"), encoding="utf-8")
    r = run_cli("push", "-d", str(root), "--to", str(tmp_path / "target"))
    assert r.returncode == 0, r.stderr
    assert count(tmp_path / "target") == 40


# ---------------------------------------------------------------------------------- unknown statement types


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    store.write_table(root, schema.SAMPLES, samples_frame(60))
    return root


@pytest.mark.parametrize("query", ["UPDATE EXTENSIONS", "EXPLAIN ANALYZE UPDATE EXTENSIONS",
                                   "SELECT 1; UPDATE EXTENSIONS"])
def test_update_extensions_is_refused_in_one_line(data: Path, query: str) -> None:
    one_error_line(run_cli("sql", "-d", str(data), query), "refused", "read-only")


# ------------------------------------------------------------------------------------------------- --out


def test_out_below_a_regular_file_is_one_line(data: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("keep", encoding="utf-8")
    one_error_line(run_cli("sql", "-d", str(data), "SELECT 1", "--out", str(tmp_path / "afile" / "x.csv")),
                   "cannot write", "Not a directory")
    assert (tmp_path / "afile").read_text(encoding="utf-8") == "keep"


def test_out_to_a_url_is_refused(data: Path, tmp_path: Path) -> None:
    (tmp_path / "s3:" / "bucket").mkdir(parents=True)  # where Path("s3://bucket/x.csv") would land
    r = run_cli("sql", "-d", str(data), "SELECT 1", "--format", "csv", "--out", "s3://bucket/x.csv", cwd=tmp_path)
    one_error_line(r, "s3://bucket/x.csv", "local")
    assert [p.name for p in (tmp_path / "s3:").rglob("*")] == ["bucket"]  # nothing written into it


def test_out_with_an_unknown_user_is_one_line(data: Path) -> None:
    one_error_line(run_cli("sql", "-d", str(data), "SELECT 1", "--out", "~nouser-gpuaudit/x.csv"), "~")


# ---------------------------------------------------------------------------------- out-of-range timestamps


@pytest.mark.parametrize("value", ["infinity", "-infinity", "294247-01-10"])
@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_timestamps_python_cannot_hold_are_shown_as_text(data: Path, value: str, fmt: str) -> None:
    r = run_cli("sql", "-d", str(data), f"SELECT '{value}'::timestamp AS t, 1 AS n", "--format", fmt)
    assert r.returncode == 0, r.stderr
    if fmt == "json":
        [row] = json.loads(r.stdout)
        assert row["n"] == 1 and value.lstrip("-").split("-")[0] in row["t"]
    else:
        assert value.lstrip("-").split("-")[0] in r.stdout


@pytest.mark.parametrize("value", ["infinity", "294247-01-10"])
def test_timestamps_python_cannot_hold_in_parquet(data: Path, tmp_path: Path, value: str) -> None:
    out = tmp_path / "x.parquet"
    r = run_cli("sql", "-d", str(data), f"SELECT '{value}'::timestamp AS t", "--format", "parquet", "--out", str(out))
    no_traceback(r)
    if r.returncode:
        one_error_line(r, str(out))
        assert not out.exists()
    else:
        assert pq.read_table(out).num_rows == 1


# --------------------------------------------------------------------------------------- CSV on stdout


def test_csv_on_stdout_escapes_control_characters_and_a_file_keeps_them(data: Path, tmp_path: Path) -> None:
    query = "SELECT chr(27) || '[31mred' || chr(13) || 'x' || chr(155) AS a"
    r = run_cli("sql", "-d", str(data), query, "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout == '"a"\n"\\x1b[31mred\\x0dx\\x9b"\n'
    out = tmp_path / "x.csv"
    assert run_cli("sql", "-d", str(data), query, "--format", "csv", "--out", str(out)).returncode == 0
    assert out.read_bytes() == '"a"\n"\x1b[31mred\rx\x9b"\n'.encode()


# --------------------------------------------------------------------------------------------------- minor


def test_a_boolean_fraction_column_excludes_its_file(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write(root, gpu_rows("h", "GPU-0", 10, sm=0.25))
    bad = raw_file(root, schema.SAMPLES, gpu_rows("h", "GPU-1", 10, sm=0.0), "bools",
                   change=lambda f: f.with_columns(pl.lit(True).alias("sm_active")))
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*), max(sm_active) FROM samples") == [(10, 0.25)]
        [(path, why)] = ds.skipped
        assert path == bad and "sm_active" in why and "BOOLEAN" in why


def test_a_date_typed_ts_excludes_its_file(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write(root, gpu_rows("h", "GPU-0", 10, sm=0.25))
    bad = raw_file(root, schema.SAMPLES, gpu_rows("h", "GPU-1", 10, sm=0.5), "dates",
                   change=lambda f: f.with_columns(pl.col("ts").dt.date()))
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(10,)]
        [(path, why)] = ds.skipped
        assert path == bad and "ts" in why and "DATE" in why and "TIMESTAMP" in why


def test_reading_a_dataset_file_as_csv_does_not_call_it_unreadable(data: Path) -> None:
    f = next(data.rglob("*.parquet"))
    r = run_cli("sql", "-d", str(data), f"SELECT * FROM read_csv('{f}')")
    assert "skipping" not in r.stderr and "unreadable" not in r.stderr, r.stderr
    one_error_line(r)
    assert count(data) == 60


def test_an_empty_query_file_says_so(data: Path, tmp_path: Path) -> None:
    # /dev/null is not a regular file (tests/test_sql_limits.py): an empty file is
    (tmp_path / "empty.sql").write_text("  \n", encoding="utf-8")
    one_error_line(run_cli("sql", "-d", str(data), "-f", str(tmp_path / "empty.sql")), "empty query file")


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    from gpuaudit.analysis.config import load_config

    cfg = tmp_path / "costs.toml"
    cfg.write_text("\ufeff[decision]\nmin_trial_hours = 30\n", encoding="utf-8")
    assert load_config(cfg).decision.min_trial_hours == 30


def _invalid_utf8(path: Path, column: str) -> None:
    """Rewrite `path` with every other value of a string column as bytes that are not UTF-8."""
    t = pq.read_table(path)
    i = t.schema.get_field_index(column)
    values = [(b"GPU-\xff" if k % 2 else v.encode()) for k, v in enumerate(t.column(i).to_pylist())]
    pq.write_table(t.set_column(i, column, pa.array(values, pa.binary()).view(pa.string())), path)


def test_a_file_with_invalid_utf8_is_excluded_by_sql_as_by_analyze(tmp_path: Path) -> None:
    from gpuaudit.analysis import analyze

    root = tmp_path / "data"
    write(root, gpu_rows("h", "GPU-0", 1439, sm=0.5, procs=1))
    bad = raw_file(root, schema.SAMPLES, gpu_rows("h", "GPU-1", 1439, start=T0 + timedelta(days=1), sm=0.2, procs=1))
    _invalid_utf8(bad, "gpu_name")
    r = run_cli("sql", "-d", str(root), "SELECT count(*) AS n FROM samples", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"n": 1439}], r.stderr
    assert str(bad) in r.stderr and "UTF" in r.stderr
    result = analyze(root)
    assert result.utilization.real_utilization.value == pytest.approx(0.5)
    assert any(str(bad) in w and "UTF" in w for w in result.data_quality.warnings)



def test_a_file_failing_while_values_are_checked_leaves_the_others_checked(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write(root, gpu_rows("h", "GPU-0", 10, sm=0.25))
    percent = raw_file(root, schema.SAMPLES, gpu_rows("h", "GPU-1", 10, sm=lambda i: float(i % 3)), "percent")
    text = raw_file(root, schema.SAMPLES, gpu_rows("h", "GPU-2", 10, sm=0.5), "text",
                    change=lambda f: f.with_columns(pl.col("sm_active").cast(pl.String)))
    _invalid_utf8(text, "sm_active")  # its values are read (text): the read fails
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(10,)]
        assert sorted(p.name for p, _ in ds.skipped) == [percent.name, text.name]


def test_a_foreign_filename_column_does_not_break_rejected_rows(tmp_path: Path) -> None:
    root = tmp_path / "data"
    rows = gpu_rows("h", "GPU-0", 10, sm=0.5)
    rows[0]["power_w"] = -1.0
    path = raw_file(root, schema.SAMPLES, rows, change=lambda f: f.with_columns(pl.lit("x.csv").alias("filename")))
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT count(*) FROM samples") == [(9,)]
        assert ds.rejected_rows() == [(schema.SAMPLES, "power_w negative", 1)]
        assert ds.fetchall(f"SELECT DISTINCT filename FROM ({ds.view_select(schema.SAMPLES, reasons=True)})") == [
            (str(path),)]


def test_a_deeply_nested_config_is_one_line(tmp_path: Path) -> None:
    from gpuaudit.analysis.config import load_config
    from gpuaudit.errors import GpuauditError

    cfg = tmp_path / "deep.toml"
    cfg.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(GpuauditError, match="nests too deeply"):
        load_config(cfg)


def test_sql_file_expands_home_and_names_an_unknown_user(tmp_path: Path) -> None:
    r = run_cli("sql", "-d", str(tmp_path), "--file", "~no-such-user-gpuaudit/q.sql")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "cannot expand" in r.stderr and len(r.stderr.strip().splitlines()) == 1
