"""Which time slot a sample counts in, the one rule every stage-1 query and the analyzer share: a sample belongs
to the slot in which its interval ENDS (`ts` is the end), and an interval ending exactly on a boundary belongs to
the slot before. Slots: the hour (the rollup's GPU-hours), the demand series' 300 s bucket, and the one-minute
slot of the partial-overlap pass.

The SQL files (sql/analysis_*.sql, portable: the same files run on Spark) spell the rule out; a test checks that
every spelling there is `slot_start_sql`'s, with these widths."""

from __future__ import annotations

import math

HOUR_S = 3600
DEMAND_BUCKET_S = 300.0  # the demand series' bucket (sql/analysis_demand*.sql)
FINE_SLOT_S = 60  # where streams overlap an hour only in part, it is de-duplicated per minute
_END_S = 0.001  # an end exactly on a boundary counts in the slot before


def slot_start_sql(ts: str, width_s: int | float | str) -> str:
    """SQL for the start (epoch seconds) of the `width_s` slot in which the interval ending at `ts` ends."""
    return f"floor((epoch({ts}) - {_END_S}) / {width_s}) * {width_s}"


def slot_index(end_s: float, width_s: float = HOUR_S) -> int:
    """The slot (index since the epoch) in which an interval ending at `end_s` ends (as slot_start_sql)."""
    return math.floor((end_s - _END_S) / width_s)
