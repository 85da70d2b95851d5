"""The workload scenarios: what each simulated fleet is built to show (its ground truth), the profiles of its
jobs, and the fleet's identity (host names, GPU ids). The load model that turns a scenario into what each GPU
does when is sim/loadmodel.py (`loadmodel.load_model` builds one).

The decision thresholds are the analyzer's (analysis/decision.py, with the default preset's values):
`decision_branch` asks it, so a scenario's documented branch and the report's can never disagree.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuaudit.errors import GpuauditError
from gpuaudit.schema import MIB

GPUS_PER_HOST = 8
DAY_S = 86400
WARMUP_S = 14 * DAY_S  # jobs start before the window so it opens mid-stream, not on an empty fleet
# Duty cycle in compute phases = sm + (1 - sm) × fill: some kernel runs nearly all the time even when few SMs
# are busy. Calibrated to the Acme traces (NSDI'24): held GPUs show a median duty cycle of 97-99 % but a
# median SM activity of ~34-50 % (shared/reference/field-figures.md).
DUTY_FILL = (0.93, 0.995)


def decision_branch(real_util: float, cloud_below: float | None = None, on_prem_above: float | None = None) -> str:
    """The branch of the analyzer's decision tree that a real utilization falls on (not latency-sensitive, no
    data residency), with the default preset's thresholds unless given."""
    from gpuaudit.analysis.config import load_config
    from gpuaudit.analysis.decision import branch_at

    default = load_config().decision
    return str(branch_at(real_util, default.cloud_below if cloud_below is None else cloud_below,
                         default.on_prem_above if on_prem_above is None else on_prem_above))


# ------------------------------------------------------------------------------------------ hardware


@dataclass(frozen=True)
class GpuModel:
    """The board a scenario's hosts carry: its name as NVML reports it (what catalog.identify maps), the memory
    nvidia-smi reports, the Slurm gres type, and the board power the load model draws between."""

    name: str
    mem_total_bytes: int
    gres_type: str
    tdp_w: float  # board power limit
    idle_power_w: float  # no context on the GPU
    held_idle_power_w: float  # a context and allocated memory, but no kernels
    min_power_w: float  # what the board never reads below
    gpm: bool = True  # NVML GPM metrics (Hopper and later); without them the agent measures the duty cycle only


_H100_SXM = GpuModel("NVIDIA H100 80GB HBM3", 81559 * MIB, "h100", tdp_w=700.0, idle_power_w=70.0,
                    held_idle_power_w=105.0, min_power_w=50.0)
T4 = GpuModel("Tesla T4", 15360 * MIB, "t4", tdp_w=70.0, idle_power_w=10.0, held_idle_power_w=27.0,
              min_power_w=8.0, gpm=False)  # Turing: 70 W board, 16 GB GDDR6 (nvidia-smi: 15360 MiB)


# ------------------------------------------------------------------------------------------ scenarios


@dataclass(frozen=True)
class _GroundTruth:
    """What a scenario is built to show; `simulate` records the values actually generated next to it."""

    runtime_util: float  # R/W: share of GPU-hours a job held the GPU ("runtime hours")
    real_util: float  # S/W: SM activity averaged over all GPU-hours
    branch: str  # decision_branch(real_util)
    situation: str  # the real case it reproduces


@dataclass(frozen=True)
class _BatchProfile:
    """Slurm-style batch and interactive jobs on lanes of GPUs."""

    lane_widths: tuple[tuple[int, float], ...]  # (GPUs per job, probability); widths divide 8
    starts_per_day: float  # job arrival rate per free lane in working hours
    night_factor: float  # arrival rate at night (20:00-08:00 UTC) relative to working hours
    weekend_factor: float  # arrival rate on Saturday/Sunday relative to weekdays
    durations: tuple[tuple[float, float, float], ...]  # lognormal mixture: (weight, median_s, sigma)
    max_duration_s: float
    interactive_share: float  # share of sub-day jobs that are mostly debugging (notebooks, `srun --pty`)
    debug_batch: tuple[float, float]  # debug share of a batch job's time (uniform range)
    debug_interactive: tuple[float, float]
    sm_batch: tuple[float, float]  # SM activity during compute phases
    sm_interactive: tuple[float, float]
    phase_mean_s: float  # mean length of one compute or debug phase
    setup_s: tuple[float, float]  # data loading / compilation at job start (GPU held, SM ~ 0)
    mem_gib: tuple[float, float]  # memory a job allocates per GPU
    host_skew: float = 0.0  # >0: arrivals concentrate on a few hosts (work that does not scale out)
    users: int = 24
    commands: tuple[str, ...] = ()
    two_process_share: float = 0.1  # jobs with a second process per GPU (e.g. a monitoring kernel)


