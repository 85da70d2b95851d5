"""The analyzer's typed result: everything the report shows, and where each number comes from.

Every figure is a `Figure` carrying its value, unit, formula and source (the rows and rollup it was
computed from), so any number in a report can be traced back. Breakdowns are `Table`s (columns with
units, plain records) whose column names are the constants of the `*Columns` classes below: the analyzer
writes them, the report reads them, and a name that is not a column raises `ResultContractError`.
`AnalysisResult.to_dict()` gives the stable JSON that `gpuaudit analyze --json` prints; keys only ever get
added (bump RESULT_VERSION when a meaning changes).

Conventions: fractions 0-1 (never percent), GPU-hours weighted by `gpu_fraction` (a MIG slice counts
as its share of a GPU), money in USD, timestamps ISO 8601 UTC.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gpuaudit.util.jsonio import plain

RESULT_VERSION = 3
HOURS_PER_YEAR = 8766.0  # 365.25 days: what "per year" figures scale the trial to


class Branch(enum.StrEnum):
    """Where the decision tree lands."""

    CLOUD = "cloud"
    HYBRID = "hybrid"
    ON_PREM = "on-prem"


class Deployment(enum.StrEnum):
    """Where the fleet runs today (`--current`)."""

    ON_PREM = "on-prem"
    CLOUD = "cloud"


@dataclass(frozen=True)
class Figure:
    """One traceable number.

    value: the number (None when it cannot be computed, e.g. no power was measured).
    unit: "fraction" (0-1), "GPU-h", "GPUs", "USD", "USD/GPU-h", "W", "days", "hours", "count".
    formula: how it is computed from other named figures, e.g. "S / W".
    source: which rows/rollup it comes from, e.g. "gpu_samples: Σ interval_s × gpu_fraction × sm_active".
    definition: one sentence for a reader who has never seen the product.
    upper_bound: True when the value is only an upper bound (SM activity fell back to duty cycle).
    lower_bound: True when the value is only a lower bound (e.g. the phantom gap where SM activity fell back).
    """

    value: float | None
    unit: str
    formula: str
    source: str
    definition: str = ""
    upper_bound: bool = False
    lower_bound: bool = False


class ResultContractError(LookupError):
    """The report asked a table for a column the analyzer does not write: a renamed or dropped column fails
    loudly here instead of silently dropping a chart."""


@dataclass(frozen=True)
class TableColumn:
    """One column of a result `Table`: its name (a key of every row), unit and meaning."""

    name: str
    unit: str = ""
    description: str = ""


@dataclass(frozen=True)
class Table:
    """A small breakdown table. `rows` are records keyed by column name (plain Python values)."""

    name: str
    description: str
    columns: tuple[TableColumn, ...]
    rows: tuple[dict[str, Any], ...]
    source: str = ""
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("name", "description", "source", "columns", "rows")  # to_dict's order

    def to_polars(self) -> Any:
        """The table as a polars DataFrame (imported lazily: the result module stays cheap)."""
        import polars as pl

        if not self.rows:
            return pl.DataFrame({c.name: [] for c in self.columns})
        return pl.DataFrame(list(self.rows), infer_schema_length=None)

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def require(self, *names: str) -> None:
        """Raise ResultContractError unless every one of `names` is a column of this table."""
        have = self.column_names()
        missing = [n for n in names if n not in have]
        if missing:
            raise ResultContractError(
                f"result table {self.name!r} has no column {', '.join(map(repr, missing))} "
                f"(its columns: {', '.join(have) or 'none'})"
            )

    def values(self, name: str) -> list[Any]:
        """One column's values, row by row (None where a row has no value)."""
        self.require(name)
        return [row.get(name) for row in self.rows]


# -- column names: one spelling per column, written by the analyzer and read by the report --------------
# They are also the keys of the rows in `gpuaudit analyze --json` (docs/analyzer.md): renaming one changes
# the documented JSON, and tests/test_result_contract.py says so.


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
    PLAN: ClassVar[str] = "plan"  # the recommended plan, and its cost and margin over the runner-up (issue 17)
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


