"""The dataset contract: what a sample is. Every producer (simulator, agent, importer) and every reader
(sql, analyzer, report) goes through these definitions; the README's schema tables are generated from
and tested against them.

Conventions: units in names, fractions 0-1 (never percent) in storage, timestamps in UTC.
Bump SCHEMA_VERSION when a column's meaning changes; adding a nullable column keeps old files readable
(readers union by name) and also bumps the version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEMA_VERSION = 3  # 3: gpu_processes.pod_uid, gpu_allocations.gpu_model
MIB = 1 << 20  # bytes: memory is stored in bytes; NVML, DCGM and the simulator speak MiB
SCHEMA_VERSION_KEY = "gpuaudit.schema_version"

SAMPLES = "gpu_samples"
PROCESSES = "gpu_processes"
ALLOCATIONS = "gpu_allocations"  # what the scheduler (Slurm, Kubernetes) allocated, per job per host
TABLES = (SAMPLES, PROCESSES, ALLOCATIONS)
# The SQL view name each table is exposed under.
VIEW_NAMES = {SAMPLES: "samples", PROCESSES: "processes", ALLOCATIONS: "allocations"}
# The column whose UTC date is a row's `date` partition (an allocation lives in the partition of its start).
PARTITION_TIME = {SAMPLES: "ts", PROCESSES: "ts", ALLOCATIONS: "start_ts"}
# Tables `gpuaudit compact` merges. Allocations are small and each importer replaces its own file per
# partition (<source>-<stamp>.parquet) to stay idempotent, which a merged file would defeat.
COMPACTED_TABLES = (SAMPLES, PROCESSES)
# Values of gpu_allocations.source.
ALLOC_SOURCE_SLURM = "slurm"
ALLOC_SOURCE_KUBERNETES = "kubernetes"

_MIG_SLICES_PER_GPU = 7  # compute slices of an A100 / H100 / H200 / B200 (a 3g profile is 3/7 of the GPU)
# An A30 has 4 compute slices; its profiles (24 GB: 1g.6gb, 2g.12gb, 4g.24gb) name no other model's.
_FOUR_SLICE_MODELS = ("A30",)
_FOUR_SLICE_PROFILES = ("1g.6gb", "2g.12gb", "4g.24gb")


def mig_fraction(mig_profile: str | None, gpu_name: str | None = None) -> float:
    """Share of a physical GPU a MIG profile stands for: the leading slice count over the model's compute slices
    (7, or 4 on an A30, told by its name or its profile). `3g.40gb` -> 3/7, `1g.10gb+me` -> 1/7, `1c.3g.40gb`
    (a compute instance) -> 3/7 (its GPU instance), `1g.6gb` -> 1/4. A whole GPU (no profile) is 1; an
    unreadable profile counts as one slice."""
    if not mig_profile:
        return 1.0
    four = (gpu_name is not None and any(m in gpu_name for m in _FOUR_SLICE_MODELS)) or any(
        re.search(rf"(?:^|[._]){re.escape(p)}(?:$|[+_])", mig_profile) for p in _FOUR_SLICE_PROFILES)
    total = 4 if four else _MIG_SLICES_PER_GPU
    m = re.search(r"(?:^|\.)(\d+)g\.", mig_profile)
    slices = int(m.group(1)) if m else 1
    return min(slices, total) / total

# Hive partition keys, in directory order. They are not stored inside the files.
PARTITION_KEYS = ("host", "date")

# Values of `source` (which path produced sm_active).
SOURCE_NVML_GPM = "nvml-gpm"  # NVML GPM: true SM activity
SOURCE_NVML = "nvml"  # duty cycle only: sm_active is null, analyzer uses duty_cycle as an upper bound
SOURCE_PROM_DCGM = "prometheus-dcgm"  # DCGM profiling metrics (SM_ACTIVE) via Prometheus
SOURCE_PROM_DCGM_UTIL = "prometheus-dcgm-util"  # only DCGM_FI_DEV_GPU_UTIL: upper bound like `nvml`
SOURCE_SIMULATED = "simulated"
# Imported rows name the exporter they came from and how SM activity was measured there:
# prometheus-<exporter> (SM activity), prometheus-<exporter>-engine (engine-active only: gr_engine_active
# set, sm_active NULL, an upper bound tighter than the duty cycle), prometheus-<exporter>-util (duty cycle only).
IMPORT_EXPORTERS = ("dcgm", "jobstats", "nvidia-smi", "gpuaudit")  # the presets (importer/prometheus/presets.py)
MEASURED_SM, MEASURED_ENGINE, MEASURED_DUTY = "sm", "engine", "duty"


def import_source(exporter: str, measured: str) -> str:
    """The `source` of an imported row: which exporter, and which measurement stands for SM activity."""
    return f"prometheus-{exporter}" + {MEASURED_SM: "", MEASURED_ENGINE: "-engine", MEASURED_DUTY: "-util"}[measured]


IMPORT_SOURCES = tuple(import_source(e, m) for e in IMPORT_EXPORTERS
                       for m in (MEASURED_SM, MEASURED_ENGINE, MEASURED_DUTY))
# Engine-active only (DCGM_FI_PROF_GR_ENGINE_ACTIVE, GPM graphics activity): "engine-active, not SM activity".
ENGINE_ACTIVE_SOURCES = tuple(import_source(e, MEASURED_ENGINE) for e in IMPORT_EXPORTERS)
# Sources that cannot measure SM activity: their rows have sm_active NULL (the writer enforces it), and
# readers fall back to gr_engine_active, else duty_cycle there, flagged as an upper bound.
DUTY_CYCLE_ONLY_SOURCES = (SOURCE_NVML, *(import_source(e, m) for e in IMPORT_EXPORTERS
                                          for m in (MEASURED_ENGINE, MEASURED_DUTY)))
# The one line of dcgm-exporter's counters CSV (etc/default-counters.csv ships it commented out) that makes
# it export SM activity.
DCGM_SM_ACTIVE_CSV_LINE = "DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned."
# Which stream counts where several report one GPU over the same time (stage 1's de-duplication): the lowest
# rank wins (true SM activity before engine activity before duty cycle, the agent before an import); a source not
# listed ranks after all of these. sql/analysis_streams.sql spells it out as a CASE; a test runs that CASE over
# every source here and checks it against this table.
_MEASURED_PRECEDENCE = {MEASURED_SM: 2, MEASURED_ENGINE: 3, MEASURED_DUTY: 5}
SOURCE_PRECEDENCE = {SOURCE_NVML_GPM: 1, SOURCE_SIMULATED: 1, SOURCE_NVML: 4,
                     **{import_source(e, m): rank for e in IMPORT_EXPORTERS
                        for m, rank in _MEASURED_PRECEDENCE.items()}}
OTHER_SOURCE_PRECEDENCE = 6

# Value rules beyond the types. The writer refuses rows that break the first two; the reader (conformance.py)
# leaves out rows that break any of them, whoever wrote the file.
FRACTIONS = {  # must hold 0-1 (catches a producer that wrote percent), within FRACTION_TOLERANCE
    SAMPLES: ("sm_active", "gr_engine_active", "sm_occupancy", "tensor_active", "dram_active", "duty_cycle",
              "mem_util", "gpu_fraction"),
    PROCESSES: ("sm_util",),
}
FRACTION_TOLERANCE = 0.001  # a producer's rounding, not an error
NON_NEGATIVE = {  # counts, indices, sizes and energy: a negative value is no measurement
    SAMPLES: ("mem_used_bytes", "mem_total_bytes", "power_w", "energy_j", "n_processes", "gpu_index", "mig_instance"),
    PROCESSES: ("mem_used_bytes", "mig_instance", "pid"),
    ALLOCATIONS: ("gpus",),
}
MAX_INTERVAL_S = 86400.0  # interval_s must be in (0, MAX_INTERVAL_S]
TS_MIN = "2000-01-01"  # ts must be >= TS_MIN (UTC) and at most TS_MAX_AHEAD_S past the reader's "now"
TS_MAX_AHEAD_S = 86400  # an earlier ts is a reset clock, a later one a wrong clock: neither is a sample


# The longest text each text column may hold, in characters: what real producers give, with room to spare
# (NVML's device name buffer is 96 bytes, a Kubernetes object name 253, the agent cuts a command line at 256).
# The writer cuts a longer value to its bound; the reader leaves out a row that holds one (a foreign file with
# 100 MB strings would otherwise cost gigabytes of memory and a report of hundreds of MB), naming the file.
TEXT_MAX_CHARS = {
    SAMPLES: {"gpu_uuid": 128, "gpu_name": 256, "mig_profile": 64, "source": 64},
    PROCESSES: {"gpu_uuid": 128, "user": 256, "job_id": 256, "k8s_namespace": 253, "k8s_pod": 253,
                "pod_uid": 64, "container": 256, "command": 256},
    # job_id: a Kubernetes namespace/pod is up to 253 + 1 + 253 characters
    ALLOCATIONS: {"job_id": 512, "job_id_raw": 256, "user": 256, "account": 256, "partition": 256,
                  "namespace": 253, "gpu_type": 128, "gpu_model": 64, "mig_profile": 64, "state": 64,
                  "source": 64},
}


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # DuckDB type as written to Parquet
    unit: str
    meaning: str
    nullable: bool = True


SAMPLE_COLUMNS: tuple[Column, ...] = (
    Column("ts", "TIMESTAMPTZ", "UTC", "end of the interval", nullable=False),
    Column("interval_s", "FLOAT", "s", "length of the interval this row averages over", nullable=False),
    Column("host", "VARCHAR", "", "node hostname (partition key)", nullable=False),
    Column("gpu_uuid", "VARCHAR", "", "GPU UUID (of the parent GPU for a MIG instance)", nullable=False),
    Column("gpu_index", "SMALLINT", "", "NVML index of the GPU on its host"),
    Column("gpu_name", "VARCHAR", "", "product name, e.g. NVIDIA H100 80GB HBM3"),
    Column("mig_instance", "SMALLINT", "",
           "MIG GPU instance id; null for a whole GPU in the files (gpu_hours and the canned queries show -1)"),
    Column("mig_profile", "VARCHAR", "", "MIG profile, e.g. 3g.40gb; null for a whole GPU"),
    Column(
        "gpu_fraction",
        "FLOAT",
        "GPUs",
        "share of a physical GPU this row stands for (1 for a whole GPU, slices/7 for a MIG instance); "
        "GPU-hours are weighted by it",
        nullable=False,
    ),
    Column("sm_active", "FLOAT", "0-1", "SM activity, interval average (GPM or DCGM); null where unmeasured"),
    Column("gr_engine_active", "FLOAT", "0-1", "graphics engine active (DCGM GR_ENGINE_ACTIVE, GPM graphics "
           "activity), interval average: time any SM had work, an upper bound on sm_active"),
    Column("sm_occupancy", "FLOAT", "0-1", "SM occupancy (resident warps / max), interval average"),
    Column("tensor_active", "FLOAT", "0-1", "tensor pipe activity, interval average"),
    Column("dram_active", "FLOAT", "0-1", "DRAM bandwidth utilization, interval average"),
    Column("duty_cycle", "FLOAT", "0-1", "nvidia-smi utilization.gpu: share of time a kernel ran"),
    Column("mem_util", "FLOAT", "0-1", "memory controller utilization (nvidia-smi utilization.memory)"),
    Column("mem_used_bytes", "BIGINT", "bytes", "framebuffer memory used, at the end of the interval"),
    Column("mem_total_bytes", "BIGINT", "bytes", "framebuffer memory total"),
    Column("power_w", "FLOAT", "W", "average board power over the interval (a MIG instance: its share of "
           "the GPU's, the shares of a GPU's instances adding up to the GPU's once)"),
    Column("energy_j", "FLOAT", "J", "energy used in the interval (a MIG instance: its share, as power_w)"),
    Column("temp_c", "SMALLINT", "°C", "GPU temperature at the end of the interval"),
    Column("n_processes", "SMALLINT", "", "compute processes on the GPU during the interval", nullable=False),
    Column("source", "VARCHAR", "", "which path produced sm_active: nvml-gpm, nvml, simulated, or an "
           "import: prometheus-EXPORTER, its -engine or -util variant (EXPORTER: dcgm, jobstats, nvidia-smi, "
           "gpuaudit)",
           nullable=False),
)

_PROCESS_COLUMNS: tuple[Column, ...] = (
    Column("ts", "TIMESTAMPTZ", "UTC", "end of the interval", nullable=False),
    Column("host", "VARCHAR", "", "node hostname (partition key)", nullable=False),
    Column("gpu_uuid", "VARCHAR", "", "GPU UUID the process ran on", nullable=False),
    Column("mig_instance", "SMALLINT", "",
           "MIG GPU instance id; null for a whole GPU in the files (gpu_hours and the canned queries show -1)"),
    Column("pid", "INTEGER", "", "process id on the host (null when imported from Prometheus)"),
    Column("user", "VARCHAR", "", "user name (from the process uid)"),
    Column("job_id", "VARCHAR", "", "Slurm job id (or the exporter's hpc_job label)"),
    Column("k8s_namespace", "VARCHAR", "", "Kubernetes namespace"),
    Column("k8s_pod", "VARCHAR", "", "Kubernetes pod name (or pod UID when only that is known)"),
    Column("pod_uid", "VARCHAR", "", "Kubernetes pod UID (the agent's cgroup, dcgm-exporter's pod_uid label); "
           "null where unknown"),
    Column("container", "VARCHAR", "", "container name or id"),
    Column("command", "VARCHAR", "", "command line, truncated to 256 characters"),
    Column("mem_used_bytes", "BIGINT", "bytes", "GPU memory used by the process"),
    Column("sm_util", "FLOAT", "0-1", "the process's SM utilization from NVML, null if unknown"),
)

_ALLOCATION_COLUMNS: tuple[Column, ...] = (
    Column("job_id", "VARCHAR", "", "the scheduler's job id as it shows it: Slurm JobID (123, 123_4 for an array "
           "task, 123+0 for a heterogeneous job's component), Kubernetes namespace/pod", nullable=False),
    Column("job_id_raw", "VARCHAR", "", "Slurm JobIDRaw (the id cgroups and SLURM_JOB_ID carry, as the agent "
           "records it); the pod UID for Kubernetes"),
    Column("user", "VARCHAR", "", "user the job ran as (Slurm); null for Kubernetes"),
    Column("account", "VARCHAR", "", "Slurm account (charged for the job)"),
    Column("partition", "VARCHAR", "", "Slurm partition"),
    Column("namespace", "VARCHAR", "", "Kubernetes namespace of the pod"),
    Column("host", "VARCHAR", "", "node the GPUs were allocated on (partition key)", nullable=False),
    Column("gpus", "DOUBLE", "GPUs", "GPU equivalents allocated on this host (a MIG slice as its share: 3g.40gb "
           "= 3/7; a multi-node job's GPUs per node from its steps where sacct says, else split evenly)",
           nullable=False),
    Column("gpu_type", "VARCHAR", "", "GPU type the scheduler named (Slurm GRES type, e.g. a100; the node's "
           "nvidia.com/gpu.product label on Kubernetes), if any"),
    Column("gpu_model", "VARCHAR", "", "gpu_type as a model key (gpuaudit.catalog: h100-sxm-80gb, t4, ...); null "
           "where the scheduler names no type"),
    Column("mig_profile", "VARCHAR", "", "MIG profile allocated, e.g. 3g.40gb; null for whole GPUs"),
    Column("start_ts", "TIMESTAMPTZ", "UTC", "when the allocation started", nullable=False),
    Column("end_ts", "TIMESTAMPTZ", "UTC", "when it ended (a running job: the import's --now)", nullable=False),
    Column("state", "VARCHAR", "", "job state: COMPLETED, RUNNING, CANCELLED, TIMEOUT, FAILED, NODE_FAIL, "
           "PREEMPTED, ... (Kubernetes: the pod phase)", nullable=False),
    Column("source", "VARCHAR", "", "where it came from: slurm, kubernetes", nullable=False),
)

COLUMNS: dict[str, tuple[Column, ...]] = {SAMPLES: SAMPLE_COLUMNS, PROCESSES: _PROCESS_COLUMNS,
                                          ALLOCATIONS: _ALLOCATION_COLUMNS}


def column_names(table: str) -> list[str]:
    return [c.name for c in COLUMNS[table]]


def stored_columns(table: str) -> list[Column]:
    """Columns written inside the Parquet files (the partition keys live in the directory names)."""
    return [c for c in COLUMNS[table] if c.name not in PARTITION_KEYS]


def typed_select(table: str, present: set[str] | None = None, *, columns: list[Column] | None = None,
                 bounded: bool = False) -> str:
    """The SELECT list casting each contract column to its type, in contract order; a column not in
    `present` (when given) becomes a typed NULL, so old files and partial producers still fit. `bounded` (the
    writer): text cut to its TEXT_MAX_CHARS bound."""
    cols = columns if columns is not None else list(COLUMNS[table])
    bounds = TEXT_MAX_CHARS[table] if bounded else {}
    parts = []
    for c in cols:
        expr = quote_ident(c.name) if present is None or c.name in present else "NULL"
        cast = f"CAST({expr} AS {c.sql_type})"
        if c.name in bounds and expr != "NULL":
            cast = f"left({cast}, {bounds[c.name]})"
        parts.append(f"{cast} AS {quote_ident(c.name)}")
    return ", ".join(parts)


def empty_select(table: str, *, stored_only: bool = False) -> str:
    """A typed, zero-row SELECT with every column of `table` (plus the `date` partition key unless
    `stored_only`): keeps views complete on an empty or old dataset (a column no file has yet still
    exists, as NULL)."""
    if stored_only:
        return f"SELECT {typed_select(table, set(), columns=stored_columns(table))} WHERE false"
    return f"SELECT {typed_select(table, set())}, CAST(NULL AS DATE) AS date WHERE false"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def markdown_table(table: str) -> str:
    """The README's schema table for `table` (a test keeps the README in step with this module)."""
    lines = ["| column | type | unit | meaning |", "|---|---|---|---|"]
    for c in COLUMNS[table]:
        null = "" if c.nullable else " (never null)"
        lines.append(f"| `{c.name}` | {c.sql_type} | {c.unit} | {c.meaning}{null} |")
    return "\n".join(lines)