@dataclass(frozen=True)
class _ServingProfile:
    """Inference replicas scaled by demand: GPU i is held while demand exceeds its rank."""

    base_gpus: tuple[float, float]  # demand in GPUs' worth (night, day)
    peak_gpus: tuple[float, float]  # burst height range
    bursts_per_day: float  # in working hours; night_factor applies outside
    night_factor: float
    burst_median_s: float
    burst_sigma: float
    ramp_up_s: float  # the article's "20 to 200 GPUs in 90 seconds"
    ramp_down_s: float  # scale-down is slower (cool-down windows)
    step_s: float  # demand resolution
    sm_burst: tuple[float, float]
    sm_base: tuple[float, float]
    mem_gib: tuple[float, float]
    namespace: str = "agents"
    command: str = "python3 -m vllm.entrypoints.openai.api_server --model /models/coder-34b --tensor-parallel-size 1"


@dataclass(frozen=True)
class WorkloadScenario:
    """A simulated fleet's workload and its ground truth (the cost model's plans are analysis's CostScenario)."""

    name: str
    title: str
    truth: _GroundTruth
    default_gpus: int
    batch: _BatchProfile | None = None
    serving: _ServingProfile | None = None
    parts: tuple[tuple[str, float], ...] = ()  # mixed: (scenario, share of hosts)
    tolerance: float = 0.04  # how far a small fleet's measured R/W and S/W may stray from the truth
    gpu: GpuModel = _H100_SXM  # a mixed fleet's hosts carry their part's

    @property
    def description(self) -> str:
        return self.truth.situation


_TRAIN_CMDS = (
    "torchrun --nproc-per-node 8 train.py --config configs/llm-7b.yaml",
    "python train.py --model vit-l16 --epochs 90",
    "python -m torch.distributed.run finetune.py --lora --base llama-3-8b",
    "python eval_harness.py --tasks mmlu,gsm8k",
)
INTERACTIVE_CMDS = (
    "/opt/conda/bin/python -m ipykernel_launcher -f /run/user/kernel.json",
    "python debug_dataloader.py",
    "python -i sweep.py",
)

_PHANTOM = WorkloadScenario(
    name="phantom",
    title="Runtime hours ~60 %, real SM activity ~23 %",
    truth=_GroundTruth(
        runtime_util=0.60,
        real_util=0.23,
        branch="cloud",
        situation="The client who believed its fleet ran at 60 % because it counted runtime hours: jobs were "
        "launched, then debugged for hours while GPUs sat half-loaded; real utilization was 23 %.",
    ),
    default_gpus=64,
    batch=_BatchProfile(
        lane_widths=((1, 0.4), (2, 0.3), (4, 0.2), (8, 0.1)),
        starts_per_day=20.0,
        night_factor=0.1,
        weekend_factor=0.3,
        durations=((0.5, 45 * 60, 0.9), (0.4, 5 * 3600, 0.7), (0.1, 30 * 3600, 0.5)),
        max_duration_s=5 * DAY_S,
        interactive_share=0.6,
        # Held and half-loaded more than held and dark (Acme: held GPUs' median SM activity ~34-50 % at a
        # 97-99 % duty cycle): short debug pauses, compute phases that keep few SMs busy.
        debug_batch=(0.02, 0.06),
        debug_interactive=(0.04, 0.12),
        sm_batch=(0.38, 0.47),
        sm_interactive=(0.30, 0.44),
        phase_mean_s=40 * 60,
        setup_s=(120, 1800),
        mem_gib=(12, 76),
        users=24,
        commands=_TRAIN_CMDS + INTERACTIVE_CMDS,
    ),
)

_IDLE_CLUSTER = WorkloadScenario(
    name="idle-cluster",
    title="16 nodes × 8 GPUs bought for a pipeline that uses ~12 %",
    truth=_GroundTruth(
        runtime_util=0.19,
        real_util=0.12,
        branch="cloud",
        situation="The genomics startup's 16-node DGX cluster: ten months in, the pipeline did not scale that "
        "wide and used 12 % of capacity; spot instances would have cost 70 % less.",
    ),
    default_gpus=128,
    batch=_BatchProfile(
        lane_widths=((8, 1.0),),
        starts_per_day=2.2,
        night_factor=0.5,
        weekend_factor=0.5,
        durations=((0.6, 2 * 3600, 0.7), (0.4, 9 * 3600, 0.6)),
        max_duration_s=3 * DAY_S,
        interactive_share=0.1,
        debug_batch=(0.02, 0.08),
        debug_interactive=(0.5, 0.8),
        sm_batch=(0.55, 0.75),  # held at a ~99 % duty cycle, SMs two-thirds busy (Acme-calibrated)
        sm_interactive=(0.3, 0.5),
        phase_mean_s=30 * 60,
        setup_s=(60, 600),
        mem_gib=(30, 70),
        host_skew=2.5,
        users=6,
        commands=(
            "nextflow run nf-core/sarek -profile gpu",
            "parabricks fq2bam --ref GRCh38.fa --in-fq sample_R1.fq.gz sample_R2.fq.gz",
            "python alphafold/run_alphafold.py --model_preset=multimer",
        ),
    ),
)

