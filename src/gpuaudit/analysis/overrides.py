"""The decision inputs a command line gives (`--latency-sensitive`, `--data-residency`, `--egress-gb-per-week`,
`--current`, `--fleet-gpus`, `--latency-sensitive-share`): one frozen object, checked and applied to the config
once (`apply`). Every setting an option changes is recorded in `Config.sources` under the option's name, so the
assumptions list says where each value came from without being told the options again."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from gpuaudit.analysis.config import Config, bounds
from gpuaudit.analysis.result import Deployment
from gpuaudit.errors import GpuauditError


@dataclass(frozen=True)
class Overrides:
    """What the command line says about the work and the fleet (None / False: the config decides)."""

    latency_sensitive: bool = False
    data_residency: bool = False
    egress_gb_per_week: float | None = None
    current: Deployment | str = Deployment.ON_PREM
    fleet_gpus: int | None = None
    latency_sensitive_share: float | None = None


@dataclass(frozen=True)
class Applied:
    """The config with the overrides merged in, and the inputs that are not settings."""

    cfg: Config
    current: Deployment
    data_residency: bool

    @property
    def latency_sensitive(self) -> bool:
        """Any latency-bound work: the tree's fact, read off the share whichever way it was set."""
        return self.cfg.decision.latency_sensitive_share > 0


NONE = Overrides()


def _set(cfg: Config, section: str, key: str, value: Any, option: str) -> Config:
    """`cfg` with a value a command-line option set, the option named as its source (the assumptions list)."""
    new = cfg.replace(section, **{key: value})
    return dataclasses.replace(new, sources={**cfg.sources, f"{section}.{key}": option})


def _deployment(value: Deployment | str) -> Deployment:
    try:
        return Deployment(value)
    except ValueError:
        raise GpuauditError(
            f"--current must be one of {', '.join(d.value for d in Deployment)}, got {value!r}"
        ) from None


def apply(cfg: Config, o: Overrides = NONE) -> Applied:
    """The overrides checked (one line per bad value) and merged into the settings."""
    share = o.latency_sensitive_share
    if share is not None:
        if not math.isfinite(share) or not 0.0 <= share <= 1.0:
            raise GpuauditError(f"--latency-sensitive-share must be a fraction between 0 and 1, got {share:g}")
        if o.latency_sensitive and share != 1.0:
            raise GpuauditError("--latency-sensitive means all work is latency-sensitive (a share of 1): give it or "
                                f"--latency-sensitive-share, not both (got {share:g})")
        cfg = _set(cfg, "decision", "latency_sensitive_share", float(share), "--latency-sensitive-share")
    elif o.latency_sensitive:
        cfg = _set(cfg, "decision", "latency_sensitive_share", 1.0, "--latency-sensitive")
    # The options set config values: the config's ranges hold for them.
    egress = o.egress_gb_per_week
    if egress is not None:
        lo, hi = bounds("cloud", "egress_gb_per_week")
        if not math.isfinite(egress) or not lo <= egress <= hi:
            raise GpuauditError(f"--egress-gb-per-week must be a number between {lo:g} and {hi:.0e}".replace("e+", "e")
                                + f", got {egress:g}")
        cfg = _set(cfg, "cloud", "egress_gb_per_week", float(egress), "--egress-gb-per-week")
    if o.fleet_gpus is not None:
        hi = bounds("analysis", "fleet_gpus")[1]
        if not 0 < o.fleet_gpus <= hi:
            raise GpuauditError(f"--fleet-gpus must be between 1 and {hi:,.0f}, got {o.fleet_gpus}")
        cfg = _set(cfg, "analysis", "fleet_gpus", int(o.fleet_gpus), "--fleet-gpus")
    return Applied(cfg=cfg, current=_deployment(o.current), data_residency=bool(o.data_residency))
