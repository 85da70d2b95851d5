"""`gpuaudit demo`: simulate, analyze, write the report, say where it is (small sizes here; `make demo`
runs the full 90-day trial)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_cli

SMALL = ("--gpus", "8", "--days", "2", "--interval", "900")


def test_demo_writes_a_report_and_says_where(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = run_cli("demo", "--out", str(out), *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.html").stat().st_size > 20_000
    assert (out / "report.md").exists() and (out / "report.json").exists()
    assert (out / "data" / "simulation.json").exists()
    assert f"Open the report: {(out / 'report.html').resolve()}" in proc.stderr
    assert "Recommendation:" in proc.stdout
    # A second run replaces the previous demo's data instead of mixing two simulations.
    again = run_cli("demo", "--out", str(out), "--scenario", "phantom", *SMALL)
    assert again.returncode == 0, again.stderr
    assert '"scenario": "phantom"' in (out / "data" / "simulation.json").read_text().replace("'", '"')


def test_demo_refuses_to_touch_foreign_data(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    foreign = out / "data" / "gpu_samples" / "host=real-node" / "date=2026-01-01"
    foreign.mkdir(parents=True)
    (foreign / "part-1.parquet").write_bytes(b"precious")
    proc = run_cli("demo", "--out", str(out), *SMALL)
    assert proc.returncode != 0
    assert proc.stderr.startswith("gpuaudit: error: ") and "Traceback" not in proc.stderr
    assert "did not write; choose another --out" in proc.stderr
    assert (foreign / "part-1.parquet").read_bytes() == b"precious"


def test_demo_bad_scenario_is_one_line(tmp_path: Path) -> None:
    proc = run_cli("demo", "--scenario", "nope", "--out", str(tmp_path / "x"), *SMALL)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and "unknown scenario 'nope'" in proc.stderr
    assert not (tmp_path / "x").exists()