@dataclass(frozen=True)
class Trial:
    """The observation window.

    start/end: first interval start and last interval end seen in gpu_samples (UTC).
    days: (end - start) in days. observed_days: distinct UTC dates with at least one sample.
    provisional: True when days < the configured minimum (default 90): the decision is provisional.
    reevaluate_on: date to redo the audit (end + configured months, default 6).
    gpus: physical GPUs seen (distinct gpu_uuid); gpu_equivalents: Σ of max gpu_fraction per GPU/slice.
    hosts, sources: distinct hosts and `source` values (which path measured SM activity).
    """

    start: dt.datetime
    end: dt.datetime
    days: float
    observed_days: int
    provisional: bool
    reevaluate_on: dt.date
    gpus: int
    gpu_equivalents: float
    hosts: int
    sources: tuple[str, ...]
    samples: int


@dataclass(frozen=True)
class Utilization:
    """Utilization, defined once.

    W observed GPU-hours: time covered by samples (Σ interval_s × gpu_fraction / 3600).
    R runtime GPU-hours: part of W with at least one process on the GPU.
    B busy GPU-hours: Σ duty_cycle × interval_s × gpu_fraction (nvidia-smi's utilization.gpu × time).
    S real GPU-hours: Σ sm_active × interval_s × gpu_fraction; where only duty cycle exists S uses B's
      value for those rows and is flagged as an upper bound (`real_is_upper_bound`, `upper_bound_share`).
    runtime_utilization R/W (held-hour), real_utilization S/W, efficiency_while_held S/R; phantom_gap believed − S/W
    (believed: allocated A/W where scheduler allocations were imported, else R/W).
    idle_held_gpu_hours: held by a process while SM activity < 1 % (fixed in sql/analysis_rollup.sql).
    never_used_gpus: GPUs (or MIG slices) with R = 0 over the whole trial.
    """

    observed_gpu_hours: Figure
    runtime_gpu_hours: Figure
    busy_gpu_hours: Figure
    real_gpu_hours: Figure
    runtime_utilization: Figure
    real_utilization: Figure
    busy_utilization: Figure
    efficiency_while_held: Figure
    phantom_gap: Figure
    idle_held_gpu_hours: Figure
    never_used_count: Figure
    never_used_gpus: tuple[str, ...]
    real_is_upper_bound: bool
    upper_bound_share: Figure
    average_power_w: Figure
    energy_kwh: Figure
    real_utilization_lower: Figure  # S/W counting duty-cycle-only time as no SM activity (= real when measured)
    phantom_gpu_hours: Figure  # max(R − S, 0): held GPU time that did no work (a lower bound where S is an upper one)
    # Set once the ledger is known (analysis.ledger.believed), each defined once in docs/report.md's Definitions:
    allocated_utilization: Figure | None = None  # A/W: what the scheduler shows (= R/W without allocations)
    believed_utilization: Figure | None = None  # A/W where allocations were imported, else R/W
    billed_utilization: Figure | None = None  # billed GPU-hours / W: what the cloud would bill, ≥ believed


