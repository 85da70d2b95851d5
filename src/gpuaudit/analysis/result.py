"""The analyzer's typed result: everything the report shows, and where each number comes from.

Every figure is a `Figure` carrying its value, unit, formula and source (the rows and rollup it was
computed from), so any number in a report can be traced back. Breakdowns are `Table`s (columns with
units, plain records) whose column names are the constants of `analysis/columns.py`: the analyzer
writes them, the report reads them, and a name that is not a column raises `ResultContractError`. The building
blocks live in `analysis/figure.py`, the priced parts (plans, break-even, hybrid, sensitivity) in
`analysis/economics.py`; this module is the tree that holds them.
`AnalysisResult.to_dict()` gives the stable JSON that `gpuaudit analyze --json` prints; keys only ever get
added (bump RESULT_VERSION when a meaning changes).

Conventions: fractions 0-1 (never percent), GPU-hours weighted by `gpu_fraction` (a MIG slice counts
as its share of a GPU), money in USD, timestamps ISO 8601 UTC.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.analysis.economics import BreakEven, Costs, CostScenario, HybridSizing, Sensitivity
from gpuaudit.analysis.figure import Figure, Table
from gpuaudit.util.jsonio import plain

RESULT_VERSION = 4
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
    """One GPU model in the data: the names its GPUs reported (NVML, dcgm-exporter `modelName`, a
    MIG slice's name), its key (gpuaudit.catalog), whether the catalogue knows it, the physical GPUs (distinct
    host + GPU UUID; MIG slices count with their GPU), and where its prices come from: the catalogue's source
    and date, the config file that set it, or "assumed: fleet default ..." where neither gives one. `toml`:
    the [models."<key>"] lines to add to --config for a model the catalogue does not know ("" otherwise).
    The model's pool is priced at these (analysis/pools.py)."""

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
    consolidation: Consolidation | None = None  # the consolidation lever: how many GPUs the measured work fits on
    ledger: Ledger | None = None  # the four-state ledger (analysis/ledger.py)
    chargeback: Chargeback | None = None  # showback per account / user / partition / namespace
    models: tuple[ModelFound, ...] = ()  # the GPU models found: reported name -> key, GPUs, prices
    pools: tuple[Pool, ...] = ()  # the fleet per GPU model, each priced at its own model's prices
    fleet_fixed_usd: dict[str, float] = field(default_factory=dict)  # the fleet-level costs pools leave out

    def to_dict(self) -> dict[str, Any]:
        return plain(self, rich=True)  # plain JSON-able values, stable keys
