"""`gpuaudit selftest`: prove on this GPU that what the agent records is right.

A calibrated load (kernel.py, in a process of its own: load.py; k blocks, one per SM, busy d of every period)
makes the GPU's SM activity (k / SMs) x d and its duty cycle d by construction, while the agent's own sampler
reads NVML at 1 s.
Each step of the schedule (k = all SMs, half, one; d = 1, 0.5, 0.25) compares what the sampler measured with
what the load made, and checks that the agent attributed the load's process (pid, user, cgroup). The run
passes when every step does.

Before the load starts, the GPU must be idle (a foreign load breaks the calibration: refused unless
--force); a MIG GPU runs the load inside one instance (--mig-instance) or is refused, naming its instances;
without GPM only the duty-cycle checks run, and the report says so.

Everything the run talks to comes in through `Environment` (the NVML seam, the load's process, the clock),
so `--simulate` runs these same steps against the fake NVML and a simulated load process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gpuaudit.agent.nvml import Nvml
from gpuaudit.agent.procinfo import Attributor, ProcAttributor, parse_cgroup
from gpuaudit.agent.sampler import Sampler, Unit
from gpuaudit.errors import GpuauditError

SM_TOLERANCE = 0.05  # absolute, on the 0-1 fraction (the issue's bound)
DUTY_TOLERANCE = 0.10  # absolute: NVML's utilization samples cover 1/6 s to 1 s windows, coarser than GPM
_DUTIES = (1.0, 0.5, 0.25)
_BUSY_SM = 0.02  # an idle GPU reads at most this SM activity / duty cycle before the load starts
_BUSY_DUTY = 0.05
_HOLD_DUTY = 0.5


class Interrupted(GpuauditError):
    exit_code = 130


@dataclass(frozen=True)
class Step:
    k: int  # blocks, one per SM
    d: float  # busy fraction of each period


def schedule(sm_count: int) -> list[Step]:
    """k = all SMs, half, one (each once: a 1-SM GPU has one k) x d = 1, 0.5, 0.25."""
    ks: list[int] = []
    for k in (sm_count, sm_count // 2, 1):
        if k >= 1 and k not in ks:
            ks.append(k)
    return [Step(k, d) for k in ks for d in _DUTIES]


def expected_sm_active(step: Step, sm_count: int) -> float:
    return step.k / sm_count * step.d


@dataclass
class SelftestConfig:
    gpu: int = 0  # NVML index
    mig_instance: int | None = None  # GPU instance id on a MIG GPU
    force: bool = False
    backend: str = "auto"  # the load's: auto, driver, torch
    interval_s: float = 1.0  # the agent's sampler interval
    settle_s: float = 2.0  # discarded at the start of each step (the driver's sample windows lag)
    measure_s: float = 4.0  # measured per step
    idle_s: float = 2.0  # the idle probe and the idle baseline
    period_s: float = 0.1  # the load's period


class Load(Protocol):
    """The load's process as the selftest drives it (load.LoadProcess or its simulation)."""

    info: dict[str, Any]

    def run(self, k: int, d: float) -> None: ...
    def idle(self) -> None: ...
    def close(self) -> None: ...
    def kill(self) -> None: ...


@dataclass
class Target:
    unit: Unit
    cuda_device: str  # what CUDA_VISIBLE_DEVICES names: the GPU's or the MIG instance's UUID
    description: str


@dataclass
class Environment:
    nvml: Nvml
    start_load: Callable[[Target, SelftestConfig], Load]
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    attributor: Attributor = field(default_factory=ProcAttributor)
    host: str = "selftest"
    simulated: bool = False


@dataclass
class StepResult:
    k: int
    d: float
    expected_sm_active: float
    measured_sm_active: float | None
    sm_active_ok: bool | None  # None: not measured (no GPM)
    expected_duty_cycle: float
    measured_duty_cycle: float | None
    duty_cycle_ok: bool | None  # None: not measured (MIG)
    expected_sm_occupancy: float | None  # one resident warp per busy SM: reported, not judged
    measured_sm_occupancy: float | None
    power_w: float | None
    energy_j: float | None
    energy_delta_j: float | None  # above the idle baseline
    seconds: float
    intervals: int
    process_found: bool
    process: dict[str, Any] | None  # the agent's row for the load's pid
    attribution_ok: bool
    passed: bool
    notes: list[str] = field(default_factory=list)


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    """Time-weighted mean of `key` over interval rows; None when any row lacks it."""
    if not rows or any(r.get(key) is None for r in rows):
        return None
    total = sum(r["interval_s"] for r in rows)
    return sum(r[key] * r["interval_s"] for r in rows) / total


