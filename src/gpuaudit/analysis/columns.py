"""Column names of the result's tables: one spelling per column, written by the analyzer and read by the report.

They are also the keys of the rows in `gpuaudit analyze --json` (docs/analyzer.md): renaming one changes the
documented JSON, and tests/test_result_contract.py says so.
"""

from __future__ import annotations

from typing import ClassVar


class ColumnNames:
    """A namespace of column-name constants (UPPER_CASE str attributes, inherited ones first)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        out: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            out.update({k: v for k, v in vars(klass).items() if k.isupper() and isinstance(v, str)})
        return tuple(dict.fromkeys(out.values()))


class WrsColumns(ColumnNames):
    """The W/R/S figures every utilization breakdown (per node, per GPU, hour of week, per week) carries."""

    OBSERVED_GPU_HOURS: ClassVar[str] = "observed_gpu_hours"
    RUNTIME_GPU_HOURS: ClassVar[str] = "runtime_gpu_hours"
    REAL_GPU_HOURS: ClassVar[str] = "real_gpu_hours"
    RUNTIME_UTILIZATION: ClassVar[str] = "runtime_utilization"
    REAL_UTILIZATION: ClassVar[str] = "real_utilization"
    EFFICIENCY_WHILE_HELD: ClassVar[str] = "efficiency_while_held"
    IDLE_HELD_GPU_HOURS: ClassVar[str] = "idle_held_gpu_hours"


class PerNodeColumns(WrsColumns):
    HOST: ClassVar[str] = "host"
    GPUS: ClassVar[str] = "gpus"


class PerGpuColumns(WrsColumns):
    HOST: ClassVar[str] = "host"
    GPU: ClassVar[str] = "gpu"  # GPU UUID, /migN for a MIG slice
    GPU_NAME: ClassVar[str] = "gpu_name"
    GPU_FRACTION: ClassVar[str] = "gpu_fraction"
    MAX_MEM_USED_BYTES: ClassVar[str] = "max_mem_used_bytes"
    MEM_TOTAL_BYTES: ClassVar[str] = "mem_total_bytes"
    AVERAGE_POWER_W: ClassVar[str] = "average_power_w"
    UPPER_BOUND: ClassVar[str] = "upper_bound"
    NEVER_USED: ClassVar[str] = "never_used"


class HolderColumns(ColumnNames):
    """What per_user, per_job and per_pod carry next to their key (`user`, `job`, `pod`)."""

    RUNTIME_GPU_HOURS: ClassVar[str] = "runtime_gpu_hours"
    REAL_GPU_HOURS: ClassVar[str] = "real_gpu_hours"
    EFFICIENCY_WHILE_HELD: ClassVar[str] = "efficiency_while_held"
    IDLE_HELD_GPU_HOURS: ClassVar[str] = "idle_held_gpu_hours"
    GPUS: ClassVar[str] = "gpus"
    FIRST_HOUR: ClassVar[str] = "first_hour"
    LAST_HOUR: ClassVar[str] = "last_hour"


class PerUserColumns(HolderColumns):
    USER: ClassVar[str] = "user"


class PerJobColumns(HolderColumns):
    JOB: ClassVar[str] = "job"


class PerPodColumns(HolderColumns):
    POD: ClassVar[str] = "pod"  # namespace/pod


class HourOfWeekColumns(WrsColumns):
    DAY_OF_WEEK: ClassVar[str] = "day_of_week"  # 0 = Monday
    HOUR_OF_DAY: ClassVar[str] = "hour_of_day"  # 0-23 UTC


class PerWeekColumns(WrsColumns):
    WEEK: ClassVar[str] = "week"  # the Monday it starts on
    GPUS: ClassVar[str] = "gpus"


class DemandColumns(ColumnNames):
    HOUR: ClassVar[str] = "hour"
    GPUS_HELD: ClassVar[str] = "gpus_held"
    PEAK_GPUS_HELD: ClassVar[str] = "peak_gpus_held"
    GPUS_IN_USE: ClassVar[str] = "gpus_in_use"
    PEAK_GPUS_IN_USE: ClassVar[str] = "peak_gpus_in_use"
    GPUS_REPORTING: ClassVar[str] = "gpus_reporting"


class DemandDurationColumns(ColumnNames):
    GPUS_HELD: ClassVar[str] = "gpus_held"  # a level of the hourly demand
    SHARE_OF_HOURS: ClassVar[str] = "share_of_hours"  # share of hours with demand at or above it


class GpuCoverageColumns(ColumnNames):
    """DataQuality.gpus."""

    HOST: ClassVar[str] = "host"
    GPU: ClassVar[str] = "gpu"
    OBSERVED_HOURS: ClassVar[str] = "observed_hours"
    COVERAGE: ClassVar[str] = "coverage"
    GAP_HOURS: ClassVar[str] = "gap_hours"
    FIRST_SAMPLE: ClassVar[str] = "first_sample"
    LAST_SAMPLE: ClassVar[str] = "last_sample"
    STOPPED_REPORTING: ClassVar[str] = "stopped_reporting"


class HybridCurveColumns(ColumnNames):
    N: ClassVar[str] = "n"
    OWNED_USD: ClassVar[str] = "owned_usd"
    CLOUD_USD: ClassVar[str] = "cloud_usd"
    TOTAL_USD: ClassVar[str] = "total_usd"
    CLOUD_GPU_HOURS: ClassVar[str] = "cloud_gpu_hours"


class BreakEvenCurveColumns(ColumnNames):
    BILLED_UTILIZATION: ClassVar[str] = "billed_utilization"
    CLOUD_USD_PER_GPU_YEAR: ClassVar[str] = "cloud_usd_per_gpu_year"
    OWNED_USD_PER_GPU_YEAR: ClassVar[str] = "owned_usd_per_gpu_year"


class TornadoColumns(ColumnNames):
    PARAMETER: ClassVar[str] = "parameter"
    KEY: ClassVar[str] = "key"
    BASE_VALUE: ClassVar[str] = "base_value"
    LOW_VALUE: ClassVar[str] = "low_value"
    HIGH_VALUE: ClassVar[str] = "high_value"
    BASE_DIFF_USD: ClassVar[str] = "base_diff_usd"
    LOW_DIFF_USD: ClassVar[str] = "low_diff_usd"
    HIGH_DIFF_USD: ClassVar[str] = "high_diff_usd"
    PLAN: ClassVar[str] = "plan"  # the recommended plan, and its cost and margin over the runner-up
    BASE_PLAN_USD: ClassVar[str] = "base_plan_usd"
    LOW_PLAN_USD: ClassVar[str] = "low_plan_usd"
    HIGH_PLAN_USD: ClassVar[str] = "high_plan_usd"
    BASE_MARGIN_USD: ClassVar[str] = "base_margin_usd"
    LOW_MARGIN_USD: ClassVar[str] = "low_margin_usd"
    HIGH_MARGIN_USD: ClassVar[str] = "high_margin_usd"
    SWING_USD: ClassVar[str] = "swing_usd"
    CHEAPEST_LOW: ClassVar[str] = "cheapest_low"
    CHEAPEST_HIGH: ClassVar[str] = "cheapest_high"
    BREAK_EVEN_LOW: ClassVar[str] = "break_even_low"
    BREAK_EVEN_HIGH: ClassVar[str] = "break_even_high"
    CHANGES_CHEAPEST: ClassVar[str] = "changes_cheapest"
    LIMIT: ClassVar[str] = "limit"  # why a moved value is not the configured one × (1 ± fraction); "" when it is


class GrowthColumns(ColumnNames):
    """Sensitivity.growth: these, and one `scenario_usd(id)` column per scenario."""

    GROWTH_PER_YEAR: ClassVar[str] = "growth_per_year"
    DEMAND_FACTOR: ClassVar[str] = "demand_factor"
    CHEAPEST: ClassVar[str] = "cheapest"
    HYBRID_GPUS: ClassVar[str] = "hybrid_gpus"

    @staticmethod
    def scenario_usd(scenario_id: str) -> str:
        """The column of one scenario's total, e.g. all-cloud -> all_cloud_usd."""
        return f"{scenario_id.replace('-', '_')}_usd"
