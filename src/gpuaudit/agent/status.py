"""`agent status`: what NVML shows on this node right now, whether the agent is running, and what it
last wrote."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuaudit.agent.instance import liveness
from gpuaudit.agent.nvml import DriverGone, Nvml, NvmlUnavailable
from gpuaudit.agent.runner import status_name
from gpuaudit.agent.sampler import Sampler
from gpuaudit.util import fmt
from gpuaudit.util.textsafe import printable

_PROBE_S = 0.5  # one short interval, so the probe can tell which fields this GPU really gives


def probe(nvml: Nvml, host: str, *, probe_s: float = _PROBE_S) -> dict[str, Any]:
    """Discover the devices and sample one short interval: devices, MIG, GPM or fallback, supported
    fields. Never raises for a missing library / driver: that is reported as `nvml_error`."""
    sampler = Sampler(nvml, host, lambda pid: {})
    try:
        sampler.discover()
        if sampler.units:
            time.sleep(probe_s)
            sampler.sample(datetime.now(UTC))
        return {"nvml_error": None, "driver_version": sampler.driver_version, "devices": sampler.describe()}
    except (NvmlUnavailable, DriverGone) as e:
        return {"nvml_error": str(e), "driver_version": None, "devices": []}
    finally:
        sampler.close()
        nvml.shutdown()


def collect(root: Path, host: str, nvml: Nvml) -> dict[str, Any]:
    from gpuaudit.store import read_json

    agent = read_json(root, status_name(host))
    if not isinstance(agent, dict):
        agent = None
    running, why = liveness(agent) if agent else (False, "no status file")
    live = probe(nvml, host)
    return {"host": host, "data": str(root), "agent": agent, "agent_running": running, "agent_state": why,
            **live}


def exit_code(st: dict[str, Any]) -> int:
    """0: NVML works and the agent is running; 1: NVML unusable; 3: the agent is not known to be running."""
    if st["nvml_error"]:
        return 1
    return 0 if st["agent_running"] else 3


def _age(iso: str | None) -> str:
    if not iso:
        return "never"
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()
    except ValueError:
        return iso
    return f"{iso} ({seconds:.0f} s ago)"


def _state(st: dict[str, Any]) -> str:
    agent, running, why = st.get("agent") or {}, st.get("agent_running"), st.get("agent_state")
    if running:
        return f"running ({why}, since {agent.get('started')})"
    seen = agent.get("updated") or agent.get("last_flush")
    last = f"last seen {_age(seen)}" if seen else ""
    if running is None:
        return f"unknown: {why}" + (f"; {last}" if last else "")
    return "NOT RUNNING (" + "; ".join(x for x in (why, last) if x) + ")"


def render(st: dict[str, Any]) -> str:
    lines = [f"host:            {st['host']}", f"data directory:  {st['data']}"]
    if st["nvml_error"]:
        lines.append(f"NVML:            unavailable: {st['nvml_error']}")
    else:
        lines.append(f"NVML:            ok, driver {st['driver_version'] or 'unknown'}, "
                     f"{fmt.count(len(st['devices']), 'device')}")
    for d in st["devices"]:
        where = f"GPU {d['index']}" + (f" MIG gi{d['mig_instance']} {d['mig_profile'] or ''}"
                                       if d["mig_instance"] is not None else "")
        sup = d.get("supported") or {}
        have = [k for k, v in sup.items() if v]
        missing = [k for k, v in sup.items() if not v]
        lines.append(f"  {where}: {d['name']} {d['uuid']}")
        lines.append(f"    SM activity via {d['path']}" + ("" if d["ok"] else " (FAILED this probe)"))
        if sup:
            lines.append(f"    measured: {', '.join(have) or '-'}; unsupported: {', '.join(missing) or '-'}")
    agent = st.get("agent")
    if not agent:
        lines.append("agent:           NOT RUNNING (no status file yet: has `gpuaudit agent run` started here?)")
    else:
        lines += [
            f"agent:           {_state(st)}",
            f"                 pid {agent.get('pid')}, version {agent.get('version')}, "
            f"interval {agent.get('interval_s')} s, flush every {agent.get('flush_interval_s')} s",
            f"last flush:      {_age(agent.get('last_flush'))}",
            f"last sample:     {agent.get('last_ts') or 'never'}",
            f"rows written:    {agent.get('rows_written')}, buffered {agent.get('buffered_rows')}, "
            f"dropped {agent.get('dropped_rows')}",
        ]
        if agent.get("flush_error"):
            lines.append(f"flush error:     {agent['flush_error']}")
    # Host, device names and errors come from the node and the status file: no raw control characters.
    return "\n".join(printable(line) for line in lines)