@dataclass(frozen=True)
class Ledger:
    """The four-state ledger (GPU-h, summing to W) and how "allocated" was established.

    basis: "allocations" (every host with telemetry has scheduler allocations), "mixed" (some do: the others
    infer allocated from processes) or "processes" (no allocations: believed = held, as before).
    scheduler_gpu_hours: Σ gpus × duration of the allocation rows inside the trial window (what the scheduler
    reports), unmapped_gpu_hours: the part with no telemetry GPU to map onto, held_outside_allocation_gpu_hours:
    active time beyond the allocation on hosts with allocations, inferred_share: share of the mapped allocated
    time placed on GPUs without a process of the job. per_week: the states per ISO week (stacked bars)."""

    basis: str
    observed_gpu_hours: Figure
    unallocated: Figure
    allocated_no_process: Figure
    held_idle: Figure
    productive: Figure
    allocated_gpu_hours: Figure
    scheduler_gpu_hours: Figure
    unmapped_gpu_hours: Figure
    held_outside_allocation_gpu_hours: Figure
    inferred_share: Figure
    hosts_with_allocations: int
    hosts_without_telemetry: tuple[str, ...]
    per_week: Table
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Chargeback:
    """Showback per account, user, partition and namespace (analysis/chargeback.py): allocated, held and real
    GPU-hours, efficiency, the idle part and its cost at usd_per_gpu_hour (the configured cloud list price),
    ranked by that cost; rows of each table sum to the fleet totals. idle_jobs: jobs at 0 % for an hour or more,
    and jobs that went idle for an hour or more after an active stretch (chargeback.MIN_IDLE_HOURS)."""

    usd_per_gpu_hour: float
    by_account: Table
    by_user: Table
    by_partition: Table
    by_namespace: Table
    idle_jobs: Table

    def by(self, key: str) -> Table:
        return {"account": self.by_account, "user": self.by_user, "partition": self.by_partition,
                "namespace": self.by_namespace}[key]


@dataclass(frozen=True)
class ModelFound:
    """One GPU model in the data (issue 25): the names its GPUs reported (NVML, dcgm-exporter `modelName`, a
    MIG slice's name), its key (gpuaudit.catalog), whether the catalogue knows it, the physical GPUs (distinct
    host + GPU UUID; MIG slices count with their GPU), and where its prices come from: the catalogue's source
    and date, the config file that set it, or "assumed: fleet default ..." where neither gives one. `toml`:
    the [models."<key>"] lines to add to --config for a model the catalogue does not know ("" otherwise).
    Until the cost model prices per model (issue 25 item 3) these are the model's prices, not yet the plan's."""

    model: str
    gpu_names: tuple[str, ...]
    known: bool
    gpus: int
    instance: str
    usd_per_gpu_hour: float
    price_source: str
    hardware_usd_per_gpu: float
    hardware_source: str
    assumed: bool
    toml: str = ""


@dataclass(frozen=True)
class Breakdowns:
    """Breakdown tables (see each Table's columns for units).

    per_node, per_gpu, per_user, per_job, per_pod: W/R/S GPU-hours and their ratios per entity.
    hour_of_week: 7 × 24 cells (day_of_week 0=Monday, hour_of_day 0-23 UTC) of utilization.
    per_week: ISO week trend. demand: the fleet demand series (GPUs held and SM-weighted GPUs in use
    per bucket), the input of hybrid sizing. demand_duration: its duration curve, the share of hours in which
    GPUs held reached each level (a step per distinct level).
    """

    per_node: Table
    per_gpu: Table
    per_user: Table
    per_job: Table
    per_pod: Table
    hour_of_week: Table
    per_week: Table
    demand: Table
    demand_duration: Table  # DemandDurationColumns


@dataclass(frozen=True)
class DataQuality:
    """How much to trust the data.

    coverage: observed GPU-hours ÷ (GPUs × trial hours): 1 means every GPU reported all the time.
    gpus: per-GPU coverage, gap hours, first/last sample, stopped_reporting flag.
    gap_hours: Σ over GPUs of hours inside the trial window without a sample from that GPU.
    stopped_reporting: GPUs whose last sample is more than the stop threshold before the trial end.
    unmeasured_share: share of observed time with neither SM activity nor duty cycle (counted as 0).
    """

    coverage: Figure
    gap_hours: Figure
    trial_days: Figure
    stopped_reporting: tuple[str, ...]
    unmeasured_share: Figure
    gpus: Table
    warnings: tuple[str, ...]
    overlap_gpu_hours: Figure  # GPU-hours of duplicate or overlapping samples removed by stage 1
    rejected_rows: tuple[str, ...] = ()  # rows the reader excluded, with the reason


