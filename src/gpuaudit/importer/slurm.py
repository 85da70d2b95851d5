"""Slurm allocations from `sacct --parsable2`: what the scheduler says each job held, per job per host.

Facts of the format this relies on (Slurm's sacct man page and src/sacct/print.c):
- `--parsable2` separates fields with `|` and prints no trailing one (`--parsable` does: accepted too); the first
  line is the header unless `--noheader` (refused here: the header names the columns).
- A job prints one row for the allocation and one per step (`123.batch`, `123.extern`, `123.0`,
  `123.interactive`). Step rows repeat the job's GPUs in their own AllocTRES, so the allocation is taken from the
  job row alone, never summed with its steps. User and Partition print on job rows only; Account on both.
- JobID is `123`, `123_4` (array task), `123+0` (heterogeneous job component); JobIDRaw is the plain id that
  cgroups and SLURM_JOB_ID carry (what the agent records). A pending array prints `123_[5-10]`.
- Start and End print `YYYY-MM-DDTHH:MM:SS` in the local time of the machine sacct ran on, without an offset,
  unless SLURM_TIME_FORMAT changes it; a running job's End and a pending job's Start are `Unknown`. A pending
  job's NodeList is `None assigned` and its AllocTRES is empty.
- State is a word (`COMPLETED`, `TIMEOUT`, `NODE_FAIL`, `PREEMPTED`, ...), `CANCELLED by <uid>` when a user
  cancelled it.
- AllocTRES is `billing=16,cpu=16,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1`: the typed GRES (`gres/gpu:TYPE=N`)
  and the untyped total (`gres/gpu=N`), or only one of them. A MIG slice's type names its profile
  (`gres/gpu:3g.40gb=1`, or with a prefix such as `nvidia_a100_3g.40gb`): 3 of the GPU's 7 compute slices.
- NodeList is a host list (`dgx-a100-[01-02,05]`, gpuaudit.importer.hostlist). AllocTRES counts the whole job:
  a multi-node job's GPUs are split evenly over its nodes (sacct does not say how they were spread).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpuaudit import schema
from gpuaudit.catalog import model_key
from gpuaudit.errors import GpuauditError
from gpuaudit.importer import hostlist

SOURCE = schema.ALLOC_SOURCE_SLURM
# The fields asked of sacct (and required in a file's header); names are case-insensitive in the header.
FIELDS = ("JobID", "JobIDRaw", "User", "Account", "Partition", "State", "Start", "End", "NodeList", "AllocTRES")
REQUIRED = ("JobID", "State", "Start", "End", "NodeList", "AllocTRES")
# When gpuaudit runs sacct itself it asks for times with their offset: no --tz guesswork.
TIME_FORMAT_ENV = "%Y-%m-%dT%H:%M:%S%z"
_MIG = re.compile(r"(?:^|_)(\d)g\.(\d+)gb(?:$|[_+])", re.IGNORECASE)
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:Z|[+-]\d{2}:?\d{2})?")
_NOT_STARTED = {"unknown", "none", ""}
_NO_NODES = {"none assigned", "(null)", "none", ""}
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+|\+[0-9]+)?")  # a job row (steps have a dot; pending arrays a bracket)


@dataclass
class SlurmImport:
    rows: list[dict[str, Any]] = field(default_factory=list)
    jobs: int = 0  # job rows with GPUs (each gives one row per host)
    skipped: Counter[str] = field(default_factory=Counter)  # why job rows were left out
    examples: dict[str, str] = field(default_factory=dict)  # a job id per reason, for the message


def zone(name: str | None) -> tzinfo | None:
    """--tz: an IANA zone (Europe/Berlin, UTC); None: this machine's local zone."""
    if name is None:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise GpuauditError(f"unknown time zone {name!r} for --tz: use an IANA name such as UTC or "
                            "Europe/Berlin") from None


