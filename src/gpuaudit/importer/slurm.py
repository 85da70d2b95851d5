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
- NodeList is a host list (`dgx-a100-[01-02,05]`, gpuaudit.importer.hostlist). AllocTRES counts the whole job.
  How a multi-node job's GPUs were spread over its nodes comes from its steps (src/stepmgr/stepmgr.c,
  step_set_alloc_tres): the extern step repeats the whole job's; the batch and interactive steps hold the job's
  GRES on its first node (`gres_stepmgr_gres_on_node_as_tres(job's GRES, node 0)`), exactly; any other step
  its own, so a step on one node is at least what that node was allocated. Per node (`_per_host`): the first
  node's GPUs from a batch or interactive step, each other node at least its one-node steps', the rest split
  evenly over the nodes no step accounts for. Where the steps say nothing (no such step, or figures that do not
  add up), the dataset's telemetry may: the import reads its processes (`gpu_processes`, through the store's
  reader) for the job's JobID / JobIDRaw on the job's nodes in the job's window, and a node's share is at least
  the GPUs its processes held there (a process can only use a GPU allocated to it), by the same rule as a
  one-node step's. Still unsaid (no telemetry yet, figures that contradict the job, a MIG job: its slices are
  not whole GPUs), the GPUs are split evenly over all the job's nodes, and the import says for how many jobs.
  The telemetry is read at import time, so import the allocations after the telemetry of their window.
