"""`gpuaudit analyze` as a user runs it (subprocess): output, options, and one-line errors."""

from __future__ import annotations

import json

import pytest
from tests.analysis_helpers import ends, gpu_rows, proc_rows, write
from tests.helpers import run_cli

from gpuaudit.analysis.overrides import Overrides


@pytest.fixture(scope="module")
def root(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("cli")
    a = gpu_rows("n1", "GPU-a", 240, sm=0.8, procs=1)
    b = gpu_rows("n1", "GPU-b", 240, sm=0.6, procs=1)
    return write(root, a + b, proc_rows("n1", "GPU-a", ends(a)))


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    proc = run_cli("analyze", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_json_end_to_end(root) -> None:  # type: ignore[no-untyped-def]
    r = _json("--data", str(root))
    assert r["utilization"]["real_utilization"]["value"] == pytest.approx(0.7, rel=1e-6)
    assert r["decision"]["branch"] == "hybrid" and r["decision"]["rule"]["id"] == "mid-utilization"
    assert r["costs"]["preset"] == "default" and len(r["costs"]["scenarios"]) == 7
    assert r["decision"]["recommendation"] in ("cloud", "hybrid", "on-prem")
    assert r["decision"]["confidence"]["level"] in ("low", "medium", "high")


def test_flags_and_current(root) -> None:  # type: ignore[no-untyped-def]
    r = _json("--data", str(root), "--data-residency", "--latency-sensitive", "--current", "cloud",
              "--egress-gb-per-week", "0")
    assert r["decision"]["rule"]["id"] == "data-residency" and r["decision"]["branch"] == "on-prem"
    inputs = r["decision"]["inputs"]
    assert inputs["current"] == "cloud" and inputs["latency_sensitive"] is True and inputs["egress_gb_per_week"] == 0
    stay = next(s for s in r["costs"]["scenarios"] if s["id"] == "stay-as-is")
    assert stay["owned_gpus"] == 0 and stay["cloud_gpu_hours"] > 0


def test_env_var_and_article_preset(root) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("analyze", "--json", "--preset", "article", env={"GPUAUDIT_DATA": str(root)})
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["costs"]["preset"] == "article" and r["costs"]["horizon_months"] == 12


def test_text_summary(root) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("analyze", "--data", str(root))
    assert proc.returncode == 0, proc.stderr
    assert "real utilization" in proc.stdout and "rule mid-utilization → hybrid" in proc.stdout
    assert "recommendation: " in proc.stdout and "(confidence " in proc.stdout
    assert "cheapest" in proc.stdout


@pytest.mark.parametrize(
    ("toml", "needle"),
    [('[cloud]\nspot_multiplier = "abc"', 'config error: cloud.spot_multiplier must be a number >= 0 and <= 100, '
                                          'got "abc"'),
     ("[on_prem]\nhardware_usd_per_gpu = 1e300", "on_prem.hardware_usd_per_gpu must be a number >= 0 and <= 1e+12"),
     ("[cloud]\nbogus = 1", "unknown key cloud.bogus"),
     ("[on_prem]\nstaff_usd_per_month = -5", "on_prem.staff_usd_per_month must be a number >= 0")],
)
def test_bad_config_is_one_line(root, tmp_path, toml: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    proc = run_cli("analyze", "--data", str(root), "--config", str(cfg))
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpuaudit: error: ") and needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_missing_and_empty_dataset(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("analyze", "--data", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "no dataset at" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = run_cli("analyze", "--data", str(tmp_path / "empty"))
    assert proc.returncode == 2 and "no GPU samples" in proc.stderr and "Traceback" not in proc.stderr


def test_minutes_long_trial(tmp_path) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, gpu_rows("n1", "GPU-a", 5, sm=0.5, procs=1))
    proc = run_cli("analyze", "--data", str(tmp_path))
    assert proc.returncode == 2 and "covers only 5 minutes" in proc.stderr
    assert "Traceback" not in proc.stderr and "ZeroDivision" not in proc.stderr


def test_bad_current_and_negative_egress(root) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("analyze", "--data", str(root), "--current", "moon")
    assert proc.returncode == 2 and "--current must be one of on-prem, cloud" in proc.stderr
    proc = run_cli("analyze", "--data", str(root), "--egress-gb-per-week", "-1")
    assert proc.returncode == 2 and "--egress-gb-per-week must be a number between 0 and 1e12" in proc.stderr


def test_help_documents_the_options() -> None:
    proc = run_cli("analyze", "--help")
    assert proc.returncode == 0
    for opt in ("--data", "--config", "--json", "--latency-sensitive", "--data-residency", "--egress-gb-per-week",
                "--current", "--preset", "--fleet-gpus"):
        assert opt in proc.stdout


def test_latency_sensitive_share_option(root) -> None:  # type: ignore[no-untyped-def]
    """--latency-sensitive-share states the share of demand that must stay on owned GPUs; out of range, or beside
    --latency-sensitive (all of it) with another share, is a one-line error."""
    r = _json("--data", str(root), "--latency-sensitive-share", "0.5")
    assert r["decision"]["inputs"]["latency_sensitive_share"] == 0.5
    assert not {s["id"]: s for s in r["costs"]["scenarios"]}["all-cloud"]["allowed"]
    for bad in (("--latency-sensitive-share", "1.5"), ("--latency-sensitive-share", "nan"),
                ("--latency-sensitive", "--latency-sensitive-share", "0.3")):
        proc = run_cli("analyze", "--data", str(root), *bad)
        assert proc.returncode == 2, bad
        assert "latency-sensitive" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_bad_option_is_refused_before_the_dataset_is_read(root, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A bad --latency-sensitive-share (or --egress-gb-per-week) was refused only after stage 1 had scanned the
    whole dataset (minutes at 100 M rows): now before it. Stage 1 here records that it ran."""
    from gpuaudit.analysis import pipeline
    from gpuaudit.errors import GpuauditError

    scanned: list[object] = []
    real = pipeline.load_keyed
    monkeypatch.setattr(pipeline, "load_keyed", lambda *a, **k: scanned.append(a) or real(*a, **k))
    for bad in ({"latency_sensitive_share": 2.0}, {"egress_gb_per_week": -1.0},
                {"latency_sensitive": True, "latency_sensitive_share": 0.5}):
        with pytest.raises(GpuauditError):
            pipeline.analyze(root, overrides=Overrides(**bad))  # type: ignore[arg-type]
    assert scanned == []
    pipeline.analyze(root, overrides=Overrides(latency_sensitive_share=0.5), cache=False)
    assert len(scanned) == 1  # a good option still reads the dataset
