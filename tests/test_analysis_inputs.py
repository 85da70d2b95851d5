"""Bad numbers in the data or the config never reach the decision as NaN, never traceback: NaN/inf samples are
excluded (and reported) or refused in one line; absurd prices are refused in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tests.analysis_helpers import gpu_rows, write
from tests.helpers import run_cli


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_samples_do_not_reach_the_decision(tmp_path: Path, bad: float) -> None:
    root = write(tmp_path / "d", gpu_rows("n1", "GPU-a", 240, sm=0.5, procs=1))
    # a foreign file (not written by gpuaudit, which refuses such values) with one bad sample
    import duckdb

    part = next((root / "gpu_samples").glob("host=*/date=*"))
    src = next(part.glob("*.parquet"))
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * REPLACE (CASE WHEN ts = (SELECT max(ts) FROM '{src}') THEN CAST('{bad}' AS FLOAT) "
                f"ELSE sm_active END AS sm_active) FROM '{src}') TO '{part / 'foreign.parquet'}' (FORMAT parquet)")
    src.unlink()
    proc = run_cli("analyze", "--data", str(root), "--json")
    assert "Traceback" not in proc.stderr
    if proc.returncode == 0:
        import json

        r = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
        assert r["utilization"]["real_utilization"]["value"] == pytest.approx(0.5)
        assert any("excluded" in w or "rejected" in w for w in r["data_quality"]["warnings"])
    else:
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["[on_prem]\nhardware_usd_per_gpu = 1e308\n", "[cloud]\negress_gb_per_week = inf\n",
                                  "[analysis]\nhorizon_months = 100000000\n"])
def test_absurd_prices_are_one_line(tmp_path: Path, text: str) -> None:
    root = write(tmp_path / "d", gpu_rows("n1", "GPU-a", 120, sm=0.5, procs=1))
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    for cmd in ("analyze", "report"):
        extra = ["--out", str(tmp_path / "out")] if cmd == "report" else []
        proc = run_cli(cmd, "--data", str(root), "--config", str(cfg), *extra)
        assert proc.returncode == 2, proc.stdout
        assert proc.stderr.startswith("gpuaudit: error: config error:") and "Traceback" not in proc.stderr
