"""Units in the config: every price and multiplier has a plausible range (a percent written as a multiplier,
`[cloud] spot_multiplier = 45`, or cents as dollars, `[on_prem] power_usd_per_kwh = 120`, would flip the
recommendation). Outside it the value is refused in one line with the key, the value and the range, unless the
file says `allow_implausible = ["key"]`."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.analysis_helpers import gpu_rows, write
from tests.helpers import run_cli

from gpuaudit.analysis.config import PLAUSIBLE, load_config
from gpuaudit.errors import GpuauditError


@pytest.mark.parametrize(("text", "key", "value", "lo", "hi"), [
    ("[cloud]\nspot_multiplier = 45\n", "cloud.spot_multiplier", "45", "0.05", "1"),
    ("[on_prem]\npower_usd_per_kwh = 120\n", "on_prem.power_usd_per_kwh", "120", "0.01", "1"),
    ("[on_prem]\npue = 5\n", "on_prem.pue", "5", "1", "3"),
    ("[cloud]\ninstance_usd_per_hour = 5504\n", "cloud.instance_usd_per_hour ÷ cloud.gpus_per_instance", "688",
     "0.05", "50"),
])
def test_a_value_outside_its_plausible_range_is_refused(tmp_path: Path, text: str, key: str, value: str, lo: str,
                                                        hi: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(GpuauditError) as e:
        load_config(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"{key} = {value} is outside its plausible range {lo} to {hi}" in msg
    assert "allow_implausible" in msg


def test_an_explicit_override_accepts_it(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('allow_implausible = ["on_prem.power_usd_per_kwh"]\n[on_prem]\npower_usd_per_kwh = 1.5\n')
    assert load_config(path).on_prem.power_usd_per_kwh == 1.5
    path.write_text('allow_implausible = ["on_prem.gpus_per_node"]\n')
    with pytest.raises(GpuauditError, match="has no plausible range"):
        load_config(path)


def test_the_presets_are_plausible() -> None:
    for preset in ("default", "article"):
        cfg = load_config(preset=preset)
        assert cfg.preset == preset
    assert "cloud.spot_multiplier" in PLAUSIBLE


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[cloud]\nspot_multiplier = 45\n")
    data = write(tmp_path / "data", gpu_rows("n1", "G-0", 120, sm=0.5, procs=1))
    proc = run_cli("analyze", "--data", str(data), "--config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: config error: cloud.spot_multiplier = 45")