_STEADY_TRAINING = WorkloadScenario(
    name="steady-training",
    title="The same model family trained 24/7: ~95 % real utilization",
    truth=_GroundTruth(
        runtime_util=0.99,
        real_util=0.95,
        branch="on-prem",
        situation="The research lab that trains one model family around the clock for nine months at 95 % "
        "utilization and built a private cluster (payback in 11 months).",
    ),
    default_gpus=64,
    batch=_BatchProfile(
        lane_widths=((8, 1.0),),
        starts_per_day=400.0,  # requeued within minutes of the previous run ending
        night_factor=1.0,
        weekend_factor=1.0,
        durations=((1.0, 3 * DAY_S, 0.4),),
        max_duration_s=10 * DAY_S,
        interactive_share=0.0,
        debug_batch=(0.0, 0.04),  # checkpoint saves, evaluation pauses
        debug_interactive=(0.0, 0.0),
        sm_batch=(0.96, 0.995),
        sm_interactive=(0.96, 0.995),
        phase_mean_s=20 * 60,
        setup_s=(120, 600),
        mem_gib=(70, 79),
        users=3,
        commands=("torchrun --nnodes 8 --nproc-per-node 8 pretrain.py --config family/v3-13b.yaml",),
        two_process_share=0.0,
    ),
    tolerance=0.02,
)

_BURSTY_AGENTS = WorkloadScenario(
    name="bursty-agents",
    title="Coding-agent inference that jumps between ~20 and ~200 GPUs within minutes",
    truth=_GroundTruth(
        runtime_util=0.28,
        real_util=0.17,
        branch="cloud",
        situation="The coding-agent company: one query fans out to 50-200 model calls, so load bursts from 20 "
        "to 200 GPUs in 90 seconds; on-prem needed 4x peak capacity, autoscaled cloud cost 60 % less.",
    ),
    default_gpus=256,
    serving=_ServingProfile(
        base_gpus=(12.0, 24.0),
        peak_gpus=(150.0, 210.0),
        bursts_per_day=24.0,
        night_factor=0.25,
        burst_median_s=30 * 60,
        burst_sigma=0.6,
        ramp_up_s=90.0,
        ramp_down_s=300.0,
        step_s=30.0,
        sm_burst=(0.6, 0.85),
        sm_base=(0.35, 0.55),
        mem_gib=(60, 76),
    ),
)

_MIXED = WorkloadScenario(
    name="mixed",
    title="A shared fleet: steady training, research jobs, bursty inference and idle nodes",
    truth=_GroundTruth(
        runtime_util=0.62,
        real_util=0.39,
        branch="hybrid",
        situation="A typical shared fleet: one team trains around the clock, research teams run phantom-style "
        "jobs, an inference service bursts, and a few nodes bought for a pipeline sit idle; the "
        "answer is hybrid (own the steady base, rent the bursts).",
    ),
    default_gpus=128,
    parts=(("steady-training", 0.25), ("phantom", 0.5), ("bursty-agents", 0.125), ("idle-cluster", 0.125)),
    tolerance=0.05,
)

# The two parts of MIXED_MODELS (building blocks, not scenarios of their own).
_H100_TRAINING = WorkloadScenario(
    name="h100-training",
    title="8 H100 SXM training around the clock at ~70 % SM activity",
    truth=_GroundTruth(
        runtime_util=1.0,
        real_util=0.70,
        branch="hybrid",
        situation="A team's eight H100s, requeued within minutes of each run ending, their SMs about 70 % busy.",
    ),
    default_gpus=8,
    batch=_BatchProfile(
        lane_widths=((8, 1.0),),
        starts_per_day=400.0,
        night_factor=1.0,
        weekend_factor=1.0,
        durations=((1.0, 3 * DAY_S, 0.4),),
        max_duration_s=10 * DAY_S,
        interactive_share=0.0,
        debug_batch=(0.0, 0.03),
        debug_interactive=(0.0, 0.0),
        sm_batch=(0.68, 0.74),
        sm_interactive=(0.68, 0.74),
        phase_mean_s=20 * 60,
        setup_s=(120, 600),
        mem_gib=(60, 79),
        users=2,
        commands=("torchrun --nproc-per-node 8 train.py --config configs/llm-7b.yaml",),
        two_process_share=0.0,
    ),
    tolerance=0.02,
)

