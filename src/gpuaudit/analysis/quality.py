"""Stage 2: data quality from the rollups (pure functions): per-GPU coverage and gaps, the fleet coverage
figure and every warning about the data the figures stand on. The one owner of the data-quality checks."""

from __future__ import annotations

import math

import polars as pl

from gpuaudit.analysis.columns import GpuCoverageColumns
from gpuaudit.analysis.config import Reading
from gpuaudit.analysis.figure import Figure, TableColumn
from gpuaudit.analysis.result import DataQuality, Trial
from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.analysis.stage1.slots import slot_index
from gpuaudit.analysis.utilization import NO_ELASTIC, SRC_SAMPLES, Elastic, H, Totals, gpu_label, table
from gpuaudit.util import fmt

_GPUS_COLUMNS = (
    TableColumn(GpuCoverageColumns.HOST),
    TableColumn(GpuCoverageColumns.GPU, "", "GPU UUID (/migN for a MIG slice)"),
    TableColumn(GpuCoverageColumns.OBSERVED_HOURS, "hours", "time covered by samples"),
    TableColumn(GpuCoverageColumns.COVERAGE, "fraction", "observed hours ÷ trial hours"),
    TableColumn(GpuCoverageColumns.GAP_HOURS, "hours", "hours of the trial window without a sample"),
    TableColumn(GpuCoverageColumns.FIRST_SAMPLE, "UTC"),
    TableColumn(GpuCoverageColumns.LAST_SAMPLE, "UTC"),
    TableColumn(GpuCoverageColumns.STOPPED_REPORTING, "", "last sample more than the threshold before the trial end"),
)


def data_quality(roll: Rollups, t: Totals, tr: Trial, rd: Reading, upper: bool,
                 el: Elastic | None = None) -> DataQuality:
    el = el or NO_ELASTIC
    per = _per_gpu(roll, t, tr, rd, el)
    stopped = tuple(sorted(per.filter(pl.col("stopped_reporting"))["gpu"].to_list()))
    coverage, capacity = _coverage(t, rd, el)
    warnings = [
        *_provisional_warning(tr, rd),
        *_upper_bound_warning(t, upper),
        *_stopped_warning(stopped),
        *_energy_warning(t),
        *_coverage_warning(t, el, coverage, capacity),
        *_unmeasured_warning(t),
        *_input_warnings(roll, t),
    ]
    gpus = table("gpus", "Coverage per GPU.", per, _GPUS_COLUMNS, SRC_SAMPLES)
    return DataQuality(
        coverage=Figure(coverage, "fraction", "W ÷ (fleet GPU equivalents × trial hours)", SRC_SAMPLES,
                        "Share of GPU time covered by samples: 1 means every GPU reported all the time."),
        gap_hours=Figure(float(per["gap_hours"].sum()), "hours", "Σ over GPUs of trial hours without a sample",
                         SRC_SAMPLES, "Hours in which a GPU sent no sample."),
        trial_days=Figure(tr.days, "days", "(last interval end − first interval start) / 86400", SRC_SAMPLES,
                          "Length of the trial."),
        stopped_reporting=stopped,
        unmeasured_share=Figure(t.unmeasured / t.w, "fraction", "GPU-hours with neither sm_active nor "
                                "duty_cycle / W", SRC_SAMPLES, "Observed time with no activity metric."),
        gpus=gpus,
        warnings=tuple(warnings),
        overlap_gpu_hours=Figure(t.overlap, "GPU-h", "Σ overlap_s / 3600", SRC_SAMPLES,
                                 "Duplicate or overlapping samples removed: a lower-precedence source over the same "
                                 "GPU-time (agent GPM > DCGM import > duty cycle), or one source's rows that overlap "
                                 "in time."),
        rejected_rows=roll.rejected_rows,
    )