@dataclass(frozen=True)
class Condition:
    """One evaluated condition of a rule: `fact op threshold` → holds."""

    fact: str
    op: str
    threshold: float | bool | str
    actual: float | bool | str
    holds: bool


@dataclass(frozen=True)
class RuleFired:
    id: str
    branch: Branch
    description: str
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class DecisionInputs:
    real_utilization: float
    latency_sensitive: bool
    data_residency: bool
    egress_gb_per_week: float
    current: Deployment
    cloud_below: float
    on_prem_above: float
    # of demand, the share that must run on owned GPUs (decision.latency_sensitive_share; 1 with
    # --latency-sensitive); `latency_sensitive` is whether there is any
    latency_sensitive_share: float = 0.0


@dataclass(frozen=True)
class ConfidenceLevel:
    """How sure the recommendation is: "high", "medium" or "low", and every reason that lowered it."""

    level: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Decision:
    """The recommendation: the decision tree (rule) checked against the cost model.

    branch: where the decision tree lands at the measured real utilization (the first rule whose
      conditions all hold, `rule`). possible_branches: every branch the tree could take given what was not
      measured (when real utilization is only an upper bound, anything between its lower and upper bound).
      determined: one branch is possible.
    cheapest_scenario: the cheapest allowed scenario of the cost model (data residency forbids any scenario
      that rents); cost_branch: the branch it carries out. agrees_with_costs: the tree is determined and lands on
      cost_branch.
    recommendation: what the headline recommends: the cost model's branch (your prices decide), with the tree
      shown next to it; "on-prem" whenever data residency applies.
    saving_usd: how much cheaper the cheapest scenario is than stay-as-is (negative: dearer);
      versus_tree_usd: how much cheaper it is than the tree's branch's cheapest scenario (0 when they agree).
    confidence: level and reasons (utilization and cost bootstraps, bounds, agreement, trial length,
      sensitivity, coverage). headline: one sentence for the report.
    """

    branch: Branch
    rule: RuleFired
    inputs: DecisionInputs
    caveats: tuple[str, ...]
    provisional: bool
    reevaluate_on: dt.date
    cheapest_scenario: str
    agrees_with_costs: bool
    headline: str
    possible_branches: tuple[str, ...]
    determined: bool
    cost_branch: str
    recommendation: str
    saving_usd: float
    versus_tree_usd: float
    confidence: ConfidenceLevel
    # The plan the headline recommends: the cheapest allowed scenario, or stay-as-is when the cheapest beats it
    # by no more than `tie_usd` (the model's uncertainty: decision.tie_fraction × staying's total, or the
    # day-resample spread of the difference, whichever is larger): a tie keeps what you have.
    recommended_scenario: str = ""
    tie: bool = False
    tie_usd: float = 0.0
    # the recommended plan said in counts: "sell 17 of your 64 GPUs, rent the rest flexibly"
    action: str = ""


@dataclass(frozen=True)
class PricedMix:
    """How a plan's cloud GPU-hours were actually priced (analysis.cloudmix).

    reserved_share / spot_share / capacity_block_share / on_demand_share: shares of the plan's cloud GPU-hours
      (summing to 1) bought reserved 24/7, on spot, in capacity blocks and on demand. Not cloud.spot_share and
      cloud.reserved_share: a plan reserves only what is cheaper reserved (none when a reserved hour costs more
      than a flexible one), and the configured shares of what is not reserved price the rest.
    usd_per_gpu_hour: the effective price of one of its cloud GPU-hours (spot inflated by the work redone after
      interruptions); on_demand_usd_per_gpu_hour: the list price it derives from.
    spot_interruptions_per_hour / spot_lost_hours_per_interruption: what its spot hours assume.
    text: the sentence the report and the summaries print ("priced as 100 % spot at $3.17/GPU-h; on demand
      $6.88/GPU-h").
    """

    reserved_share: float
    spot_share: float
    capacity_block_share: float
    on_demand_share: float
    usd_per_gpu_hour: float
    on_demand_usd_per_gpu_hour: float
    spot_interruptions_per_hour: float
    spot_lost_hours_per_interruption: float
    text: str