_T4_INFERENCE = WorkloadScenario(
    name="t4-inference",
    title="32 T4 serving batch inference ~15 % of the hours at ~30 % SM activity",
    truth=_GroundTruth(
        runtime_util=0.15,
        real_util=0.045,
        branch="cloud",
        situation="Inference boxes of T4s that a nightly and an ad-hoc batch job each hold for an hour or two.",
    ),
    default_gpus=32,
    batch=_BatchProfile(
        lane_widths=((1, 1.0),),
        starts_per_day=2.0,  # per free GPU: held 2 h x 2 / (1 + 2 h x 2 / day) of the time, ~15 %
        night_factor=1.0,
        weekend_factor=1.0,
        durations=((1.0, 2 * 3600, 0.3),),
        max_duration_s=8 * 3600,
        interactive_share=0.0,
        debug_batch=(0.0, 0.02),
        debug_interactive=(0.0, 0.0),
        sm_batch=(0.27, 0.33),
        sm_interactive=(0.27, 0.33),
        phase_mean_s=20 * 60,
        setup_s=(30, 120),
        mem_gib=(4, 14),
        users=4,
        commands=("tritonserver --model-repository /models/bert-large", "python batch_infer.py --model resnet50"),
        two_process_share=0.0,
    ),
    tolerance=0.03,
    gpu=T4,
)

_MIXED_MODELS = WorkloadScenario(
    name="mixed-models",
    title="Two GPU models: 8 H100 training around the clock beside 32 T4 mostly idle",
    truth=_GroundTruth(
        runtime_util=0.32,  # (8 x 1.0 + 32 x 0.15) / 40
        real_util=0.176,  # (8 x 0.70 + 32 x 0.045) / 40
        branch="cloud",
        situation="A fleet of two models priced as one is priced wrong: the eight busy H100s are worth owning, "
        "the 32 T4s held 15 % of the hours are not; one fleet-wide figure hides both.",
    ),
    default_gpus=40,
    parts=(("h100-training", 0.2), ("t4-inference", 0.8)),
    tolerance=0.03,
)

SCENARIOS: dict[str, WorkloadScenario] = {
    s.name: s for s in (_PHANTOM, _IDLE_CLUSTER, _STEADY_TRAINING, _BURSTY_AGENTS, _MIXED, _MIXED_MODELS)
}
_PARTS: dict[str, WorkloadScenario] = {s.name: s for s in (_H100_TRAINING, _T4_INFERENCE)}


def get_scenario(name: str) -> WorkloadScenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise GpuauditError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def part(name: str) -> WorkloadScenario:
    """A part of a mixed scenario: a scenario, or one of the building blocks that exist only as parts."""
    return _PARTS[name] if name in _PARTS else get_scenario(name)


def model_truth(sc: WorkloadScenario) -> dict[str, dict[str, float]]:
    """The documented runtime and real utilization per GPU model (by NVML name): a one-model fleet's is the
    scenario's; a mixed one's is its parts', weighted by their share of the hosts."""
    if not sc.parts:
        return {sc.gpu.name: {"runtime_util": sc.truth.runtime_util, "real_util": sc.truth.real_util}}
    acc: dict[str, list[float]] = {}
    for name, share in sc.parts:
        p = part(name)
        a = acc.setdefault(p.gpu.name, [0.0, 0.0, 0.0])
        a[0] += share
        a[1] += share * p.truth.runtime_util
        a[2] += share * p.truth.real_util
    if len(acc) == 1:
        return {name: {"runtime_util": sc.truth.runtime_util, "real_util": sc.truth.real_util} for name in acc}
    return {name: {"runtime_util": round(r / w, 6), "real_util": round(u / w, 6)} for name, (w, r, u) in acc.items()}


# ------------------------------------------------------------------------------------------ fleet identity


def host_name(host_index: int) -> str:
    return f"gpu-node-{host_index + 1:03d}"


def gpu_uuid(host: str, index: int) -> str:
    """A stable, UUID-shaped id per (host, index): the same fleet keeps its GPU ids across seeds."""
    h = hashlib.sha1(f"gpuaudit-sim/{host}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def default_start(days: float, now: datetime | None = None) -> datetime:
    """Midnight UTC `days` days before today."""
    now = now or datetime.now(UTC)
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=math.ceil(days))


# ------------------------------------------------------------------------------------------ the load model
