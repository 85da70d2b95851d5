"""The SQL behind `gpu_streams` (stage 1's de-duplicated streams), without the analyzer's dependencies: the
analyzer materializes it (rollup.py) and `gpuaudit sql` shows it as lazy views (store.py)."""

from __future__ import annotations

from gpuaudit.analysis.stage1.slots import FINE_SLOT_S, HOUR_S, slot_start_sql
from gpuaudit.util.resources import load_sql

STREAMS_TABLE = "gpu_streams"
_STREAMS_SQL = "analysis_streams"
# Where streams cover GPU-hours only in part, those hours are de-duplicated again with one-minute slots:
# (relation, SQL) in the order they are built; the last one is `gpu_streams`.
HOURLY, REFINE, FINE = "gpu_streams_hourly", "refine_hours", "gpu_streams_fine"

# The lines of sql/analysis_streams.sql the one-minute pass changes (each marked there).
_SLOT = f"{slot_start_sql('ts', HOUR_S)} AS slot_s,  -- slot"
_SLOT_LEN = f"{HOUR_S} AS slot_len_s,  -- slot"
_ROWS = "FROM samples  -- rows"


def streams_sql(fine: bool = False) -> str:
    """sql/analysis_streams.sql: hourly slots over every sample, or (`fine`) one-minute slots over the samples
    of the GPU-hours in `refine_hours` only."""
    sql = load_sql(_STREAMS_SQL)
    if not fine:
        return sql
    s = FINE_SLOT_S
    edits = {
        _SLOT: f"{slot_start_sql('ts', s)} AS slot_s,",
        _SLOT_LEN: f"{s} AS slot_len_s,",
        _ROWS: (f"FROM (SELECT s.* FROM samples AS s JOIN {REFINE} AS f ON s.gpu_uuid = f.gpu_uuid "
                "AND coalesce(s.mig_instance, -1) = f.mig_instance "
                f"AND {slot_start_sql('s.ts', HOUR_S)} = f.hour_s) AS samples"),
    }
    for old, new in edits.items():
        if sql.count(old) != 1:  # the marked lines moved: fail loudly rather than de-duplicate wrongly
            raise RuntimeError(f"sql/{_STREAMS_SQL}.sql lacks the marked line {old!r}")
        sql = sql.replace(old, new)
    return sql


# The de-duplicated GPU-hours (stage 1's rollup) as `gpuaudit sql` shows them: what the user queries read.
_GPU_HOURS_VIEW = "gpu_hours"
_ROLLUP_SQL = "analysis_rollup"


def user_views() -> list[tuple[str, str]]:
    """(name, SQL) of the views `gpuaudit sql` adds over `samples`: the streams and `gpu_hours`, the rollup
    the analyzer counts, so the canned user queries agree with `analyze` on overlapping data."""
    return [*_streams_views(), (_GPU_HOURS_VIEW, load_sql(_ROLLUP_SQL))]


def _streams_views() -> list[tuple[str, str]]:
    """(name, SQL) of the relations behind `gpu_streams`, in dependency order (for lazy views)."""
    return [(HOURLY, streams_sql()), (REFINE, load_sql("analysis_refine_hours")), (FINE, streams_sql(fine=True)),
            (STREAMS_TABLE, load_sql("analysis_streams_merge"))]
