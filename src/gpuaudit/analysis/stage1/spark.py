"""Stage 1 on Apache Spark (`gpuaudit analyze --engine spark`): past what one machine's DuckDB scans.

The same stage-1 SQL files run here, translated from DuckDB's dialect by sqlglot, over views that show what
DuckDB's show (`Views`: the same files, partition keys host= and date= discovered from their paths under the
table's basePath, the contract's casts and row rules of conformance.py). The results come back through Arrow
as polars frames with exactly the columns and types DuckDB gives (checked against the same SQL run by DuckDB
over empty views), so stage 2 cannot tell which engine produced them. Imported only when the Spark engine is
asked for: pyspark and sqlglot are the `spark` extra.

The session: the active one when there is one (spark-submit, a notebook, a test), else a local one on every
core of this machine (`local[*]`); JVM options such as the driver's memory go in PYSPARK_SUBMIT_ARGS as for
any PySpark program (e.g. `--driver-memory 8g pyspark-shell`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl

from gpuaudit import schema, store
from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.analysis.stage1.rollup import excluded_lines, rollups_from
from gpuaudit.errors import GpuauditError
from gpuaudit.store import conformance, readers
from gpuaudit.util import fmt, paths

# The contract's DuckDB types (schema.py) as Spark SQL types: each file column is read as what it is stored as.
_SPARK_TYPES = {"TIMESTAMPTZ": "TIMESTAMP", "FLOAT": "FLOAT", "VARCHAR": "STRING", "SMALLINT": "SMALLINT",
                "INTEGER": "INT", "BIGINT": "BIGINT", "DATE": "DATE", "DOUBLE": "DOUBLE"}
# Other types a foreign file's columns may have (DuckDB's names, from its footer), as Spark reads them.
_READ_TYPES = {"TIMESTAMP WITH TIME ZONE": "TIMESTAMP", "TIMESTAMP": "TIMESTAMP_NTZ", "DOUBLE": "DOUBLE",
               "TINYINT": "TINYINT", "BOOLEAN": "BOOLEAN", "BLOB": "BINARY"}


def spark_sql(sql: str) -> str:
    """`sql` (DuckDB's dialect) as Spark SQL. sqlglot translates it; what it maps to Spark functions that mean
    something else, or to none, is written out here:
    - epoch(ts) is seconds WITH the microseconds (a double) in DuckDB; Spark's unix_timestamp drops them;
    - to_timestamp(seconds) becomes Spark's timestamp_seconds, not a round trip through a string in the
      session's time zone (from_unixtime);
    - isfinite(x), which Spark lacks, becomes NOT isnan(x) AND abs(x) <> Infinity."""
    import sqlglot
    from sqlglot import exp

    def epoch(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.TimeToUnix) and not node.args.get("format"):
            micros = exp.Cast(this=exp.Anonymous(this="UNIX_MICROS", expressions=[node.this]),
                              to=exp.DataType.build("DOUBLE"))
            return exp.Paren(this=exp.Div(this=micros, expression=exp.Literal.number(1_000_000)))
        return node

    def isfinite(node: exp.Expression) -> exp.Expression:  # Spark has no isfinite()
        name = node.name.lower() if isinstance(node, exp.Anonymous) else ""
        if name == "isfinite" or type(node).__name__ == "IsFinite":
            x = node.expressions[0] if isinstance(node, exp.Anonymous) else node.this
            inf = exp.Cast(this=exp.Literal.string("Infinity"), to=exp.DataType.build("DOUBLE"))
            return exp.Paren(this=exp.and_(exp.Not(this=exp.Anonymous(this="ISNAN", expressions=[x.copy()])),
                                           exp.NEQ(this=exp.Abs(this=x.copy()), expression=inf)))
        return node

    def to_timestamp(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.UnixToTime) and not node.args.get("scale") and not node.args.get("format"):
            return exp.Anonymous(this="TIMESTAMP_SECONDS", expressions=[node.this])
        return node

    statements = sqlglot.parse(sql, read="duckdb")
    if len(statements) != 1 or statements[0] is None:
        raise GpuauditError(f"stage-1 SQL must be one statement, got {len(statements)}")
    # One rewrite per pass: a pass does not descend into the nodes it just replaced (epoch inside to_timestamp).
    return statements[0].transform(epoch).transform(to_timestamp).transform(isfinite).sql(dialect="spark")


def _table_ddl(table: str) -> str:
    """The Spark schema of a table's view: every contract column as stored, plus the partition keys."""
    cols = [f"`{c.name}` {_SPARK_TYPES[c.sql_type]}" for c in schema.stored_columns(table)]
    return ", ".join([*cols, "`host` STRING", "`date` DATE"])


def session() -> Any:
    """The active SparkSession, else a local one on every core. Time zone UTC either way (like DuckDB's)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise GpuauditError("--engine spark needs Java 17 or newer: no `java` on PATH and no JAVA_HOME "
                            "(e.g. apt-get install default-jre-headless)")
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        builder = SparkSession.builder.appName("gpuaudit")
        if not SparkConf().contains("spark.master"):  # spark-submit sets it; a plain `gpuaudit` runs locally
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local: no guessing at network interfaces
            log4j = Path(__file__).with_name("spark-log4j2.properties")
            builder = (builder.master("local[*]")
                       .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
                       # 200 shuffle partitions (the default, sized for a cluster) cost ~5x on one machine
                       .config("spark.sql.shuffle.partitions", str(4 * (os.cpu_count() or 1))))
        spark = (builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .getOrCreate())
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.debug.maxToStringFields", "200")  # the views are wider than the default 25
    return spark


def _spark_type(duckdb_type: str) -> str | None:
    """A file column's DuckDB type (from its footer) as the Spark type that reads it; None when none does."""
    t = duckdb_type.upper()
    return _SPARK_TYPES.get(t) or _READ_TYPES.get(t) or (t if t.startswith("DECIMAL(") else None)


def _group_ddl(table: str, types: conformance.Types | None) -> str | None:
    """The read schema of one group of files (conformance.group_files): the contract's for files that keep it,
    else their own types (conformance.select then casts them as DuckDB does); None: let Spark infer them."""
    if types is None:
        return None
    contract = {c.name: conformance.duckdb_type(c.sql_type) for c in schema.stored_columns(table)}
    if all(contract.get(n) == t for n, t in types.items() if n in contract):
        return _table_ddl(table)
    cols = []
    for name, typ in types.items():
        if name not in contract:
            continue
        spark_type = _spark_type(typ)
        if spark_type is None:
            raise GpuauditError(f"--engine spark cannot read {table} column {name} of type {typ}: "
                                "use the default engine (DuckDB)")
        cols.append(f"`{name}` {spark_type}")
    return ", ".join([*cols, "`host` STRING", "`date` DATE"])


class _Views:
    """Views `samples` and `processes` on a SparkSession that show exactly what DuckDB's show
    (store.Dataset.view_select): the same files (damaged ones and files outside the contract left out, each
    with a warning), read with partition discovery (host= and date= from the paths under the table's basePath),
    cast and filtered by the same rules (conformance.select, translated)."""

    def __init__(self, spark: Any, root: Path | str) -> None:
        from pyspark.sql import functions as F

        self.spark = spark
        with store.open_dataset(root) as ds:  # footers only: the listing, each file's types, `now`
            self.skipped = list(ds.skipped)
            self.now = ds.now
            self.sources: dict[str, list[tuple[str, conformance.Types | None]]] = {}
            for table, view in schema.VIEW_NAMES.items():
                sources = []
                for i, (types, files) in enumerate(conformance.group_files(table, ds.files[table], ds.types)):
                    read = spark.read.option("basePath", str(Path(root) / table))
                    ddl = _group_ddl(table, types)
                    df = (read.schema(ddl) if ddl else read).parquet(*[str(f) for f in files])
                    name = f"_gpuaudit_{view}_{i}"
                    df.withColumn("filename", F.col("_metadata.file_path")).createOrReplaceTempView(name)
                    sources.append((name, types))
                self.sources[table] = sources
                select = conformance.select(table, sources, now=self.now) if sources else conformance.empty(table)
                spark.sql(spark_sql(select)).createOrReplaceTempView(view)

    def rejected_rows(self) -> list[tuple[str, str, int]]:
        """(table, reason, rows) left out by the rules, most first: as store.Dataset.rejected_rows. Counting
        first is cheap (Parquet row counts, and only the filtered columns)."""
        out = []
        for table, sources in self.sources.items():
            if not sources:
                continue
            every = sum(self._one(f"SELECT count(*) FROM {name}") for name, _ in sources)
            if every == self._one(f"SELECT count(*) FROM {schema.VIEW_NAMES[table]}"):
                continue
            reasons = conformance.select(table, sources, now=self.now, reasons=True)
            rows = self.spark.sql(spark_sql(
                f"SELECT reason, count(*) AS n FROM ({reasons}) WHERE reason IS NOT NULL "
                "GROUP BY reason ORDER BY n DESC, reason")).collect()
            for reason, n in rows:
                logging.getLogger("gpuaudit.store").warning("excluded %s: %s", fmt.count(n, table + " row"), reason)
                out.append((table, reason, n))
        return out

    def _one(self, sql: str) -> int:
        return int(self.spark.sql(sql).collect()[0][0])


class _SparkEngine:
    """The stage-1 Engine (analysis.rollup.Engine) on a SparkSession whose views `samples` and `processes` are
    registered. A DuckDB connection over empty views of the same contract runs each statement too, for the
    column names and types the result must have: the frames come back exactly as DuckDB's would."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.cached: list[Any] = []
        self.shapes = store.connect()
        for table, view in schema.VIEW_NAMES.items():
            self.shapes.execute(f"CREATE VIEW {view} AS {schema.empty_select(table)}")

    def materialize(self, name: str, sql: str) -> None:
        df = self._sql(sql).cache()
        self.cached.append(df)
        df.createOrReplaceTempView(name)
        self.shapes.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")

    def query(self, sql: str) -> pl.DataFrame:
        want = self.shapes.sql(sql).pl().schema
        got = pl.from_arrow(self._run(lambda: self._sql(sql).toArrow()))
        assert isinstance(got, pl.DataFrame)
        missing = [n for n in want if n not in got.columns]
        if missing:
            raise GpuauditError(f"Spark's result lacks the columns {', '.join(missing)}")
        return got.select([pl.col(n).cast(t) for n, t in want.items()])

    def _sql(self, sql: str) -> Any:
        return self._run(lambda: self.spark.sql(spark_sql(sql)))

    @staticmethod
    def _run(fn: Any) -> Any:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        try:
            return fn()
        except (PySparkException, Py4JError) as e:
            text = str(e).strip()
            raise GpuauditError(f"spark: {text.splitlines()[0] if text else type(e).__name__}") from e

    def close(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.shapes.close()


def load_rollups(root: Path | str) -> Rollups:
    """Stage 1 of the dataset at `root` on Spark: the same Rollups load_rollups gives with DuckDB."""
    if paths.as_url(root):
        # Spark would read the objects itself, through the hadoop-aws connector (s3a://) and the cluster's own
        # credentials; gpuaudit does not set that up.
        raise GpuauditError(f"--engine spark reads a dataset on a local or shared filesystem, not {root} (Spark "
                            "reads object storage only as s3a:// through the cluster's hadoop-aws setup, which "
                            "gpuaudit does not configure): use the default engine (DuckDB reads s3:// itself), or "
                            "copy the dataset to a filesystem the Spark workers see (aws s3 sync) and give that path")
    spark = session()
    # Spark reads the files Views listed later, on its own: held like an open Dataset, so that a compaction
    # meanwhile keeps them (store/readers.py).
    hold = readers.hold(Path(root))
    try:
        views = _Views(spark, root)
        engine = _SparkEngine(spark)
        try:
            roll = rollups_from(engine)
            rejected = engine._run(views.rejected_rows)
        finally:
            engine.close()
    finally:
        readers.release(hold)
    return dataclasses.replace(roll, skipped_files=tuple(f"{p}: {why}" for p, why in views.skipped),
                               rejected_rows=excluded_lines(rejected))