def expected_attribution(load_info: dict[str, Any]) -> dict[str, Any]:
    """What the agent should record for the load's process, from what the process says about itself."""
    cg = parse_cgroup(load_info.get("cgroup") or "")
    return {"pid": load_info.get("pid"), "user": load_info.get("user"), "job_id": cg.job_id,
            "container": cg.container, "k8s_pod_uid": cg.pod_uid}


def check_attribution(expected: dict[str, Any], procs: list[dict[str, Any]]) -> tuple[bool, bool, dict[str, Any] | None,
                                                                                         list[str]]:
    """(found, ok, the agent's row, notes): the load's pid is listed, with its user, job and container."""
    pid = expected["pid"]
    mine = [p for p in procs if p.get("pid") == pid]
    if not mine:
        listed = sorted({p["pid"] for p in procs if p.get("pid") is not None})
        return False, False, None, [
            f"the load's pid {pid} was not among the processes NVML listed on this GPU "
            f"({', '.join(map(str, listed)) or 'none'}): a PID namespace the driver does not share "
            "(a container without hostPID)?"]
    row = mine[-1]
    notes = []
    for key in ("user", "job_id", "container"):
        if row.get(key) != expected[key]:
            notes.append(f"process {key}: the agent recorded {row.get(key)!r}, the load is {expected[key]!r}")
    if expected["k8s_pod_uid"] and not row.get("k8s_pod"):
        notes.append(f"process k8s_pod: none recorded, the load runs in pod {expected['k8s_pod_uid']}")
    shown = {k: row.get(k) for k in ("pid", "user", "job_id", "k8s_namespace", "k8s_pod", "container", "command")}
    return True, not notes, shown, notes


def compare(step: Step, sm_count: int, rows: list[dict[str, Any]], procs: list[dict[str, Any]],
            expected_proc: dict[str, Any], idle_power_w: float | None, *, gpm: bool,
            warps_per_sm: int | None = None) -> StepResult:
    """One step's verdict from the sampler's rows and process rows of the target unit. `warps_per_sm` (the
    GPU's resident-warp limit) gives the expected SM occupancy: one warp per busy SM."""
    notes: list[str] = []
    exp_sm = expected_sm_active(step, sm_count)
    exp_occ = exp_sm / warps_per_sm if warps_per_sm else None
    sm = _mean(rows, "sm_active")
    duty = _mean(rows, "duty_cycle")
    sm_ok = None if sm is None else abs(sm - exp_sm) <= SM_TOLERANCE
    duty_ok = None if duty is None else abs(duty - step.d) <= DUTY_TOLERANCE
    seconds = sum(r["interval_s"] for r in rows)
    energy = None if not rows or any(r.get("energy_j") is None for r in rows) else sum(r["energy_j"] for r in rows)
    power = energy / seconds if energy is not None and seconds > 0 else _mean(rows, "power_w")
    delta = energy - idle_power_w * seconds if energy is not None and idle_power_w is not None else None
    found, attr_ok, row, attr_notes = check_attribution(expected_proc, procs)
    notes += attr_notes
    if not rows:
        notes.append("no sample of this GPU in the step (it failed the NVML queries: see the log)")
    if sm is None and gpm and rows:
        notes.append("GPM gave no SM activity in this step")
    if sm is not None and sm_ok is False:
        notes.append(f"SM activity {sm:.3f} is {sm - exp_sm:+.3f} from the expected {exp_sm:.3f}")
    if duty is not None and duty_ok is False:
        notes.append(f"duty cycle {duty:.3f} is {duty - step.d:+.3f} from the expected {step.d:.2f}")
    measured = [ok for ok in (sm_ok, duty_ok) if ok is not None]
    passed = bool(rows) and bool(measured) and all(measured) and attr_ok
    return StepResult(
        k=step.k, d=step.d, expected_sm_active=exp_sm, measured_sm_active=sm, sm_active_ok=sm_ok,
        expected_duty_cycle=step.d, measured_duty_cycle=duty, duty_cycle_ok=duty_ok,
        expected_sm_occupancy=exp_occ, measured_sm_occupancy=_mean(rows, "sm_occupancy"), power_w=power,
        energy_j=energy, energy_delta_j=delta, seconds=seconds, intervals=len(rows), process_found=found,
        process=row, attribution_ok=attr_ok, passed=passed, notes=notes)


# --------------------------------------------------------------------------- the run

