"""A setting's range has one definition (analysis/config.py): the config refuses values outside it, and the
sensitivity analysis clamps to the same range (never moving a value where no config may hold it)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpuaudit.analysis.config import bounds, load_config
from gpuaudit.analysis.fleet import Measured
from gpuaudit.analysis.result import Deployment
from gpuaudit.analysis.sensitivity import PARAMETERS, builder, tornado
from gpuaudit.errors import GpuauditError


@pytest.mark.parametrize(("section", "key"), [(s, k) for s, k, _ in PARAMETERS])
def test_each_moved_input_has_the_configs_range(section: str, key: str, tmp_path: Path) -> None:
    lo, hi = bounds(section, key)
    if math.isfinite(hi):
        (tmp_path / "c.toml").write_text(f"[{section}]\n{key} = {hi * 1.5 + 1}\n")
        with pytest.raises(GpuauditError, match=key):
            load_config(tmp_path / "c.toml")
    if math.isfinite(lo):
        (tmp_path / "c.toml").write_text(f"[{section}]\n{key} = {lo - 1}\n")
        with pytest.raises(GpuauditError, match=key):
            load_config(tmp_path / "c.toml")


def test_exclusive_lower_bound_is_above_it() -> None:
    lo, _ = bounds("on_prem", "amortization_years")
    assert lo > 0 and lo < 1e-300


def test_tornado_clamps_to_the_config_range(tmp_path: Path) -> None:
    _, hi = bounds("cloud", "spot_multiplier")
    (tmp_path / "c.toml").write_text(f'allow_implausible = ["cloud.spot_multiplier"]\n[cloud]\nspot_multiplier = {hi}\n'
                                     "[analysis]\nsensitivity_fraction = 0.2\n")
    cfg = load_config(tmp_path / "c.toml")
    held = np.full(288, 4.0)
    m = Measured(w=1.0, r=0.5, s=0.3, s_lower=0.3, gpus_seen=8, gpu_equivalents=8.0, held=held,
                 reporting=np.full(held.size, 8.0), day=np.arange(held.size) // 288, dt_hours=300 / 3600,
                 measured_w=400.0, current=Deployment.ON_PREM)
    row = next(r for r in tornado(cfg, builder(m), 0.2).rows if r["key"] == "cloud.spot_multiplier")
    assert row["high_value"] == hi and row["low_value"] == pytest.approx(0.8 * hi)