- `sacct --json` (Slurm's data_parser plugin, v0.0.43 to v0.0.46: src/plugins/data_parser/*/parsers.c) prints
  {"jobs": [...]}: per job job_id (JobIDRaw), array {job_id, task_id {set, number}}, het {job_id, job_offset},
  user, account, partition, state {current: [...]}, time {start, end} (UNIX seconds, or {set, number}; 0
  while unknown), nodes (a host list), tres {allocated: [{type, name, count}]} and steps [{step {id, name},
  nodes {range, list}, tres {allocated}}]. It is read into the same fields as the text (times in UTC: --tz
  does not matter), through the same rules.
"""

from __future__ import annotations

import json
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
_REQUIRED = ("JobID", "State", "Start", "End", "NodeList", "AllocTRES")
# When gpuaudit runs sacct itself it asks for times with their offset: no --tz guesswork.
_TIME_FORMAT_ENV = "%Y-%m-%dT%H:%M:%S%z"
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
    even_split: int = 0  # multi-node jobs whose steps do not say how their GPUs were spread (split evenly)
    unsaid: list[Unsaid] = field(default_factory=list)  # those jobs, for the telemetry to say (_split_by_held)

    def warnings(self) -> list[str]:
        if not self.even_split:
            return []
        n = self.even_split
        return [f"{n} multi-node job{'s' if n > 1 else ''} (e.g. {self.examples[_EVEN_SPLIT]}): GPUs split evenly "
                "over the nodes where neither their steps nor the dataset's processes say how they were spread "
                "(import sacct --json, or the text with its step rows, or import after the telemetry)"]


@dataclass
class Unsaid:
    """A multi-node job split evenly because its steps do not say how: what the telemetry needs to say it."""

    job: str
    ids: tuple[str, ...]  # JobID and JobIDRaw: what the processes' job id may be
    rows: list[int]  # its rows in SlurmImport.rows, one per host
    hosts: list[str]
    start: datetime
    end: datetime
    total: float
    steps: list[dict[str, str]]


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
    """Allocation rows (one per job per host) from `sacct --parsable2` output, or `sacct --json` output (told
    by its first character). Malformed input (a line with the wrong number of fields, an unknown time format, a
    bad AllocTRES or host list) raises GpuauditError naming the line and job: nothing is imported. Jobs without
    GPUs, pending jobs and jobs that end before they start are left out and counted."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    if text.lstrip().startswith("{"):
        return _parse_records(_json_records(text), tz, now)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise GpuauditError("the sacct output is empty (no header line)")
    header = [h.strip() for h in lines[0].split("|")]
    trailing = bool(header) and header[-1] == ""  # --parsable: a '|' at the end of every line
    if trailing:
        header = header[:-1]
    index = {h.lower(): i for i, h in enumerate(header)}
    missing = [f for f in _REQUIRED if f.lower() not in index]
    if missing:
        raise GpuauditError(f"the sacct output's first line is not a header with {', '.join(missing)}: run sacct "
                            f"--parsable2 --format={','.join(FIELDS)} (without --noheader)")
    records = []
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if trailing and cells and cells[-1] == "":
            cells = cells[:-1]
        job_text = cells[index["jobid"]].strip() if len(cells) > index["jobid"] else line[:40]
        if len(cells) != len(header):
            raise GpuauditError(f"sacct line {number} (job {job_text}): {len(cells)} fields, the header has "
                                f"{len(header)} (a '|' inside a value? nothing was imported)")
        records.append((f"sacct line {number}", {h: cells[i].strip() for h, i in index.items()}))
    return _parse_records(records, tz, now)


def _parse_records(records: list[tuple[str, dict[str, str]]], tz: tzinfo | None, now: datetime) -> SlurmImport:
    """Job and step records (sacct's fields, lower-case names) -> rows: steps only tell how a job's GPUs were
    spread over its nodes."""
    steps: dict[str, list[dict[str, str]]] = {}
    for _where, row in records:
        job, dot, _step = row["jobid"].partition(".")
        if dot:
            steps.setdefault(job, []).append(row)
    out = SlurmImport()
    for where, row in records:
        if "." not in row["jobid"]:
            _job_row(row, where, tz, now, out, steps.get(row["jobid"], []))
    return out


def _skip(out: SlurmImport, reason: str, job: str) -> None:
    out.skipped[reason] += 1
    out.examples.setdefault(reason, job)


def _job_row(row: dict[str, str], where: str, tz: tzinfo | None, now: datetime, out: SlurmImport,
             steps: list[dict[str, str]]) -> None:
    job = row["jobid"]
    state = row["state"].split(" ")[0].rstrip("+").upper() or "UNKNOWN"
    if "[" in job or state == "PENDING" or row["start"].lower() in _NOT_STARTED \
            or row["nodelist"].lower() in _NO_NODES:
        _skip(out, "pending (no allocation yet)", job)
        return
    if not _JOB_ID.fullmatch(job):
        raise GpuauditError(f"{where}: bad JobID {job!r}")
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
    shares, said = _per_host(hosts, gpus.gpus, steps)
    if not said:
        out.even_split += 1
        out.examples.setdefault(_EVEN_SPLIT, job)
        if gpus.mig_profile is None:
            ids = tuple(dict.fromkeys(i for i in (job, raw) if i))
            out.unsaid.append(Unsaid(job, ids, list(range(len(out.rows), len(out.rows) + len(hosts))), hosts, start,
                                     end, gpus.gpus, steps))
    for host in hosts:
        out.rows.append({
            "job_id": job, "job_id_raw": raw, "user": row.get("user") or None,
            "account": row.get("account") or None, "partition": row.get("partition") or None,
            "namespace": None, "host": host, "gpus": shares[host], "gpu_type": gpus.gpu_type,
            "gpu_model": gpus.model, "mig_profile": gpus.mig_profile, "start_ts": start, "end_ts": end,
            "state": "RUNNING" if running else state, "source": SOURCE,
        })


_EPS = 1e-9
_EVEN_SPLIT = "split evenly"  # the examples' key of a multi-node job whose steps do not say how


def _per_host(hosts: list[str], total: float, steps: list[dict[str, str]],
             held: dict[str, int] | None = None) -> tuple[dict[str, float], bool]:
    """(GPUs per host, whether the steps, or `held`, said how) for a job of `total` GPU equivalents on `hosts`
    (see the module doc). `held`: per host, the GPUs the job's processes held there. A one-node job: all of
    them there."""
    if len(hosts) == 1:
        return {hosts[0]: total}, True
    exact: dict[str, float] = {}
    least: dict[str, float] = {h: float(n) for h, n in (held or {}).items() if h in hosts and n > 0}
    for step in steps:
        try:
            got = parse_tres(step.get("alloctres", ""), step["jobid"])
            on = hostlist.expand(step.get("nodelist", ""))
        except GpuauditError:
            continue  # a step is only a hint: an unreadable one says nothing
        if got is None:
            continue
        kind = step["jobid"].rpartition(".")[2]
        if kind in ("batch", "interactive"):
            exact[hosts[0]] = got.gpus  # the job's GRES on its first node, whichever node the step ran on
        elif kind != "extern" and len(on) == 1 and on[0] in hosts:
            least[on[0]] = max(least.get(on[0], 0.0), got.gpus)
    rest = total - sum(exact.values())
    fixed = dict(exact)
    while True:  # the most even split the steps allow: a node's share never below its own steps'
        free = [h for h in hosts if h not in fixed]
        share = (rest - sum(v for h, v in fixed.items() if h not in exact)) / len(free) if free else 0.0
        over = [h for h in free if least.get(h, 0.0) > share + _EPS]
        if not over:
            break
        fixed.update({h: least[h] for h in over})
    if share < -_EPS or any(least.get(h, 0.0) > fixed.get(h, share) + _EPS for h in hosts) or \
            (not free and abs(sum(fixed.values()) - total) > _EPS):
        return {h: total / len(hosts) for h in hosts}, False  # the steps contradict the job: they say nothing
    shares = {h: fixed.get(h, share) for h in hosts}
    # Said: at most one node's share is left to the even split (the rest follows from the total).
    return shares, len(free) <= 1


def _split_by_held(out: SlurmImport, held: dict[str, dict[str, dict[str, tuple[datetime, datetime]]]]) -> None:
    """Re-split the evenly split jobs of `out` where the telemetry says how: `held` is per job id, per host, per
    GPU the first and last time a process of that job id held it."""
    still = []
    for u in out.unsaid:
        seen: dict[str, int] = {}
        for i in u.ids:
            for host, gpus in held.get(i, {}).items():
                n = sum(1 for t0, t1 in gpus.values() if t0 <= u.end and t1 >= u.start)
                seen[host] = max(seen.get(host, 0), n)
        shares, said = _per_host(u.hosts, u.total, u.steps, seen) if seen else ({}, False)
        if not said:
            still.append(u)
            continue
        for k in u.rows:
            out.rows[k]["gpus"] = shares[out.rows[k]["host"]]
        out.even_split -= 1
    out.unsaid = still
    out.examples.pop(_EVEN_SPLIT, None)
    if out.even_split:
        out.examples[_EVEN_SPLIT] = still[0].job if still else "?"


def held_gpus(root: Any, unsaid: list[Unsaid]) -> dict[str, dict[str, dict[str, tuple[datetime, datetime]]]]:
    """Per job id of `unsaid`, per host, per GPU: the first and last process row of that job id (the dataset's
    processes, read through the store); empty when the dataset has none."""
    from pathlib import Path

    from gpuaudit.store import local_root, open_dataset

    if not unsaid or not (Path(local_root(root)) / schema.PROCESSES).is_dir():
        return {}
    ids = sorted({i for u in unsaid for i in u.ids})
    with open_dataset(root) as ds:
        rows = ds.fetchall("SELECT job_id, host, gpu_uuid, min(ts), max(ts) FROM processes "
                           "WHERE list_contains(?, job_id) GROUP BY ALL", [ids])
    out: dict[str, dict[str, dict[str, tuple[datetime, datetime]]]] = {}
    for job, host, gpu, t0, t1 in rows:
        out.setdefault(job, {}).setdefault(host, {})[gpu] = (t0, t1)
    return out


def _json_records(text: str) -> list[tuple[str, dict[str, str]]]:
    """`sacct --json` output as job and step records in the text's fields (see the module doc)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GpuauditError(f"the sacct --json output is not JSON: {e.msg} at line {e.lineno}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise GpuauditError("the sacct --json output has no \"jobs\" list (is it sacct --json output?)")
    out: list[tuple[str, dict[str, str]]] = []
    for i, job in enumerate(jobs):
        where = f"sacct --json jobs[{i}]"
        if not isinstance(job, dict) or not isinstance(job.get("job_id"), int):
            raise GpuauditError(f"{where}: not a job with a numeric job_id")
        raw = str(job["job_id"])
        ident = _json_job_id(job, raw)
        t = _dict(job.get("time"))
        out.append((where, {
            "jobid": ident, "jobidraw": raw, "user": _text(job.get("user")), "account": _text(job.get("account")),
            "partition": _text(job.get("partition")), "state": _state(job.get("state"), where),
            "start": _when(t.get("start"), where, "time.start"), "end": _when(t.get("end"), where, "time.end"),
            "nodelist": _text(job.get("nodes")), "alloctres": _tres(_dig(job, "tres", "allocated"), where)}))
        for k, step in enumerate(job.get("steps") or []):
            if not isinstance(step, dict):
                continue
            kind = str(_dig(step, "step", "id") or "").rpartition(".")[2] or str(_dig(step, "step", "name") or k)
            nodes = _dig(step, "nodes", "list")
            out.append((f"{where}.steps[{k}]", {
                "jobid": f"{ident}.{kind}",
                "nodelist": ",".join(map(str, nodes)) if isinstance(nodes, list) else _text(_dig(step, "nodes",
                                                                                                   "range")),
                "alloctres": _tres(_dig(step, "tres", "allocated"), where)}))
    return out


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _dig(d: Any, *path: str) -> Any:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None
    return d


def _number(v: Any) -> int | None:
    """data_parser's numbers: plain, or {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(v, dict):
        return int(v["number"]) if v.get("set") and isinstance(v.get("number"), int) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _text(v: Any) -> str:
    return v.strip() if isinstance(v, str) else ""


def _json_job_id(job: dict[str, Any], raw: str) -> str:
    """JobID as sacct's text prints it: 123, 123_4 (array task), 123_[5-9] (pending array), 123+0 (het)."""
    array, het = _dict(job.get("array")), _dict(job.get("het"))
    task, het_job, offset = _number(array.get("task_id")), _number(het.get("job_id")), _number(het.get("job_offset"))
    if _number(array.get("job_id")):
        if task is not None:
            return f"{_number(array.get('job_id'))}_{task}"
        if _text(array.get("task")):
            return f"{_number(array.get('job_id'))}_[{_text(array.get('task'))}]"
    if het_job and offset is not None:
        return f"{het_job}+{offset}"
    return raw


def _state(v: Any, where: str) -> str:
    current = v.get("current") if isinstance(v, dict) else v
    if isinstance(current, list) and current and all(isinstance(c, str) for c in current):
        return current[0]  # the base state first, then its flags
    if isinstance(current, str):
        return current
    raise GpuauditError(f"{where}: no state.current")


def _when(v: Any, where: str, what: str) -> str:
    """A UNIX time as an ISO time with its offset (0 or unset: Unknown)."""
    n = _number(v)
    if v is not None and n is None and not isinstance(v, dict):
        raise GpuauditError(f"{where}: bad {what} {v!r} (expected UNIX seconds)")
    return datetime.fromtimestamp(n, UTC).isoformat() if n else "Unknown"


def _tres(v: Any, where: str) -> str:
    """tres.allocated [{type, name, count}] as AllocTRES text (gres/gpu:a100=2,...); other TRES left out."""
    if v is None:
        return ""
    if not isinstance(v, list):
        raise GpuauditError(f"{where}: tres.allocated is not a list")
    parts = []
    for t in v:
        if isinstance(t, dict) and t.get("type") == "gres" and isinstance(t.get("name"), str):
            count = t.get("count")
            if not isinstance(count, int) or count < 0:
                raise GpuauditError(f"{where}: bad TRES count {count!r} for gres/{t['name']}")
            parts.append(f"gres/{t['name']}={count}")
    return ",".join(parts)


def _sacct_command(start: datetime, end: datetime) -> list[str]:
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
    cmd = [exe, *_sacct_command(start, end)[1:]]
    env = {**os.environ, "SLURM_TIME_FORMAT": _TIME_FORMAT_ENV}
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
    if parsed.unsaid:
        _split_by_held(parsed, held_gpus(root, parsed.unsaid))
    examples = {k: v for k, v in parsed.examples.items() if k != _EVEN_SPLIT}
    return store_rows(root, parsed.rows, SOURCE, parsed.jobs, parsed.skipped, examples,
                      warnings=parsed.warnings())