def parse_time(text: str, tz: tzinfo | None, job: str, what: str) -> datetime:
    """A sacct time in UTC: with its own offset, else in `tz` (None: this machine's zone)."""
    t = text.strip()
    if not _TIME.fullmatch(t):
        raise GpuauditError(f"job {job}: unknown time format {text!r} in {what} (expected YYYY-MM-DDTHH:MM:SS, "
                            "sacct's default: unset SLURM_TIME_FORMAT or set it to standard)")
    try:
        parsed = datetime.fromisoformat(t)
    except ValueError:
        raise GpuauditError(f"job {job}: bad time {text!r} in {what}") from None
    if parsed.tzinfo is None:
        # A naive datetime's astimezone() reads it as this machine's local time, daylight saving included.
        parsed = parsed.replace(tzinfo=tz) if tz is not None else parsed.astimezone()
    return parsed.astimezone(UTC)


@dataclass(frozen=True)
class Gpus:
    gpus: float  # GPU equivalents (a MIG slice as its share)
    gpu_type: str | None
    mig_profile: str | None

    @property
    def model(self) -> str | None:
        """The GRES type's catalogue key; None without a type, or with several (which GPUs a node got of each,
        sacct does not say)."""
        return model_key(self.gpu_type) if self.gpu_type and "," not in self.gpu_type else None


def parse_tres(text: str, job: str) -> Gpus | None:
    """The GPUs in an AllocTRES string, or None when it holds none (a CPU-only job)."""
    typed: dict[str, float] = {}
    untyped: float | None = None
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise GpuauditError(f"job {job}: bad AllocTRES entry {item!r} (expected name=value)")
        name = name.strip()
        if name != "gres/gpu" and not name.startswith("gres/gpu:"):
            continue
        count = _count(value.strip(), job, item)
        if name == "gres/gpu":
            untyped = count
        else:
            kind = name.removeprefix("gres/gpu:")
            typed[kind] = typed.get(kind, 0.0) + count
    typed = {k: v for k, v in typed.items() if v > 0}
    if not typed and not untyped:
        return None
    equivalents = 0.0
    profiles, kinds = set(), set()
    for kind, n in typed.items():
        m = _MIG.search(kind)
        if m:
            profile = f"{m.group(1)}g.{m.group(2)}gb"
            profiles.add(profile)
            equivalents += n * schema.mig_fraction(profile)
        else:
            kinds.add(kind)
            equivalents += n
    # The untyped total counts devices; any beyond the typed ones are GPUs of no named type.
    equivalents += max(0.0, (untyped or 0.0) - sum(typed.values()))
    gpu_type = ",".join(sorted(kinds)) or None
    mig = ",".join(sorted(profiles)) or None
    return Gpus(equivalents, gpu_type, mig)


def _count(value: str, job: str, item: str) -> float:
    if not re.fullmatch(r"\d+", value):
        raise GpuauditError(f"job {job}: bad GPU count in AllocTRES entry {item!r}")
    return float(int(value))


