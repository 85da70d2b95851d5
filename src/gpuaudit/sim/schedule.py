"""The job schedule of the load model (loadmodel.py): who holds which GPU when. One schedule per (scenario,
fleet size, seed, start), a pure function of the seed: per-lane random streams draw it.

A fleet of hosts with 8 GPUs each. Each host's GPUs are split into *lanes* (1, 2, 4 or 8 GPUs); a lane runs
one job at a time (a Slurm allocation or a Kubernetes pod per GPU), so multi-GPU jobs share a job id across
their GPUs. Inside a job, time alternates between compute phases and "debug" phases (GPU held, memory
allocated, SM ~ 0); every job starts with a setup phase (data loading, compilation).

numpy is imported only inside the methods, as in loadmodel.py.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpuaudit.errors import GpuauditError
from gpuaudit.sim.workload import (
    DAY_S,
    DUTY_FILL,
    GPUS_PER_HOST,
    INTERACTIVE_CMDS,
    WARMUP_S,
    WorkloadScenario,
    gpu_uuid,
    host_name,
    part,
)

if TYPE_CHECKING:
    import numpy as np


@dataclass
class _Jobs:
    """Per-job arrays (numpy), lane-major and sorted by start within a lane."""

    lane: Any
    start: Any  # seconds since the model's start
    end: Any
    setup_end: Any
    debug_frac: Any
    sm: Any  # SM activity in compute phases
    occ_ratio: Any
    tensor_ratio: Any
    dram_ratio: Any
    duty_fill: Any  # duty cycle during compute = sm + (1 - sm) * duty_fill
    mem_mib: Any
    nproc: Any
    pid: Any
    user: Any  # index into LoadModel.users, -1 for none
    command: Any  # index into LoadModel.commands
    job_id: Any  # Slurm id (int), -1 for Kubernetes pods
    pod: Any  # index into LoadModel.pods, -1 for none
    namespace: Any  # index into LoadModel.namespaces, -1 for none


_FIRST = ("ana", "ben", "chen", "dara", "eli", "fatima", "gus", "hiro", "ines", "jon", "kemi", "lars", "mei",
          "nadia", "omar", "priya", "quinn", "rosa", "sven", "tariq", "uma", "vik", "wen", "yusuf", "zoe")
_LAST = ("k", "m", "s", "t", "l", "r", "b", "p", "d", "w")


def _user_name(i: int) -> str:
    """Unix-style user names: ana.k, ben.m, ... (unique for the first 250)."""
    return f"{_FIRST[i % len(_FIRST)]}.{_LAST[(i // len(_FIRST)) % len(_LAST)]}" + (f"{i // 250}" if i >= 250 else "")


def _rate_factor(t_abs: float, night: float, weekend: float) -> float:
    """Arrival-rate multiplier for the daily and weekly rhythm (UTC working hours 08-20, Mon-Fri)."""
    day = int(t_abs // DAY_S)
    hour = (t_abs % DAY_S) / 3600
    f = 1.0 if 8 <= hour < 20 else night
    if (day + 3) % 7 >= 5:  # 1970-01-01 was a Thursday: (day + 3) % 7 is 0 on Mondays
        f *= weekend
    return f


class Schedule:
    """The job schedule of one scenario on `n_gpus` GPUs from `start` for `days` days, deterministic in
    `seed`: hosts, lanes, jobs and their phases, the scheduler's allocations, and who holds a GPU when."""

    def __init__(self, scenario: WorkloadScenario, n_gpus: int, seed: int, start: datetime, days: float) -> None:
        import numpy as np

        if n_gpus < 1:
            raise GpuauditError(f"gpus must be at least 1 (got {n_gpus})")
        if days <= 0:
            raise GpuauditError(f"days must be positive (got {days})")
        self.scenario = scenario
        self.n_gpus = n_gpus
        self.seed = int(seed)
        self.start = start.astimezone(UTC)
        self.start_epoch = self.start.timestamp()
        self.days = days
        self.horizon_s = days * DAY_S
        n_hosts = -(-n_gpus // GPUS_PER_HOST)
        self.hosts = [host_name(h) for h in range(n_hosts)]
        self.gpu_host = np.arange(n_gpus) // GPUS_PER_HOST
        self.gpu_index = np.arange(n_gpus) % GPUS_PER_HOST
        self.host_of_gpu = [self.hosts[h] for h in self.gpu_host]
        self.uuids = [gpu_uuid(self.hosts[h], int(i)) for h, i in zip(self.gpu_host, self.gpu_index, strict=True)]
        self.users: list[str] = []
        self.commands: list[str] = []
        self.pods: list[str] = []
        self.namespaces: list[str] = []
        self._pool_offsets: dict[str, tuple[int, int]] = {}
        self._build()

    # --------------------------------------------------------------------------- schedule construction

    def _rng(self, *words: int) -> random.Random:
        return random.Random(hashlib.sha256(repr((self.seed, self.scenario.name, *words)).encode()).digest())

    def _build(self) -> None:
        import numpy as np

        sc = self.scenario
        n_hosts = len(self.hosts)
        # Which sub-scenario runs on each host (mixed fleets split by host, in contiguous blocks).
        if sc.parts:
            names, shares = zip(*sc.parts, strict=True)
            counts = [round(s * n_hosts) for s in shares]
            counts[0] += n_hosts - sum(counts)
            host_kind = [part(n) for n, c in zip(names, counts, strict=True) for _ in range(max(c, 0))]
            host_kind = host_kind[:n_hosts]
        else:
            host_kind = [sc] * n_hosts
        self.host_kind = host_kind
        # The boards: one model per host (its scenario's); `models` lists each once, `gpu_model` indexes it.
        self.models = list(dict.fromkeys(k.gpu for k in host_kind))
        self.gpu_model = np.array([self.models.index(host_kind[h].gpu) for h in self.gpu_host.tolist()],
                                  dtype=np.int64)
        self.gpu_names = [self.models[m].name for m in self.gpu_model.tolist()]

        lane_of_gpu = np.zeros(self.n_gpus, dtype=np.int64)
        pos_in_lane = np.zeros(self.n_gpus, dtype=np.int64)
        lanes: list[tuple[WorkloadScenario, int, list[int]]] = []  # (kind, host, gpus)
        for h in range(n_hosts):
            kind = host_kind[h]
            gpus = [g for g in range(h * GPUS_PER_HOST, min((h + 1) * GPUS_PER_HOST, self.n_gpus))]
            if kind.serving is not None:
                for g in gpus:  # each GPU is its own replica
                    lanes.append((kind, h, [g]))
                continue
            assert kind.batch is not None
            rng = self._rng(1, h)
            widths, probs = zip(*kind.batch.lane_widths, strict=True)
            i = 0
            while i < len(gpus):
                w = rng.choices(widths, probs)[0]
                w = min(w, len(gpus) - i)
                lanes.append((kind, h, gpus[i : i + w]))
                i += w
        for li, (_, _, gpus) in enumerate(lanes):
            for p, g in enumerate(gpus):
                lane_of_gpu[g] = li
                pos_in_lane[g] = p
        self.lane_of_gpu = lane_of_gpu
        self.pos_in_lane = pos_in_lane
        self.n_lanes = len(lanes)

        job_rows: list[dict[str, Any]] = []
        serving_lanes = [(li, h, gpus) for li, (k, h, gpus) in enumerate(lanes) if k.serving is not None]
        if serving_lanes:
            kind = next(k for k, _, _ in lanes if k.serving is not None)
            job_rows += self._serving_jobs(kind, serving_lanes)
        host_weight = self._host_weights(host_kind)
        for li, (kind, h, _gpus) in enumerate(lanes):
            if kind.batch is not None:
                job_rows += self._batch_jobs(kind, li, host_weight[h])
        job_rows.sort(key=lambda r: (r["lane"], r["start"]))
        self._finish_jobs(job_rows)
        self._build_phases()

    def _host_weights(self, host_kind: list[WorkloadScenario]) -> list[float]:
        """Arrival-rate weight per host: with host_skew, a few hosts get most work (normalized to mean 1
        within each sub-scenario so the utilization target does not depend on the fleet size)."""
        weights = [1.0] * len(host_kind)
        groups: dict[str, list[int]] = {}
        for h, k in enumerate(host_kind):
            groups.setdefault(k.name, []).append(h)
        for name, hs in groups.items():
            k = part(name)
            if k.batch is None or k.batch.host_skew <= 0:
                continue
            rng = self._rng(2, hs[0])
            order = list(range(len(hs)))
            rng.shuffle(order)
            # Zipf-like: the r-th busiest host gets 1 / (r + 1) ** skew of the work.
            raw = [1.0 / (r + 1) ** (k.batch.host_skew / 2) for r in order]
            mean = sum(raw) / len(raw)
            for h, w in zip(hs, raw, strict=True):
                weights[h] = w / mean
        return weights

    def _pools(self, kind: WorkloadScenario) -> tuple[int, int]:
        """Register the scenario's users and commands; returns the offsets into the shared pools."""
        assert kind.batch is not None
        u0, c0 = len(self.users), len(self.commands)
        # Distinct people per sub-scenario of a mixed fleet: each takes the next names of the pool.
        self.users += [_user_name(u0 + i) for i in range(kind.batch.users)]
        self.commands += list(kind.batch.commands)
        return u0, c0

    def _batch_jobs(self, kind: WorkloadScenario, lane: int, weight: float) -> list[dict[str, Any]]:
        bp = kind.batch
        assert bp is not None
        if kind.name not in self._pool_offsets:
            self._pool_offsets[kind.name] = self._pools(kind)
        u0, c0 = self._pool_offsets[kind.name]
        rng = self._rng(3, lane)
        rate_max = bp.starts_per_day * weight / DAY_S
        weights = [w for w, _, _ in bp.durations]
        out = []
        t: float = -WARMUP_S
        interactive_cmds = [i for i, c in enumerate(bp.commands) if c in INTERACTIVE_CMDS]
        batch_cmds = [i for i, c in enumerate(bp.commands) if c not in INTERACTIVE_CMDS] or interactive_cmds
        while True:
            # Next arrival once the lane is free: thinning of a Poisson process with a daily rhythm.
            while True:
                t += rng.expovariate(rate_max)
                if rng.random() < _rate_factor(self.start_epoch + t, bp.night_factor, bp.weekend_factor):
                    break
            if t >= self.horizon_s:
                break
            _, median, sigma = rng.choices(bp.durations, weights)[0]
            d = min(rng.lognormvariate(math.log(median), sigma), bp.max_duration_s)
            d = max(d, 120.0)
            # Multi-day jobs are batch runs; interactive sessions last minutes to hours.
            interactive = median < DAY_S and rng.random() < bp.interactive_share
            lo, hi = bp.debug_interactive if interactive else bp.debug_batch
            slo, shi = bp.sm_interactive if interactive else bp.sm_batch
            setup = min(rng.uniform(*bp.setup_s), 0.5 * d)
            if t + d > 0:
                out.append({
                    "lane": lane, "start": t, "end": t + d, "setup_end": t + setup,
                    "debug_frac": rng.uniform(lo, hi), "sm": rng.uniform(slo, shi),
                    "occ_ratio": rng.uniform(0.45, 0.8), "tensor_ratio": rng.uniform(0.25, 0.65),
                    "dram_ratio": rng.uniform(0.2, 0.55), "duty_fill": rng.uniform(*DUTY_FILL),
                    "mem_mib": int(rng.uniform(*bp.mem_gib) * 1024),
                    "nproc": 2 if rng.random() < bp.two_process_share else 1,
                    "pid": rng.randrange(2000, 3_000_000), "user": u0 + rng.randrange(bp.users),
                    "command": c0 + rng.choice(interactive_cmds if interactive and interactive_cmds else batch_cmds),
                    "pod": -1, "namespace": -1, "slurm": True,
                })
            t += d
        return out

    def _serving_jobs(self, kind: WorkloadScenario, lanes: list[tuple[int, int, list[int]]]) -> list[dict[str, Any]]:
        """Replica lifetimes from a fleet-level demand curve: base load with a daily rhythm plus bursts
        that ramp up in ~90 s and decay over minutes. GPU of rank r is held while demand > r."""
        import numpy as np

        sp = kind.serving
        assert sp is not None
        n = len(lanes)
        scale = min(1.0, n / 256)  # the profile is written for a 256-GPU fleet
        rng = self._rng(4, 0)
        step = sp.step_s
        t0 = -DAY_S
        n_steps = math.ceil((self.horizon_s - t0) / step) + 1
        times = t0 + step * np.arange(n_steps)
        hour = ((self.start_epoch + times) % DAY_S) / 3600
        day_w = 0.5 - 0.5 * np.cos((hour - 2) / 24 * 2 * np.pi)  # low ~02:00, high ~14:00 UTC
        demand = (sp.base_gpus[0] + (sp.base_gpus[1] - sp.base_gpus[0]) * day_w) * scale
        # Bursts: thinned Poisson arrivals, trapezoids (ramp up, hold, ramp down).
        rate_max = sp.bursts_per_day / DAY_S
        t: float = t0
        while True:
            t += rng.expovariate(rate_max)
            if t >= self.horizon_s:
                break
            if rng.random() >= _rate_factor(self.start_epoch + t, sp.night_factor, 1.0):
                continue
            height = rng.uniform(*sp.peak_gpus) * scale
            hold = rng.lognormvariate(math.log(sp.burst_median_s), sp.burst_sigma)
            i0 = int((t - t0) // step)
            up = max(1, int(sp.ramp_up_s // step))
            down = max(1, int(sp.ramp_down_s // step))
            hold_n = max(1, int(hold // step))
            shape = np.concatenate([
                np.linspace(height / up, height, up), np.full(hold_n, height), np.linspace(height, 0, down + 1)[1:]
            ])
            seg = slice(i0, min(i0 + len(shape), n_steps))
            demand[seg] = np.maximum(demand[seg], shape[: seg.stop - seg.start])
        pool_u = len(self.users)
        self.users.append("svc-inference")
        cmd = len(self.commands)
        self.commands.append(sp.command)
        ns = len(self.namespaces)
        self.namespaces.append(sp.namespace)
        # Ranks spread replicas across hosts, as a scheduler spreading pods would.
        ranks = rng.sample(range(n), n)
        out = []
        for (lane, _h, _gpus), r in zip(lanes, ranks, strict=True):
            busy = demand > r
            edges = np.flatnonzero(np.diff(np.concatenate([[False], busy, [False]]).astype(np.int8)))
            starts, ends = times[np.minimum(edges[0::2], n_steps - 1)], edges[1::2]
            ends = np.where(ends >= n_steps, self.horizon_s + DAY_S, t0 + step * ends)
            lrng = self._rng(5, lane)
            base_replica = r < sp.base_gpus[1] * scale
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                if e <= 0:
                    continue
                pod = len(self.pods)
                self.pods.append(f"coder-llm-{lrng.getrandbits(40):010x}"[:20])
                lo, hi = sp.sm_base if base_replica else sp.sm_burst
                out.append({
                    "lane": lane, "start": s, "end": e, "setup_end": s + lrng.uniform(20, 60),
                    "debug_frac": lrng.uniform(0.02, 0.1), "sm": lrng.uniform(lo, hi),
                    "occ_ratio": lrng.uniform(0.3, 0.55), "tensor_ratio": lrng.uniform(0.2, 0.45),
                    "dram_ratio": lrng.uniform(0.45, 0.8), "duty_fill": lrng.uniform(*DUTY_FILL),
                    "mem_mib": int(lrng.uniform(*sp.mem_gib) * 1024), "nproc": 1,
                    "pid": lrng.randrange(2000, 200_000), "user": pool_u, "command": cmd,
                    "pod": pod, "namespace": ns, "slurm": False,
                })
        return out

    def _finish_jobs(self, rows: list[dict[str, Any]]) -> None:
        import numpy as np

        def col(name: str, dtype: Any) -> Any:
            return np.array([r[name] for r in rows], dtype=dtype)

        # Slurm ids grow with submission time, as a real controller's do.
        slurm = [i for i, r in enumerate(rows) if r["slurm"]]
        slurm.sort(key=lambda i: rows[i]["start"])
        job_id = np.full(len(rows), -1, dtype=np.int64)
        base = 400_000 + self._rng(6, 0).randrange(100_000)
        for k, i in enumerate(slurm):
            job_id[i] = base + k
        self.jobs = _Jobs(
            lane=col("lane", np.int64), start=col("start", np.float64), end=col("end", np.float64),
            setup_end=col("setup_end", np.float64), debug_frac=col("debug_frac", np.float32),
            sm=col("sm", np.float32), occ_ratio=col("occ_ratio", np.float32),
            tensor_ratio=col("tensor_ratio", np.float32), dram_ratio=col("dram_ratio", np.float32),
            duty_fill=col("duty_fill", np.float32), mem_mib=col("mem_mib", np.int64), nproc=col("nproc", np.int16),
            pid=col("pid", np.int64), user=col("user", np.int64), command=col("command", np.int64),
            job_id=job_id, pod=col("pod", np.int64), namespace=col("namespace", np.int64),
        )
        # Lane-major search keys: lane * SPAN + time, one searchsorted serves every lane at once.
        self._span = float(self.horizon_s + 2 * WARMUP_S + 4 * DAY_S)
        self._job_key = self.jobs.lane * self._span + (self.jobs.start + WARMUP_S)

    def _build_phases(self) -> None:
        """Per lane, an alternating sequence of phases, each with a uniform draw u: a held GPU is in a debug
        phase while u < the job's debug share, so each job spends about that share debugging."""
        import numpy as np

        keys, us = [], []
        mean = self._phase_mean()
        for lane in range(self.n_lanes):
            g = np.random.default_rng([self.seed & 0xFFFFFFFF, (self.seed >> 32) & 0xFFFFFFFF, 7, lane])
            total = self.horizon_s + WARMUP_S
            n = int(total / mean[lane] * 1.5) + 16
            lengths = np.maximum(g.exponential(mean[lane], n), 60.0)
            bounds = np.concatenate([[0.0], np.cumsum(lengths)])
            while bounds[-1] < total:
                more = np.maximum(g.exponential(mean[lane], n), 60.0)
                bounds = np.concatenate([bounds, bounds[-1] + np.cumsum(more)])
            keys.append(lane * self._span + bounds[:-1])
            us.append(g.random(len(bounds) - 1, dtype=np.float32))
        self._phase_key = np.concatenate(keys)
        self._phase_u = np.concatenate(us)

    def _phase_mean(self) -> list[float]:
        """A lane's phase length comes from its host's scenario (serving replicas change every 10 min)."""
        means = [600.0] * self.n_lanes
        for g in range(self.n_gpus):
            kind = self.host_kind[int(self.gpu_host[g])]
            if kind.batch is not None:
                means[int(self.lane_of_gpu[g])] = kind.batch.phase_mean_s
        return means

    # --------------------------------------------------------------------------- state

    def _state(self, gpu: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(job index or -1, held, debug, time of the last state change) for each (gpu, t)."""
        import numpy as np

        lane = self.lane_of_gpu[gpu]
        q = lane * self._span + (t + WARMUP_S)
        j = np.searchsorted(self._job_key, q, side="right") - 1
        jc = np.maximum(j, 0)
        jobs = self.jobs
        p = np.maximum(np.searchsorted(self._phase_key, q, side="right") - 1, 0)
        if not len(jobs.lane):
            none = np.zeros(len(t), dtype=bool)
            return np.full(len(t), -1), none, none, np.full(len(t), -float(WARMUP_S))
        held = (j >= 0) & (jobs.lane[jc] == lane) & (t < jobs.end[jc])
        in_setup = t < jobs.setup_end[jc]
        debug = held & (in_setup | (self._phase_u[p] < jobs.debug_frac[jc]))
        # Last state change: job start, end of setup or of the previous job, or a phase boundary.
        phase_edge = self._phase_key[p] - lane * self._span - WARMUP_S
        same_lane = (j >= 0) & (jobs.lane[jc] == lane)
        edge = np.where(held, np.where(in_setup, jobs.start[jc], np.maximum(jobs.setup_end[jc], phase_edge)),
                        np.where(same_lane, jobs.end[jc], -float(WARMUP_S)))
        return np.where(held, j, -1), held, debug, edge

    def allocations(self, first_s: float, last_s: float) -> list[dict[str, Any]]:
        """What the scheduler allocated, consistent with the schedule: one row per job per host (a lane's GPUs
        are on one host). A Slurm job's allocation starts before its processes (prolog, environment: 20 s to
        2 min) and an interactive session often stays open after its last process ends (salloc kept open: 10
        min to 3 h, 70 % of them): allocated time with no process. A Kubernetes pod holds its GPUs from
        container creation (10-40 s before the process) to the end of its grace period (30 s). Never two
        allocations of one GPU at once: the tail stops before the lane's next allocation. Rows outside
        [first_s, last_s] (seconds since the start) are left out; an allocation still open at last_s ends
        there, RUNNING (as sacct --now closes it)."""
        import numpy as np

        jobs = self.jobs
        if not len(jobs.lane):
            return []
        lane_gpus: dict[int, list[int]] = {}
        for g, lane in enumerate(self.lane_of_gpu.tolist()):
            lane_gpus.setdefault(lane, []).append(g)
        starts, ends = jobs.start.astype(float).copy(), jobs.end.astype(float).copy()
        slurm = jobs.job_id >= 0
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, (self.seed >> 32) & 0xFFFFFFFF, 11])
        n = len(starts)
        interactive = np.array([self.commands[c] in INTERACTIVE_CMDS for c in jobs.command.tolist()])
        pre = np.where(slurm, rng.uniform(20, 120, n), rng.uniform(10, 40, n))
        post = np.where(slurm, np.where(interactive & (rng.random(n) < 0.7), rng.uniform(600, 3 * 3600, n), 0.0),
                        30.0)
        a_start = starts - pre
        a_end = ends + post
        same_lane_next = np.concatenate([jobs.lane[1:] == jobs.lane[:-1], [False]])
        next_start = np.concatenate([a_start[1:], [np.inf]])
        a_end = np.where(same_lane_next, np.minimum(a_end, next_start), a_end)
        prev_end = np.concatenate([[-np.inf], a_end[:-1]])
        same_lane_prev = np.concatenate([[False], jobs.lane[1:] == jobs.lane[:-1]])
        a_start = np.where(same_lane_prev, np.maximum(a_start, prev_end), a_start)
        out = []
        accounts = {"phantom": "research", "idle-cluster": "genomics", "steady-training": "pretrain",
                    "bursty-agents": "agents"}
        for j in range(n):
            s0, e0 = float(a_start[j]), float(a_end[j])
            if e0 <= first_s or s0 >= last_s or e0 <= s0:
                continue
            gpus = lane_gpus[int(jobs.lane[j])]
            h = int(self.gpu_host[gpus[0]])
            kind = self.host_kind[h].name
            running = e0 > last_s
            e0 = min(e0, last_s)
            user_i, pod_i, ns_i = int(jobs.user[j]), int(jobs.pod[j]), int(jobs.namespace[j])
            row: dict[str, Any]
            if slurm[j]:
                jid = str(int(jobs.job_id[j]))
                row = {"job_id": jid, "job_id_raw": jid, "user": self.users[user_i] if user_i >= 0 else None,
                       "account": accounts.get(kind, kind),
                       "partition": "interactive" if interactive[j] else "gpu-large" if len(gpus) == 8 else "gpu",
                       "namespace": None, "state": "RUNNING" if running else "COMPLETED", "source": "slurm"}
            else:
                ns = self.namespaces[ns_i] if ns_i >= 0 else "default"
                row = {"job_id": f"{ns}/{self.pods[pod_i]}", "job_id_raw": None, "user": None,
                       "account": None, "partition": None, "namespace": ns,
                       "state": "Running" if running else "Succeeded", "source": "kubernetes"}
            row |= {"host": self.hosts[h], "gpus": float(len(gpus)), "gpu_type": self.host_kind[h].gpu.gres_type,
                    "mig_profile": None,
                    "start_ts": self.start + timedelta(seconds=s0), "end_ts": self.start + timedelta(seconds=e0),
                    # the span its processes held the GPUs (ground truth only; not a column)
                    "_held_start": self.start + timedelta(seconds=float(starts[j])),
                    "_held_end": self.start + timedelta(seconds=float(ends[j]))}
            out.append(row)
        return out