@dataclass(frozen=True)
class CostScenario:
    """One way to run the measured demand over the horizon.

    id: stay-as-is, all-cloud, all-on-prem, hybrid, and the what-if plans all-cloud-if-packed,
      all-on-prem-if-packed, hybrid-if-packed.
    cloud_gpu_hours: GPU-hours billed by the cloud over the horizon. owned_gpus: GPUs owned.
    total: present value of the cost over the horizon (USD). components: named cost parts (USD; residual value
    is negative) summing to total. monthly_usd: total ÷ months.
    """

    id: str
    label: str
    description: str
    cloud_gpu_hours: float
    owned_gpus: int
    total: Figure
    components: dict[str, float]
    monthly_usd: float
    what_if: bool = False  # an "if behaviour changes" plan: shown, never counted as cheapest
    allowed: bool = True  # False when data residency forbids it (it rents)
    # Board power per owned GPU its power cost is priced at: the measured power-vs-load relation at the load the
    # GPUs it keeps carry (None when it owns nothing)
    power_w_per_gpu: float | None = None
    # Cash, not present value: what leaves (or comes back: GPUs sold now, resale) each month of the horizon,
    # month 0 first (capital paid up front in month 0, instalments over the hardware's life when spread, resale
    # in the last month); capex_usd: the new hardware and network bought; payback_months: for a plan that buys, when its
    # cumulative cash (resale left out) falls to the renting plan's (Costs.payback_against; None: not within the
    # horizon)
    reserved_gpus: float = 0.0  # GPUs it reserves around the clock (what is cheaper reserved)
    cash_usd_by_month: tuple[float, ...] = ()
    capex_usd: float = 0.0
    payback_months: float | None = None
    priced_mix: PricedMix | None = None  # how its cloud GPU-hours were priced (None: it rents nothing)
    # The owned GPUs it sells now and the cash they bring back in month 0 (today's resale value): part of year
    # 1's cash, not a cost
    sold_gpus: int = 0
    sale_usd: float = 0.0


@dataclass(frozen=True)
class Costs:
    """The cost model over `horizon_months`.

    cloud_usd_per_gpu_hour: list $/instance-hour ÷ GPUs per instance.
    cloud_effective_usd_per_gpu_hour: after the spot/reserved/on-demand mix and spot interruption overhead.
    owned_usd_per_gpu_hour: marginal owned cost of one GPU per wall-clock hour (amortized hardware,
      maintenance, power at measured watts × PUE); fixed costs (staff, networking) are separate.
    power_w_per_gpu / power_source: watts used for on-prem power, "measured" or "configured".
    scale: fleet capacity ÷ GPUs that reported, averaged over the demand buckets (how measured demand is
      extrapolated to the fleet; 1 when every GPU reported all the time).
    discount_rate_per_year / annuity_months: the present-value convention (annuity: PV of $1 a month).
    fleet_gpus / fleet_capacity / owned_gpus: GPUs in the fleet, its capacity in GPU equivalents, GPUs owned.
    pack_factor: held demand × this in the "if behaviour changes" scenarios. reserved_gpus: all-cloud's
      reservation (billed 24/7). cloud_reserved/flexible_usd_per_gpu_hour: the two cloud prices.
    phantom_usd / phantom_usd_per_year: what the held-but-idle time (R − S) would cost at the cloud's effective
      rate, over the trial and per year.
    """

    horizon_months: int
    cloud_usd_per_gpu_hour: Figure
    cloud_effective_usd_per_gpu_hour: Figure
    owned_usd_per_gpu_hour: Figure
    power_w_per_gpu: Figure
    power_source: str
    scale: float
    scenarios: tuple[CostScenario, ...]
    cheapest: str
    preset: str
    discount_rate_per_year: float
    annuity_months: float  # present value of $1 a month over the horizon, in dollars
    fleet_gpus: int
    fleet_capacity: float
    owned_gpus: int
    pack_factor: float
    reserved_gpus: float
    cloud_reserved_usd_per_gpu_hour: Figure
    cloud_flexible_usd_per_gpu_hour: Figure
    phantom_usd: Figure  # the trial's phantom GPU-hours (R − S) at the cloud's effective rate
    phantom_usd_per_year: Figure  # the same, scaled to a year (HOURS_PER_YEAR ÷ trial hours)
    # the renting plan each purchase's payback_months is measured against (staying, for a fleet that rents today)
    payback_against: str = "all-cloud"


