"""Stage 1 on Apache Spark (`--engine spark`): the same SQL files over the same Hive layout give the same rollups
and the same analysis as DuckDB; the README's Spark snippet works as written.

Starting a SparkSession (a JVM) costs ~10 CPU-s and its first queries ~20 more, and xdist spreads a module's
tests over its workers: so ONE test does everything that needs the session, the README's snippet included.
Select them with `pytest -m spark`. They need Java 17+ and pyspark: without them they skip on a laptop and fail
in CI (.ci/run installs both)."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from tests.analysis_helpers import T0, ends, gpu_rows, proc_rows, write
from tests.helpers import REPO, in_ci, require_binary

from gpuaudit import schema
from gpuaudit.analysis.stage1.rollup import load_rollups
from gpuaudit.errors import GpuauditError

pytestmark = pytest.mark.spark

REL_TOL = 1e-6  # Spark widens `CASE ... THEN <float> ELSE 0` to DOUBLE where DuckDB keeps FLOAT: float32 rounding
# Hosts Spark must decode from the directory names exactly as DuckDB does: percent-encoded, numeric-looking.
ODD_HOSTS = ("gpu node/7", "1234")
README_SNIPPET = re.compile(r"```python\n(# Spark .*?)```", re.S)


def require_spark() -> None:
    require_binary("java", "install a Java 17+ runtime (apt-get install default-jre-headless)")
    try:
        import pyspark  # noqa: F401
        import sqlglot  # noqa: F401
    except ImportError:
        if in_ci():
            pytest.fail("pyspark / sqlglot missing: pip install -e '.[spark]'")
        pytest.skip("pyspark / sqlglot missing: pip install -e '.[spark]'")


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The local session `gpuaudit analyze --engine spark` starts; the commands below find it and reuse it. Its
    JVM starts in an empty directory, `spark.workdir`: relative paths (the README's) resolve there."""
    require_spark()
    from gpuaudit.analysis.stage1.spark import session

    workdir = tmp_path_factory.mktemp("spark-cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(workdir)
        s = session()
    # Kilobytes of data: Spark's fixed costs per query (code generation, adaptive re-planning, 8 shuffle
    # partitions) were most of this module's minute. They change how Spark runs a query, not what it computes.
    s.conf.set("spark.sql.codegen.wholeStage", "false")
    s.conf.set("spark.sql.adaptive.enabled", "false")
    s.conf.set("spark.sql.shuffle.partitions", "2")
    s.workdir = workdir
    yield s
    s.stop()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated fleet, plus what real data has and the simulator does not: timestamps off the whole
    second (on and across bucket boundaries), MIG slices, a duty-cycle-only source, the same GPU reported by two
    hosts (de-duplication), host names that need decoding, processes without a user."""
    from gpuaudit.sim.bulk import simulate

    root = tmp_path_factory.mktemp("spark") / "data"
    simulate(root, "mixed", gpus=8, days=2, interval_s=300, seed=3, start=T0)
    off = T0 + dt.timedelta(seconds=0.5)  # ends at k*60 + 0.5 s: truncating to whole seconds moves buckets
    busy = gpu_rows(ODD_HOSTS[0], "GPU-odd-0", 300, start=off, sm=lambda i: (i % 7) / 10, procs=lambda i: i % 3)
    mig = gpu_rows(ODD_HOSTS[0], "GPU-odd-1", 200, start=off, sm=0.6, procs=1, mig_instance=2, gpu_fraction=3 / 7)
    duty = gpu_rows(ODD_HOSTS[1], "GPU-duty-0", 240, interval_s=30.25, start=off, sm=None, duty=lambda i: i % 2,
                    procs=1, source=schema.SOURCE_NVML)
    copy = gpu_rows(ODD_HOSTS[1], "GPU-odd-0", 100, start=off, sm=0.2, procs=1)  # GPU-odd-0 under a 2nd host
    procs = (proc_rows(ODD_HOSTS[0], "GPU-odd-0", ends(busy, lambda i: i % 3 > 0), user="ana.k", job_id="77")
             + proc_rows(ODD_HOSTS[0], "GPU-odd-1", ends(mig), user=None, mig_instance=2)  # type: ignore[arg-type]
             + proc_rows(ODD_HOSTS[1], "GPU-duty-0", ends(duty), pod="coder-1", pid=9))
    write(root, busy + mig + duty + copy, procs)
    # A foreign exporter's file, dropped in by hand: DOUBLE where the contract has FLOAT, sm_active as text,
    # and rows the views must leave out (text that is no number, NaN, a ts far in the future); and a Parquet
    # file that is not a gpuaudit table at all.
    part = root / schema.SAMPLES / "host=foreign" / f"date={T0:%Y-%m-%d}"
    part.mkdir(parents=True)
    duckdb.execute(f"""COPY (SELECT
        CASE WHEN i = 119 THEN TIMESTAMPTZ '2099-01-01 00:00:00+00'
             ELSE TIMESTAMPTZ '{T0.isoformat()}' + to_seconds(i * 60 + 60) END AS ts,
        60.0::DOUBLE AS interval_s, 'GPU-foreign' AS gpu_uuid, 1.0::DOUBLE AS gpu_fraction,
        CASE WHEN i % 10 = 3 THEN 'n/a' ELSE (i % 5 / 10)::VARCHAR END AS sm_active,
        CASE WHEN i % 7 = 0 THEN 'NaN'::DOUBLE ELSE 0.5 END AS duty_cycle,
        (i % 2)::SMALLINT AS n_processes, 'prometheus-dcgm' AS source
        FROM range(120) t(i)) TO '{part / "foreign.parquet"}'""")
    duckdb.execute(f"COPY (SELECT 1 AS x) TO '{part / 'not-ours.parquet'}'")
    return root


def _float_columns(df: pl.DataFrame) -> list[str]:
    return [n for n, t in df.schema.items() if t.is_float()]


def assert_frames_close(duck: pl.DataFrame, spark: pl.DataFrame, name: str) -> None:
    assert spark.schema == duck.schema, name  # names, order and types: stage 2 cannot tell the engines apart
    assert spark.height == duck.height > 0, name
    keys = [n for n in duck.columns if n not in _float_columns(duck)]
    duck, spark = duck.sort(keys, nulls_last=True), spark.sort(keys, nulls_last=True)
    for col in duck.columns:
        a, b = duck[col].to_list(), spark[col].to_list()
        if col in keys:
            assert a == b, f"{name}.{col}"
        else:
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                assert (x is None and y is None) or math.isclose(x, y, rel_tol=REL_TOL, abs_tol=1e-9), \
                    f"{name}.{col}[{i}]: duckdb {x} spark {y}"


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
        assert math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_spark_engine_gives_what_duckdb_gives(spark: Any, dataset: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Stage 1's rollups, `analyze --engine spark`'s decision and figures, and the files left out: as DuckDB's;
    and the README's Spark snippet works as written."""
    from typer.testing import CliRunner

    from gpuaudit.analysis.stage1 import spark as spark_stage1
    from gpuaudit.analysis.stage1.spark import load_rollups as spark_rollups
    from gpuaudit.cli import app

    # 1. The command: in this process it finds the module's session and uses it. The rollups it computes are
    # kept for 2 (one Spark pass over the dataset, not two: each costs about 20 s here).
    out, seen = {}, []

    def recorded(root: Path | str) -> Any:
        seen.append(spark_rollups(root))
        return seen[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spark_stage1, "load_rollups", recorded)  # what pipeline.run imports when engine is spark
        for engine in ("duckdb", "spark"):
            r = CliRunner().invoke(app, ["analyze", "--data", str(dataset), "--json", "--engine", engine])
            assert r.exit_code == 0, r.output
            out[engine] = json.loads(r.stdout)
    assert len(seen) == 1, "analyze --engine spark did not run stage 1 on Spark"
    _close(out["duckdb"], out["spark"])
    assert out["spark"]["decision"] == out["duckdb"]["decision"]

    # 2. The rollup frames: same columns and types, same rows, every value.
    duck, sp = load_rollups(dataset, cache=False), seen[0]
    for name in ("gpu_hours", "demand", "holders"):
        assert_frames_close(getattr(duck, name), getattr(sp, name), name)
    hours = sp.gpu_hours
    assert set(ODD_HOSTS) <= set(hours["host"].to_list())  # decoded from host=gpu%20node%2F7 and typed VARCHAR
    assert hours.filter(pl.col("mig_instance") == 2)["gpu_fraction"].max() == pytest.approx(3 / 7)
    assert hours["fallback_s"].sum() > 0 and hours["overlap_s"].sum() > 0
    assert "(unknown)" in sp.holders["user"].to_list()
    # The same files and rows left out, for the same reasons (conformance.py's rules, run by Spark).
    assert sp.rejected_rows == duck.rejected_rows and len(sp.rejected_rows) == 3, sp.rejected_rows
    assert sp.skipped_files == duck.skipped_files and "not-ours.parquet" in sp.skipped_files[0]
    assert "GPU-foreign" in hours["gpu_uuid"].to_list()  # its convertible rows are in

    # 3. A damaged file is left out with a warning by both engines, not fatal to Spark.
    root = tmp_path / "data"
    write(root, gpu_rows("node-a", "GPU-a", 30, sm=0.5))
    part = next((root / schema.SAMPLES).rglob("*.parquet")).parent
    (part / "torn.parquet").write_bytes(b"PAR1 not really")
    duck, sp = load_rollups(root), spark_rollups(root)
    assert [s.split(":")[0] for s in sp.skipped_files] == [s.split(":")[0] for s in duck.skipped_files] == \
        [str(part / "torn.parquet")]
    assert_frames_close(duck.gpu_hours, sp.gpu_hours, "gpu_hours")

    # 4. The README's snippet, as written, where ./gpuaudit-data is (on this session: a second JVM would double
    # the cost of this module). Spark discovers host= and date= and decodes the host names.
    snippet = README_SNIPPET.search((REPO / "README.md").read_text())
    assert snippet, "README.md lost its Spark snippet"
    rows = gpu_rows("node-a", "GPU-a", 30, sm=0.5) + gpu_rows(ODD_HOSTS[0], "GPU-b", 12, sm=0.25)
    write(spark.workdir / "gpuaudit-data", rows)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(spark.workdir)
        exec(compile(snippet.group(1), "README.md", "exec"), {})
    table = {m.group(1).strip(): (int(m.group(2)), float(m.group(3)))
             for m in re.finditer(r"^\|([^|]+)\|\s*(\d+)\|\s*([\d.]+)\|$", capsys.readouterr().out, re.M)}
    assert table == {"node-a": (30, 0.5), "gpu node/7": (12, 0.25)}


def test_spark_sql_keeps_what_duckdb_means() -> None:
    pytest.importorskip("sqlglot")  # no JVM needed
    from gpuaudit.analysis.stage1.spark import load_rollups as spark_rollups
    from gpuaudit.analysis.stage1.spark import spark_sql

    sql = spark_sql("SELECT epoch(ts) AS s, to_timestamp(floor(epoch(ts) / 3600) * 3600) AS h FROM samples")
    # epoch() keeps the microseconds in DuckDB; Spark's unix_timestamp would drop them
    assert "UNIX_MICROS(ts)" in sql and "UNIX_TIMESTAMP" not in sql
    assert "TIMESTAMP_SECONDS(" in sql and "FROM_UNIXTIME" not in sql
    with pytest.raises(GpuauditError, match="one statement"):
        spark_sql("SELECT 1; SELECT 2")
    with pytest.raises(GpuauditError, match="--engine spark reads a dataset on a"):
        spark_rollups("s3://bucket/fleet")


def test_missing_spark_says_which_extra() -> None:
    from gpuaudit.cli._common import missing_extra_message

    assert missing_extra_message(ModuleNotFoundError(name="pyspark.sql"), "gpuaudit analyze") == \
        "gpuaudit analyze needs Apache Spark: pip install 'gpuaudit[spark]'"