def _per_gpu(roll: Rollups, t: Totals, tr: Trial, rd: Reading, el: Elastic) -> pl.DataFrame:
    """Coverage, gap hours and whether it stopped reporting, per GPU (MIG slice)."""
    start, end = tr.start.timestamp(), tr.end.timestamp()
    window_hours = slot_index(end) - math.floor(start / H) + 1
    stop_after = rd.stopped_reporting_after_hours * H
    elastic = pl.col("gpu_uuid").is_in(list(el.uuids))
    return (
        roll.gpu_hours.group_by("host", "gpu_uuid", "mig_instance")
        .agg(
            (pl.col("observed_s").sum() / pl.col("gpu_fraction").max() / H).alias("observed_hours"),
            pl.col("hour_s").n_unique().alias("hours_with_samples"),
            pl.col("first_s").min(),
            pl.col("last_s").max(),
        )
        .with_columns(
            gpu_label(),
            (pl.col("observed_hours") / (t.trial_hours if t.trial_hours > 0 else 1.0)).alias("coverage"),
            # an elastic GPU's absent time is capacity that did not exist, not a gap
            pl.when(elastic).then(0).otherwise(pl.lit(window_hours) - pl.col("hours_with_samples")).alias("gap_hours"),
            ((pl.col("last_s") < end - stop_after) & ~elastic).alias("stopped_reporting"),
            pl.from_epoch(pl.col("first_s"), "s").dt.replace_time_zone("UTC").alias("first_sample"),
            pl.from_epoch(pl.col("last_s"), "s").dt.replace_time_zone("UTC").alias("last_sample"),
        )
        .sort("coverage", "gpu")
    )


def _coverage(t: Totals, rd: Reading, el: Elastic) -> tuple[float, float]:
    """W ÷ (capacity × trial hours), and the capacity: the configured fleet when it is given, else the GPUs seen."""
    capacity = rd.fleet_gpus or t.gpu_equivalents
    coverage = t.w / (capacity * t.trial_hours) if t.trial_hours > 0 else 0.0
    if el.equivalents > 0:  # over the steady GPUs only: elastic ones are covered whenever they exist
        seen = t.gpu_equivalents - el.equivalents
        capacity = max(rd.fleet_gpus - el.peak, seen) if rd.fleet_gpus else seen
        w = t.w - el.observed_gpu_hours
        coverage = w / (capacity * t.trial_hours) if capacity > 1e-9 and t.trial_hours > 0 else 1.0
    return coverage, capacity


def short_trial_text(days: float, provisional_below_days: float) -> str:
    """Why a trial is provisional, in the one wording the warning, the caveats and the confidence share."""
    return (f"the trial covers {fmt.span(days)}, less than {provisional_below_days:g} days "
            "(decision.provisional_below_days)")


def _provisional_warning(tr: Trial, rd: Reading) -> list[str]:
    if not tr.provisional:
        return []
    return [short_trial_text(tr.days, rd.provisional_below_days) + ": the decision is provisional"]


def _upper_bound_warning(t: Totals, upper: bool) -> list[str]:
    if not upper:
        return []
    return [f"SM activity was not measured for {t.fallback / t.w:.0%} of observed time (engine-active or duty cycle "
            "only): real utilization is an upper bound"]


def _stopped_warning(stopped: tuple[str, ...]) -> list[str]:
    return [f"{fmt.count(len(stopped), 'GPU')} stopped reporting before the end of the trial"] if stopped else []


def _energy_warning(t: Totals) -> list[str]:
    if t.energy_estimated <= 0:
        return []
    return [f"energy was estimated from power (power × time: no energy counter) for "
            f"{t.energy_estimated / t.w:.0%} of observed GPU-hours"]


def _coverage_warning(t: Totals, el: Elastic, coverage: float, capacity: float) -> list[str]:
    if coverage >= 0.9:
        return []
    seen_share = (t.gpu_equivalents - el.equivalents) / capacity if capacity > 0 else 1.0
    if seen_share < 0.999:  # the configured fleet is larger than what reported: not (only) gaps
        return [f"coverage is {coverage:.0%}: {t.gpu_equivalents:,.0f} of the {capacity:,.0f} fleet GPUs "
                "reported (the rest had no agent, assumed to look like those that did)"
                + ("" if coverage >= 0.9 * seen_share else "; the GPUs seen also have gaps")]
    return [f"coverage is {coverage:.0%}: GPUs were not sampled all the time (gaps)"]


def _unmeasured_warning(t: Totals) -> list[str]:
    if t.unmeasured <= 0:
        return []
    return [f"{fmt.pct(t.unmeasured / t.w)} of observed time has neither SM activity nor duty cycle (counted as idle)"]


def _input_warnings(roll: Rollups, t: Totals) -> list[str]:
    """What stage 1 removed or left out of the input: overlapping samples, skipped files, rejected rows."""
    out = []
    if t.overlap > 1e-6:
        out.append(f"{t.overlap:,.1f} GPU-hours of overlapping samples were counted once (copied files, an "
                   "import over agent data, or two agents on one GPU)")
    out.extend(f"left out file {f}" for f in roll.skipped_files)
    out.extend(roll.rejected_rows)
    return out