@dataclass(frozen=True)
class BreakEven:
    """Where renting and owning cost the same, on the basis the cloud bills: billed GPU-hours.

    billed_utilization: u*, the billed-hour utilization (demand shaped as measured, scaled up or down) at which
      renting costs the same as owning the whole fleet (`own_reference`: "keep-the-owned-fleet" when every
      fleet GPU is owned, "buy-the-fleet" when none is, "keep-owned-and-buy-the-rest" in between; more owned
      than the fleet is refused). Renting k × today's billed demand
      costs rent_fixed_usd + k × rent_variable_usd (selling owned GPUs, egress and managed services; the compute
      bill). None when nothing was billed, or with `never`.
    real_equivalent: u* × measured efficiency while held (S/R): the real utilization that corresponds at
      today's efficiency.
    never: True when renting is cheaper even with every GPU billed all the time (u* > 1).
    measured_billed: the trial's billed-hour utilization (= utilization.billed_utilization), compared with u*;
      measured_real / measured_runtime: S/W and R/W.
    verdict: "cloud" when all-cloud costs less than the reference, else "on-prem" (measured_billed < u* ⇔
      "cloud"); always "on-prem" under data residency. own_usd / cloud_usd: the two totals compared.
    curve: USD per fleet GPU-year of renting (fixed part + compute in proportion to billed hours) and of owning
      (flat) over a grid of billed-hour utilizations 0-1: the break-even chart.
    """

    never: bool
    measured_real: float
    measured_runtime: float
    verdict: str
    billed_utilization: Figure
    real_equivalent: Figure
    measured_billed: float
    own_reference: str
    own_usd: float
    cloud_usd: float
    rent_fixed_usd: float
    rent_variable_usd: float
    curve: Table  # BreakEvenCurveColumns; no rows when there is no break-even


@dataclass(frozen=True)
class HybridSizing:
    """How many GPUs to own when bursting the rest to the cloud.

    n_star: owned count N in 0..ceil(peak) minimizing owned cost(N) + cloud cost of demand above N (N = 0:
      all-cloud). n_owning: the best N ≥ 1 (the hybrid scenario). critical_fractile_n: the largest N whose
      demand is ≥ N at least c_own/c_cloud of the time (no fixed costs); agrees: it is within `tolerance` GPUs
      of n_owning (a node when costs step per node). fixed_cost_usd: fixed costs of owning anything;
      hurdle_gpus: GPUs busy around the clock needed before owning covers them ("owning pays only above ~K busy
      GPUs"); None when owning never pays.
    peak_demand / mean_demand: of the fleet-scaled demand series. curve: total cost per candidate N.
    """

    n_star: int
    critical_fractile_n: int
    cost_ratio_u: Figure
    fractile: Figure
    agrees: bool
    peak_demand: Figure
    mean_demand: Figure
    demand_basis: str
    bucket_s: float
    curve: Table
    n_owning: int
    tolerance: int
    fixed_cost_usd: float
    hurdle_gpus: Figure
    # the fewest GPUs the hybrid may own: the latency-sensitive share's peak (0 without one); N* and n_owning are
    # the best N at or above it, and the critical fractile is raised to it
    min_owned_gpus: int = 0
    # in a fleet of several GPU models, the model pool (Pool.model) this sizing is of: the one with the most held
    # GPU-hours (each pool sizes its own hybrid; "" when the fleet has one model)
    model: str = ""