def parse_sacct(text: str, *, tz: tzinfo | None = None, now: datetime | None = None) -> SlurmImport:
    """Allocation rows (one per job per host) from `sacct --parsable2` output. Malformed input (a line with
    the wrong number of fields, an unknown time format, a bad AllocTRES or host list) raises GpuauditError
    naming the line and job: nothing is imported. Jobs without GPUs, pending jobs and jobs that end before they
    start are left out and counted."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise GpuauditError("the sacct output is empty (no header line)")
    header = [h.strip() for h in lines[0].split("|")]
    trailing = bool(header) and header[-1] == ""  # --parsable: a '|' at the end of every line
    if trailing:
        header = header[:-1]
    index = {h.lower(): i for i, h in enumerate(header)}
    missing = [f for f in REQUIRED if f.lower() not in index]
    if missing:
        raise GpuauditError(f"the sacct output's first line is not a header with {', '.join(missing)}: run sacct "
                            f"--parsable2 --format={','.join(FIELDS)} (without --noheader)")
    out = SlurmImport()
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if trailing and cells and cells[-1] == "":
            cells = cells[:-1]
        job_text = cells[index["jobid"]].strip() if len(cells) > index["jobid"] else line[:40]
        if len(cells) != len(header):
            raise GpuauditError(f"sacct line {number} (job {job_text}): {len(cells)} fields, the header has "
                                f"{len(header)} (a '|' inside a value? nothing was imported)")
        row = {h: cells[i].strip() for h, i in index.items()}
        _job_row(row, number, tz, now, out)
    return out


def _skip(out: SlurmImport, reason: str, job: str) -> None:
    out.skipped[reason] += 1
    out.examples.setdefault(reason, job)


def _job_row(row: dict[str, str], number: int, tz: tzinfo | None, now: datetime, out: SlurmImport) -> None:
    job = row["jobid"]
    if "." in job:
        return  # a step: the allocation is the job row's
    state = row["state"].split(" ")[0].rstrip("+").upper() or "UNKNOWN"
    if "[" in job or state == "PENDING" or row["start"].lower() in _NOT_STARTED \
            or row["nodelist"].lower() in _NO_NODES:
        _skip(out, "pending (no allocation yet)", job)
        return
    if not _JOB_ID.fullmatch(job):
        raise GpuauditError(f"sacct line {number}: bad JobID {job!r}")
    gpus = parse_tres(row["alloctres"], job)
    if gpus is None:
        _skip(out, "no GPU in AllocTRES", job)
        return
    start = parse_time(row["start"], tz, job, "Start")
    running = row["end"].lower() in _NOT_STARTED
    end = now if running else parse_time(row["end"], tz, job, "End")
    if end < start:
        _skip(out, "ends before it starts", job)
        return
    if end == start:
        _skip(out, "ran no time", job)
        return
    hosts = hostlist.expand(row["nodelist"])
    raw = row.get("jobidraw") or None
    out.jobs += 1
    for host in hosts:
        out.rows.append({
            "job_id": job, "job_id_raw": raw, "user": row.get("user") or None,
            "account": row.get("account") or None, "partition": row.get("partition") or None,
            "namespace": None, "host": host, "gpus": gpus.gpus / len(hosts), "gpu_type": gpus.gpu_type,
            "gpu_model": gpus.model, "mig_profile": gpus.mig_profile, "start_ts": start, "end_ts": end,
            "state": "RUNNING" if running else state, "source": SOURCE,
        })


def sacct_command(start: datetime, end: datetime) -> list[str]:
    """The sacct invocation gpuaudit runs: every user's jobs that ran in [start, end], job and step rows."""
    fmt = lambda t: t.astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731 - sacct reads local time
    return ["sacct", "--allusers", "--parsable2", "--noconvert", f"--format={','.join(FIELDS)}",
            "-S", fmt(start), "-E", fmt(end)]


def run_sacct(start: datetime, end: datetime, *, timeout_s: float = 300) -> str:
    """Run sacct on this machine (it must be on PATH) and return its output."""
    exe = shutil.which("sacct")
    if exe is None:
        raise GpuauditError("sacct is not on PATH: run this on a Slurm login node, or pass --sacct-file FILE "
                            f"(made with: sacct --allusers --parsable2 --format={','.join(FIELDS)} -S ... -E ...)")
    cmd = [exe, *sacct_command(start, end)[1:]]
    env = {**os.environ, "SLURM_TIME_FORMAT": TIME_FORMAT_ENV}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise GpuauditError(f"sacct did not answer within {timeout_s:g} s") from None
    except OSError as e:
        raise GpuauditError(f"cannot run sacct: {e.strerror or e}") from None
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise GpuauditError(f"sacct failed: {detail}")
    return done.stdout


def import_sacct(root: Any, text: str, *, tz: tzinfo | None = None, now: datetime | None = None) -> Any:
    """Parse sacct output and write its allocations into the dataset at `root` (importer.allocations): all of
    it or, on malformed input, nothing."""
    from gpuaudit.importer.allocations import store_rows

    parsed = parse_sacct(text, tz=tz, now=now)
    return store_rows(root, parsed.rows, SOURCE, parsed.jobs, parsed.skipped, parsed.examples)