class _Run:
    """One selftest: discovery, target, checks, load, steps. Holds the sampler and the load for cleanup."""

    def __init__(self, config: SelftestConfig, env: Environment) -> None:
        self.config, self.env = config, env
        self.sampler = Sampler(env.nvml, env.host, env.attributor, clock=env.clock)
        self.load: Load | None = None
        self.notes: list[str] = []

    # --- target --------------------------------------------------------------------------------------
    def target(self) -> Target:
        cfg, nv = self.config, self.env.nvml
        units = self.sampler.discover()
        if not units:
            raise GpuauditError("no NVIDIA GPU found by NVML on this machine: the selftest needs one "
                                "(without a GPU: gpuaudit selftest --simulate)")
        mine = [u for u in units if u.gpu_index == cfg.gpu]
        if not mine:
            indexes = sorted({u.gpu_index for u in units})
            raise GpuauditError(f"no GPU {cfg.gpu} on this machine: --gpu takes one of "
                                f"{', '.join(map(str, indexes))}")
        first = mine[0]
        what = f"GPU {cfg.gpu} ({first.gpu_name}, {first.gpu_uuid})"
        migs = [u for u in mine if u.mig_instance is not None]
        if not migs:
            if cfg.mig_instance is not None:
                raise GpuauditError(f"{what} has MIG disabled: drop --mig-instance")
            return Target(first, first.gpu_uuid, what)
        listed = ", ".join(f"gi{u.mig_instance} ({u.mig_profile or '?'})" for u in migs)
        if cfg.mig_instance is None:
            raise GpuauditError(f"{what} has MIG enabled, with instances {listed}: run the selftest inside one "
                                "(--mig-instance ID) or disable MIG (nvidia-smi -i "
                                f"{cfg.gpu} -mig 0)")
        unit = next((u for u in migs if u.mig_instance == cfg.mig_instance), None)
        if unit is None:
            raise GpuauditError(f"{what} has no MIG instance gi{cfg.mig_instance}; it has {listed}")
        mig_uuid = nv.mig_uuid(unit.handle)
        if not mig_uuid or not str(mig_uuid).startswith("MIG-"):
            raise GpuauditError(f"{what}: NVML gives no MIG UUID for gi{cfg.mig_instance} (driver older than R470?), "
                                "so the load cannot be placed inside it")
        self.notes.append(f"MIG instance gi{unit.mig_instance} ({unit.mig_profile}): SM activity is the instance's; "
                          "NVML gives no duty cycle for a MIG instance, so only the SM-activity checks run")
        return Target(unit, str(mig_uuid), f"{what} MIG instance gi{unit.mig_instance} ({unit.mig_profile})")

    @staticmethod
    def _mine(t: Target, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if r["gpu_uuid"] == t.unit.gpu_uuid and r["mig_instance"] == t.unit.mig_instance]

    def collect(self, t: Target, seconds: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The target's rows of the sampler's next intervals over `seconds` (at least one interval)."""
        env, interval = self.env, self.config.interval_s
        rows: list[dict[str, Any]] = []
        procs: list[dict[str, Any]] = []
        next_t = env.clock()
        for _ in range(max(round(seconds / interval), 1)):
            next_t += interval
            env.sleep(max(next_t - env.clock(), 0.0))
            r, p = self.sampler.sample(datetime.now(UTC))
            rows += self._mine(t, r)
            procs += self._mine(t, p)
        return rows, procs

    def restart_interval(self) -> None:
        """Start a fresh interval now: what ran before (a transition) is not in the next rows."""
        self.sampler.sample(datetime.now(UTC))

    def busy_check(self, t: Target) -> dict[str, Any]:
        """The target before the load starts: foreign processes or activity refuse the run (unless --force)."""
        self.restart_interval()
        rows, procs = self.collect(t, self.config.idle_s)
        sm, duty = _mean(rows, "sm_active"), _mean(rows, "duty_cycle")
        pids = sorted({p["pid"] for p in procs if p.get("pid") is not None})
        found = {"pids": pids, "sm_active": sm, "duty_cycle": duty}
        busy = []
        if pids:
            who = ", ".join(f"{p['pid']} ({p.get('user') or '?'})" for p in {p["pid"]: p for p in procs}.values())
            busy.append(f"processes {who}")
        if sm is not None and sm > _BUSY_SM:
            busy.append(f"SM activity {sm:.3f}")
        if duty is not None and duty > _BUSY_DUTY:
            busy.append(f"duty cycle {duty:.2f}")
        if busy and not self.config.force:
            raise GpuauditError(f"{t.description} is busy with other work ({'; '.join(busy)}): a foreign load breaks "
                                "the calibration; stop it, pick another GPU with --gpu, or pass --force")
        if busy:
            self.notes.append(f"--force: the GPU was busy before the load started ({'; '.join(busy)}); "
                              "its work adds to every measured figure")
        return found

    def start(self, t: Target) -> Load:
        self.load = self.env.start_load(t, self.config)
        return self.load

    def stop(self, *, kill: bool = False) -> None:
        if self.load is not None:
            if kill:
                self.load.kill()
            else:
                self.load.close()
            self.load = None
        self.sampler.close()
        self.env.nvml.shutdown()


def _device(t: Target, run: _Run, load: Load | None) -> dict[str, Any]:
    u = t.unit
    return {"index": u.gpu_index, "uuid": u.gpu_uuid, "name": u.gpu_name, "mig_instance": u.mig_instance,
            "mig_profile": u.mig_profile, "driver_version": run.sampler.driver_version,
            "gpm": u.gpm is not None, "sm_count": load.info.get("sm_count") if load else None,
            "compute_capability": load.info.get("compute_capability") if load else None}


def _load_info(load: Load, config: SelftestConfig) -> dict[str, Any]:
    keys = ("backend", "pid", "user", "blocks_per_sm", "threads_per_block", "shared_memory_per_block_bytes",
            "shared_memory_per_sm_bytes", "cuda_uuid")
    return {**{k: load.info.get(k) for k in keys}, "period_s": config.period_s}


def run(config: SelftestConfig, env: Environment, *,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The whole selftest; returns the report (see `render`). Errors before the steps raise GpuauditError;
    Ctrl-C stops the load at once and raises Interrupted."""
    say = progress or (lambda msg: None)
    r = _Run(config, env)
    try:
        t = r.target()
        gpm = t.unit.gpm is not None
        if not gpm:
            r.notes.append(f"GPM is not supported on {t.description}: SM activity is not measured, so only the "
                           "duty-cycle checks run (they cannot tell one busy SM from all of them)")
        say(f"checking that {t.description} is idle ...")
        before = r.busy_check(t)
        say("starting the calibrated load ...")
        load = r.start(t)
        sm_count = int(load.info["sm_count"])
        threads = load.info.get("max_threads_per_sm")
        warps = int(threads) // 32 if threads else None
        expected_proc = expected_attribution(load.info)
        r.restart_interval()
        idle_rows, _ = r.collect(t, config.idle_s)
        idle: dict[str, Any] = {"power_w": _mean(idle_rows, "power_w"), "sm_active": _mean(idle_rows, "sm_active"),
                "duty_cycle": _mean(idle_rows, "duty_cycle"), "before_load": before}
        steps = []
        plan = schedule(sm_count)
        for i, step in enumerate(plan, 1):
            say(f"step {i}/{len(plan)}: k={step.k} of {sm_count} SMs, busy {step.d:g} of each period ...")
            load.run(step.k, step.d)
            r.restart_interval()
            r.collect(t, config.settle_s)  # discarded: the driver's windows still hold the previous step
            rows, procs = r.collect(t, config.measure_s)
            steps.append(compare(step, sm_count, rows, procs, expected_proc, idle["power_w"], gpm=gpm,
                                 warps_per_sm=warps))
        load.idle()
        report = {
            "simulated": env.simulated, "host": env.host, "device": _device(t, r, load),
            "load": _load_info(load, config), "tolerances": {"sm_active": SM_TOLERANCE, "duty_cycle": DUTY_TOLERANCE},
            "sampler_interval_s": config.interval_s, "forced": config.force, "idle": idle,
            "expected_process": expected_proc, "steps": [asdict(s) for s in steps],
            "passed_steps": sum(s.passed for s in steps), "total_steps": len(steps),
            "passed": bool(steps) and all(s.passed for s in steps), "notes": r.notes,
        }
        r.stop()
        return report
    except KeyboardInterrupt:
        pid = r.load.info.get("pid") if r.load is not None else None
        r.stop(kill=True)
        raise Interrupted("interrupted: the calibrated load was stopped" + (f" (pid {pid})" if pid else "")) from None
    finally:
        r.stop(kill=True)


def hold(config: SelftestConfig, env: Environment, seconds: float, *,
         on_running: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the load at k = all SMs, d = 0.5 for `seconds` without measuring (for an `agent run` to measure:
    benchmarks/gpu_check.sh). The same target and busy checks as the selftest."""
    r = _Run(config, env)
    try:
        t = r.target()
        r.busy_check(t)
        r.sampler.close()
        load = r.start(t)
        sm_count = int(load.info["sm_count"])
        k = sm_count
        info = {"event": "running", "simulated": env.simulated, "device": _device(t, r, load),
                "load": _load_info(load, config), "k": k, "d": _HOLD_DUTY,
                "expected_sm_active": expected_sm_active(Step(k, _HOLD_DUTY), sm_count),
                "expected_duty_cycle": _HOLD_DUTY, "seconds": seconds,
                "expected_process": expected_attribution(load.info),
                "started": datetime.now(UTC).isoformat()}
        load.run(k, _HOLD_DUTY)
        if on_running:
            on_running(info)
        end = env.clock() + seconds
        while (left := end - env.clock()) > 0:
            env.sleep(min(left, 1.0))
        load.idle()
        r.stop()
        return {**info, "event": "done", "ended": datetime.now(UTC).isoformat()}
    except KeyboardInterrupt:
        r.stop(kill=True)
        raise Interrupted("interrupted: the calibrated load was stopped") from None
    finally:
        r.stop(kill=True)


# --------------------------------------------------------------------------- report

def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _ok(v: bool | None) -> str:
    return "n/a" if v is None else ("ok" if v else "FAIL")


def render(report: dict[str, Any]) -> str:
    from gpuaudit.util.textsafe import printable

    dev, load = report["device"], report["load"]
    tol = report["tolerances"]
    lines = [
        f"gpuaudit selftest{' (simulated)' if report['simulated'] else ''}: GPU {dev['index']} {dev['name']} "
        f"{dev['uuid']}" + (f" MIG gi{dev['mig_instance']} {dev['mig_profile']}" if dev["mig_instance"] is not None
                            else ""),
        f"  driver {dev['driver_version'] or '?'}, {dev['sm_count']} SMs, SM activity via "
        f"{'GPM' if dev['gpm'] else 'nothing (no GPM)'}; sampler every {report['sampler_interval_s']:g} s",
        f"  load: {load['backend']} backend, pid {load['pid']} ({load['user']}), blocks of "
        f"{load['threads_per_block']} threads, {load['blocks_per_sm']} per SM"
        + (f" (each takes {smem} B of shared memory)" if (smem := load.get('shared_memory_per_block_bytes')) else "")
        + f", period {load['period_s']:g} s",
        f"  idle: power {_f(report['idle']['power_w'], '.1f')} W, SM activity {_f(report['idle']['sm_active'])}, "
        f"duty cycle {_f(report['idle']['duty_cycle'], '.2f')}",
        "",
        f"  {'k':>4} {'d':>5}  {'SM expected':>11} {'measured':>8} {'':>4}  {'duty exp':>8} {'measured':>8} {'':>4}"
        f"  {'power W':>8} {'energy J':>9} {'Δ idle J':>9}  {'process':>7}  result",
    ]
    for s in report["steps"]:
        lines.append(
            f"  {s['k']:>4} {s['d']:>5.2f}  {s['expected_sm_active']:>11.3f} {_f(s['measured_sm_active']):>8} "
            f"{_ok(s['sm_active_ok']):>4}  {s['expected_duty_cycle']:>8.2f} {_f(s['measured_duty_cycle'], '.2f'):>8} "
            f"{_ok(s['duty_cycle_ok']):>4}  {_f(s['power_w'], '.1f'):>8} {_f(s['energy_j'], '.0f'):>9} "
            f"{_f(s['energy_delta_j'], '+.0f'):>9}  {_ok(s['attribution_ok']):>7}  {'PASS' if s['passed'] else 'FAIL'}")
        lines += [f"        {n}" for n in s["notes"]]
    lines.append("")
    lines += [f"  note: {n}" for n in report["notes"]]
    verdict = "PASSED" if report["passed"] else "FAILED"
    lines.append(f"{verdict}: {report['passed_steps']}/{report['total_steps']} steps within tolerance (SM activity "
                 f"±{tol['sm_active']:g}, duty cycle ±{tol['duty_cycle']:g}, the load's process attributed)")
    return "\n".join(printable(line) for line in lines)


# --------------------------------------------------------------------------- environments

def real_environment(host: str) -> Environment:
    """The real GPU: NVML through the seam, the load through libcuda in its own process."""
    from gpuaudit.selftest.load import LoadProcess

    def start(t: Target, c: SelftestConfig) -> Load:
        return LoadProcess(c.backend, cuda_device=t.cuda_device, period_s=c.period_s)

    return Environment(nvml=Nvml(), start_load=start, host=host)