@dataclass(frozen=True)
class Sensitivity:
    """How the answer moves.

    tornado: each price at -x % and +x % (x = 30 by default): cheapest scenario, break-even real
      utilization, and the all-cloud minus all-on-prem cost difference at each end; sorted by swing.
    growth: demand growth per year → scenario costs, cheapest scenario, hybrid N*.
    """

    fraction: float
    tornado: Table
    growth: Table


@dataclass(frozen=True)
class Interval:
    point: float
    low: float | None  # None: not measured (no resamples)
    high: float | None


@dataclass(frozen=True)
class Confidence:
    """Block bootstrap over whole UTC days (days resampled with replacement, seeded).

    real_utilization / runtime_utilization: point estimate and `level` interval (default 90 %).
    flip_share: share of resamples in which the decision tree would land on another branch.
    branches: share of resamples per branch.
    cost_difference_usd: all-cloud − cheapest owning scenario, point and interval, with the point estimate's
      plan (reservation, owned counts) held fixed while days are resampled.
    cheapest_shares / cheapest_flip_share: which scenario is cheapest across resamples.
    """

    method: str
    resamples: int
    seed: int
    level: float
    days: int
    real_utilization: Interval
    runtime_utilization: Interval
    flip_share: float
    branches: dict[str, float]
    cost_difference_usd: Interval  # all-cloud − cheapest owning scenario
    cheapest_shares: dict[str, float]  # share of resamples in which each scenario is the cheapest allowed
    cheapest_flip_share: float  # share of resamples in which another scenario is the cheapest
    real_is_upper_bound: bool = False  # real_utilization's interval is of an upper bound (duty cycle stood in)
    # analysis.bootstrap_min_days; too_few_days: the trial has fewer days, so no interval is claimed (resamples 0)
    min_days: int = 0
    too_few_days: bool = False


@dataclass(frozen=True)
class Assumption:
    """One input of the cost model or the decision, with where its default comes from."""

    key: str
    value: Any
    unit: str
    source: str


@dataclass(frozen=True)
class Consolidation:
    """The biggest lever besides buy vs rent, never counted as "cheapest" (it changes how GPUs are held).

    fits_on_gpus: ceil(peak SM-weighted demand ÷ target_utilization): the GPUs the measured work fits on with
      1 − target headroom. peak_in_use_gpus: that peak (fleet-scaled GPUs in use). plan / plan_usd: owning that
      many (on-prem) or renting the work at the target (cloud), present value over the horizon.
      recommended_usd: the recommended plan's total; saving_usd = recommended_usd − plan_usd.
    how: what gets there (ending idle allocations, MIG or time-slicing, autoscaling or packing);
      top_idle_holders: the users holding the most idle-held GPU-hours.
    owned_gpus / cloud_gpu_hours: what the consolidated plan owns and rents (over the horizon, as a scenario's),
      beside the recommended plan's recommended_owned_gpus / recommended_cloud_gpu_hours: the lever in the
      recommended plan's own terms.
    """

    fits_on_gpus: int
    peak_in_use_gpus: float
    target_utilization: float
    plan: str
    plan_usd: float
    recommended_usd: float
    saving_usd: float
    how: tuple[str, ...]
    top_idle_holders: tuple[str, ...]
    owned_gpus: int = 0
    cloud_gpu_hours: float = 0.0
    recommended_owned_gpus: int = 0
    recommended_cloud_gpu_hours: float = 0.0


@dataclass(frozen=True)
class RightSizeTarget:
    """The held GPU-hours of a pool the right-size lever moves to one cheaper model: `gpu_hours`, priced today
    at the pool's flexible cloud price (`usd_today`) and on the target at its own (`usd_per_gpu_hour`,
    `usd_on_target`); `throughput_ratio`: the pool model's dense FP16 TFLOPS ÷ the target's."""

    model: str
    gpu_hours: float
    usd_per_gpu_hour: float
    usd_today: float
    usd_on_target: float
    saving_usd: float
    throughput_ratio: float
    memory_bytes: int
    dense_fp16_tflops: float


