"""Bounded work and safe output: settings inside their bounds that would exhaust memory (hybrid sizing of a
huge fleet), output paths that look like URLs or name an unknown user's home, absurd simulated GPU counts,
control characters in the written report files and JSON, and a refused --interval shown as given. The CLI
runs on real files; the sizing and sampler checks use the real library."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.agent_helpers import make_sampler
from tests.analysis_helpers import gpu_rows, write
from tests.helpers import NASTY, _nasty_dataset, one_error_line, run_cli

from gpuaudit.analysis import hybrid
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.costs import timeline
from gpuaudit.analysis.hybrid import critical_fractile_n, size

RAW = ("\x1b", "\r", "\b", "\x00", "\x07", "\x9b", "\x7f", "\u202e", "\u2066", "\u2028")
NOUSER = "~no_such_user_gpuaudit"




def _raw(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def _strings(doc: Any) -> list[str]:
    """Every string value in a JSON document."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return []


def _small_dataset(root: Path) -> Path:
    return write(root, [r for g in range(8) for r in gpu_rows("n1", f"GPU-{g}", 240, sm=0.5,
                                                                 procs=lambda i, g=g: int((i // 20 + g) % 3 > 0))])


# --- 1. hybrid sizing is bounded whatever the fleet size -----------------------------------------------------
def _demand(peak: float, n: int = 2000, seed: int = 0) -> np.ndarray:
    """A bursty fleet demand series reaching about `peak` GPUs."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.3, 0.6, n)
    bursts = np.where(rng.random(n) < 0.1, rng.uniform(0.2, 0.4, n), 0.0)
    return np.round((base + bursts) * peak, 1)


def test_hybrid_sizing_of_a_huge_fleet_prices_a_bounded_grid() -> None:
    cfg = load_config()
    tl = timeline(cfg)
    d = _demand(5e6)
    s = size(cfg, tl, d, 1e30, 300.0, 0, 0.0)
    assert s.candidates.size <= 12_000  # not one price per GPU up to the peak
    assert s.candidates[0] == 0 and np.all(np.diff(s.candidates) > 0)
    assert s.owned_usd.shape == s.cloud_usd.shape == s.overflow_gpu_hours.shape == s.candidates.shape
    # every count around the answer is priced, and none is cheaper
    i = int(np.searchsorted(s.candidates, s.n_owning))
    near = s.candidates[max(i - 50, 1):i + 51]
    assert np.array_equal(near, np.arange(near[0], near[-1] + 1))
    assert s.total_usd[i] == s.total_usd[1:].min()
    # the critical fractile of millions of GPUs, found without an array per GPU
    assert abs(s.n_owning - s.critical_fractile_n) <= 0.01 * s.n_owning


VARIANTS = {
    "default": ({}, {}, 0),
    "per-node costs": ({"staff_usd_per_node_per_month": 4000.0, "gpus_per_node": 8}, {}, 0),
    "instance billing": ({}, {"billing_granularity": "instance", "gpus_per_instance": 8}, 0),
    "owned already": ({}, {}, 12_000),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_hybrid_grid_finds_the_minimum_of_pricing_every_count(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    on_prem, cloud, existing = VARIANTS[variant]
    cfg = load_config().replace("on_prem", **on_prem).replace("cloud", **cloud)
    tl = timeline(cfg)
    d = _demand(30_000, seed=len(variant))
    grid = size(cfg, tl, d, 1e18, 300.0, existing, 2.0)
    assert grid.candidates.size < 20_000
    monkeypatch.setattr(hybrid, "DENSE_MAX", 10**9)  # every count, as for a small fleet
    dense = size(cfg, tl, d, 1e18, 300.0, existing, 2.0)
    assert dense.candidates.size == 30_001 or dense.candidates.size == int(np.ceil(d.max())) + 1
    assert grid.n_owning == dense.n_owning and grid.n_star == dense.n_star
    assert grid.critical_fractile_n == dense.critical_fractile_n
    i = int(np.searchsorted(grid.candidates, grid.n_owning))
    assert grid.total_usd[i] == pytest.approx(dense.total_usd[dense.n_owning], rel=1e-12)


def test_critical_fractile_by_bisection_matches_the_per_level_array() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        d = rng.integers(0, 300, size=rng.integers(1, 400)).astype(float) + rng.random() * (rng.random() < 0.5)
        cloud, new, keep = rng.uniform(0.5, 3.0), rng.uniform(0.1, 2.0), rng.uniform(0.05, 2.0)
        existing = int(rng.integers(0, 320))
        levels = np.arange(1, int(np.ceil(d.max() - 1e-9)) + 1, dtype=float)
        per_level = np.where(levels <= existing, keep, new)
        want = critical_fractile_n(d, cloud, per_level) if levels.size else 0
        assert critical_fractile_n(d, cloud, new, keep_rate=keep, existing=existing) == want
        assert critical_fractile_n(d, cloud, new) == critical_fractile_n(d, cloud, np.full(levels.size, new))


@pytest.mark.parametrize(("text", "needle"), [
    ("[analysis]\nhorizon_months = 241\n", "analysis.horizon_months must be an integer >= 1 and <= 240"),
    ("[analysis]\ngrowth_rates = [10.5]\n", "analysis.growth_rates must be a number >= -0.99 and <= 10"),
    ("[analysis]\ngrowth_rates = [5.0]\nhorizon_months = 240\n", "multiplies demand"),
])
def test_config_beyond_sane_growth_or_horizon_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    root = _small_dataset(tmp_path / "d")
    (tmp_path / "c.toml").write_text(text)
    r = run_cli("analyze", "--data", str(root), "--config", str(tmp_path / "c.toml"), timeout=120)
    one_error_line(r, "config error:", needle)


def test_ten_million_gpu_fleet_with_growth_analyzes_in_bounded_time(tmp_path: Path) -> None:
    root = _small_dataset(tmp_path / "d")
    (tmp_path / "c.toml").write_text("[analysis]\ngrowth_rates = [1.0]\nhorizon_months = 240\n")
    r = run_cli("analyze", "--json", "--data", str(root), "--config", str(tmp_path / "c.toml"),
                "--fleet-gpus", "10000000", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["hybrid"]["n_owning"] > 1_000_000
    assert len(doc["hybrid"]["curve"]["rows"]) <= 12_000


# --- 2. and 3. output paths: URLs that are not supported, unknown users -----------------------------------------
@pytest.mark.parametrize("out", ["s3://bucket/r", "xx://bucket/r", "s3:bucket/r", "S3://bucket"])
def test_report_out_url_is_refused(tmp_path: Path, out: str) -> None:
    root = _small_dataset(tmp_path / "d")
    r = run_cli("report", "--data", str(root), "--out", out, cwd=tmp_path, timeout=120)
    one_error_line(r, "--out", "local directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no ./s3: folder


@pytest.mark.parametrize("to", ["s3:relative", "s3:", "xx://bucket/p", "s3://"])
def test_push_to_a_malformed_url_is_refused(tmp_path: Path, to: str) -> None:
    root = _small_dataset(tmp_path / "d")
    r = run_cli("push", "--data", str(root), "--to", to, cwd=tmp_path, timeout=120)
    one_error_line(r, "--to")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.mark.parametrize("upload", ["s3:bucket", "xx://bucket", f"{NOUSER}/x"])
def test_agent_upload_to_a_malformed_target_is_refused(tmp_path: Path, upload: str) -> None:
    r = run_cli("agent", "run", "--once", "--simulate", "static", "--simulate-gpus", "1", "--interval", "0.2",
                "--data", str(tmp_path / "d"), "--upload", upload, cwd=tmp_path, timeout=60)
    one_error_line(r, "--upload")
    assert list(tmp_path.iterdir()) == []  # neither the target nor the dataset


@pytest.mark.parametrize("command", [
    ["report", "--out", f"{NOUSER}/r"], ["demo", "--gpus", "1", "--days", "0.1", "--out", f"{NOUSER}/r"],
    ["push", "--to", f"{NOUSER}/t"], ["analyze", "--config", f"{NOUSER}/c.toml"],
    ["report", "--config", f"{NOUSER}/c.toml"],
    ["import", "prometheus", "--url", "http://127.0.0.1:9", "--bearer-token-file", f"{NOUSER}/t"],
    ["import", "prometheus", "--url", "http://127.0.0.1:9", "--ca-file", f"{NOUSER}/ca.pem"],
])
def test_unknown_user_in_any_path_option_is_one_line(tmp_path: Path, command: list[str]) -> None:
    root = _small_dataset(tmp_path / "d")
    data = [] if command[0] == "demo" else ["--data", str(root)]  # the demo writes its own data into --out
    r = run_cli(*command, *data, cwd=tmp_path, timeout=120)
    one_error_line(r, NOUSER, "cannot expand '~'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no literal ./~no_such_user... folder


def test_tilde_in_report_out_and_push_to_is_the_home_directory(tmp_path: Path) -> None:
    root = _small_dataset(tmp_path / "d")
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    r = run_cli("report", "--data", str(root), "--out", "~/r", "--format", "md", "-q", cwd=tmp_path, env=env,
                timeout=120)
    assert r.returncode == 0, r.stderr
    assert (home / "r" / "report.md").is_file() and not (tmp_path / "~").exists()
    r = run_cli("push", "--data", str(root), "--to", "~/central", cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert any((home / "central").rglob("*.parquet")) and not (tmp_path / "~").exists()


# --- 4. simulated GPU counts, and a stop between GPUs of one pass --------------------------------------------
@pytest.mark.parametrize("gpus", ["0", "-1", "1025", "100000"])
@pytest.mark.parametrize("command", ["run", "status"])
def test_simulate_gpus_out_of_range_is_one_line(tmp_path: Path, gpus: str, command: str) -> None:
    extra = ["--once", "--interval", "0.2"] if command == "run" else []
    r = run_cli("agent", command, *extra, "--simulate", "static", "--simulate-gpus", gpus,
                "--data", str(tmp_path / "d"), timeout=60)
    one_error_line(r, "--simulate-gpus must be between 1 and 1024", f"got {gpus}")
    assert not (tmp_path / "d").exists()


def test_a_stop_request_ends_the_sampling_pass_between_gpus() -> None:
    from tests.test_agent_sampler import SCRIPT

    sampler, _fake, clock = make_sampler("h100", SCRIPT, n_gpus=8)
    asked: list[int] = []
    sampler.stop = lambda: len(asked) > 3 or bool(asked.append(1))  # SIGTERM arrives while GPU 3 is read
    assert len(sampler.discover()) == 4  # discovery stops too
    sampler.stop = lambda: False
    assert len(sampler.discover()) == 8
    clock.advance(10)
    asked.clear()
    sampler.stop = lambda: len(asked) > 3 or bool(asked.append(1))
    rows, _ = sampler.sample(datetime(2026, 1, 1, tzinfo=UTC))
    assert [r["gpu_index"] for r in rows] == [0, 1, 2, 3]  # the rest of the pass is skipped, not waited for


# --- 5. control characters in the written report and the JSON ----------------------------------------------
def test_report_files_and_analyze_json_hold_no_raw_control_characters(tmp_path: Path) -> None:
    root = tmp_path / "d"
    _nasty_dataset(root, n=24 * 60)
    out = tmp_path / "out"
    r = run_cli("report", "--data", str(root), "--out", str(out), "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"report.html", "report.md", "report.json"}
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert not _raw(text), (path.name, _raw(text))
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "mallory\\\\x1b\\[31mred" in md  # shown, escaped (and the Markdown specials after it)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "mallory\\x1b[31mred" in html and "\\u202eevil" in html
    # JSON: escaped as JSON escapes, so the data round-trips exactly
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert f"mallory{NASTY}" in _strings(doc)
    r = run_cli("analyze", "--json", "--data", str(root), timeout=300)
    assert r.returncode == 0, r.stderr
    assert not _raw(r.stdout), _raw(r.stdout)
    assert f"mallory{NASTY}" in _strings(json.loads(r.stdout))
    assert "\\u202e" in r.stdout  # a JSON escape, not the raw override


def test_json_escaping_keeps_text_and_round_trips() -> None:
    from gpuaudit.util.jsonio import json_text

    doc = {"name": f"é—≥ 日本 🙂 {NASTY}\x7f\u2028\u2066\udc80", "n": [1, 2.5, None], f"k{NASTY}": True}
    for kwargs in ({}, {"indent": 2}, {"separators": (",", ":")}):
        text = json_text(doc, **kwargs)
        assert not _raw(text) and "\udc80" not in text
        assert json.loads(text) == doc
        assert "é—≥ 日本 🙂" in text  # readable text stays as it is
    assert json_text({"a": "plain"}) == json.dumps({"a": "plain"}, ensure_ascii=False)


# --- 6. a refused value is shown as given --------------------------------------------------------------------
@pytest.mark.parametrize("value", ["3600.0001", "0.09999999"])
def test_refused_interval_is_shown_with_every_digit(tmp_path: Path, value: str) -> None:
    r = run_cli("agent", "run", "--once", "--simulate", "static", "--simulate-gpus", "1", "--data", str(tmp_path),
                f"--interval={value}", timeout=60)
    one_error_line(r, "--interval must be between 0.1 and 3600 seconds", f"got {value}")


def test_help_of_every_touched_command_renders() -> None:
    for command in (["report"], ["demo"], ["analyze"], ["push"], ["agent", "run"], ["agent", "status"],
                    ["import", "prometheus"]):
        r = run_cli(*command, "--help", env={"COLUMNS": "120", "TERM": os.environ.get("TERM", "dumb")})
        assert r.returncode == 0 and "Usage" in r.stdout and "Traceback" not in r.stderr, (command, r.stderr)