@dataclass(frozen=True)
class RightSize:
    """The right-size lever of one pool (analysis/rightsize.py), a what-if never counted as cheapest: over the
    trial, on the GPUs measured, the held GPU-hours whose peak memory fits a cheaper model and whose SM activity
    × throughput ratio is at most `headroom`, each on the cheapest such model. Money is at flexible cloud prices
    (the configured mix), the pool's today against each target's."""

    model: str
    dense_fp16_tflops: float
    headroom: float
    held_gpu_hours: float
    movable_gpu_hours: float
    usd_per_gpu_hour: float
    usd_today: float
    usd_on_targets: float
    saving_usd: float
    targets: tuple[RightSizeTarget, ...]
    assumption: str
    what_if: bool = True


@dataclass(frozen=True)
class Pool:
    """The GPUs of one model (ModelFound.model), measured and priced on their own (analysis/pools.py).

    gpus: physical GPUs seen. held_utilization R/W, real_utilization S/W (an upper bound where duty cycle stood
    in), with the day-resample interval of the real one (None: too few days). branch: the decision tree at this
    pool's real utilization. scenarios: the fleet's plans for this pool alone, at its model's prices (same shape
    as Costs.scenarios); in a fleet of several models they leave out the fleet-level fixed costs
    (AnalysisResult.fleet_fixed_usd: base staff, a new build's network, egress, managed services), which the
    fleet plan counts once. recommendation: the pool plan (a scenario id) the fleet's recommended plan runs for
    this model; action: what it does, in counts ("keep the 8 h100-sxm-80gb"); owned_gpus: what it owns.
    break_even_billed_utilization: the pool's own u* (None: owning never pays). usd_per_gpu_hour /
    hardware_usd_per_gpu: the prices it is priced at; price_source: where they came from.
    """

    model: str
    gpu_name: str
    gpus: int
    observed_gpu_hours: float
    held_gpu_hours: float
    real_gpu_hours: float
    held_utilization: float
    real_utilization: float
    real_low: float | None
    real_high: float | None
    real_is_upper_bound: bool
    branch: str
    scenarios: tuple[CostScenario, ...]
    cheapest: str
    recommendation: str
    action: str
    owned_gpus: int
    break_even_billed_utilization: float | None
    usd_per_gpu_hour: float
    flexible_usd_per_gpu_hour: float
    hardware_usd_per_gpu: float
    price_source: str
    # the right-size what-if (None: the catalogue has no throughput figure for this model)
    right_size: RightSize | None = None


@dataclass(frozen=True)
class AnalysisResult:
    """Everything `gpuaudit analyze` knows. `to_dict()` is the documented JSON (docs/analyzer.md)."""

    result_version: int
    dataset_schema_version: int
    generated_at: dt.datetime
    data_root: str
    trial: Trial
    utilization: Utilization
    breakdowns: Breakdowns
    data_quality: DataQuality
    decision: Decision
    costs: Costs
    break_even: BreakEven
    hybrid: HybridSizing
    sensitivity: Sensitivity
    confidence: Confidence
    assumptions: tuple[Assumption, ...]
    warnings: tuple[str, ...] = field(default=())
    consolidation: Consolidation | None = None  # the consolidation lever (issue 17)
    ledger: Ledger | None = None  # the four-state ledger (analysis/ledger.py)
    chargeback: Chargeback | None = None  # showback per account / user / partition / namespace
    models: tuple[ModelFound, ...] = ()  # the GPU models found: reported name -> key, GPUs, prices
    pools: tuple[Pool, ...] = ()  # the fleet per GPU model, each priced at its own model's prices
    fleet_fixed_usd: dict[str, float] = field(default_factory=dict)  # the fleet-level costs pools leave out

    def to_dict(self) -> dict[str, Any]:
        return plain(self, rich=True)  # plain JSON-able values, stable keys
