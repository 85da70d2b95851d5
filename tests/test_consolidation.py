"""The biggest lever is named: on a fleet held all the time at low SM activity, the result says how many GPUs
the measured work fits on (SM-weighted demand at the target utilization, with headroom), the saving, and how
(naming the top holders of idle-held time), never mixed into "cheapest"."""

from __future__ import annotations

import math

import pytest
from tests.analysis_helpers import ends, gpu_rows, proc_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.report.sections import build_report


def _genomics() -> tuple[list[dict], list[dict]]:  # type: ignore[type-arg]
    """16 GPUs held all the time: 8 by alice at 24 % SM activity, 8 by bob with the SMs idle (12 % on average)."""
    samples, procs = [], []
    for g in range(16):
        user, sm = ("alice", 0.24) if g < 8 else ("bob", 0.0)
        rows = gpu_rows(f"n{g // 8}", f"G-{g}", 48 * 12, interval_s=300, sm=sm, procs=1)
        samples += rows
        procs += proc_rows(f"n{g // 8}", f"G-{g}", ends(rows), user=user)
    return samples, procs


def _own(cfg, n: int, existing: int, watts: float) -> float:  # type: ignore[no-untyped-def]
    """Owning n ≤ existing GPUs, by the table of docs/analyzer.md (nothing bought: no hardware, no network)."""
    o, a = cfg.on_prem, cfg.analysis
    assert n <= existing
    annuity = sum((1 + a.discount_rate_per_year) ** (-(m + 0.5) / 12) for m in range(a.horizon_months))
    end = (1 + a.discount_rate_per_year) ** (-a.horizon_months / 12)

    def v(age: float) -> float:
        return o.salvage_fraction + (1 - o.salvage_fraction) * max(0.0, 1 - age / o.amortization_years)

    nodes = math.ceil(n / o.gpus_per_node)
    kept = n * o.hardware_usd_per_gpu * v(o.owned_age_years)
    residual = -n * o.hardware_usd_per_gpu * v(o.owned_age_years + a.horizon_months / 12) * end
    power = n * watts * o.pue * o.power_usd_per_kwh * 730 / 1000 * annuity
    maintenance = o.maintenance_fraction_per_year * o.hardware_usd_per_gpu * n / 12 * annuity
    staff = (o.staff_usd_per_month + o.staff_usd_per_node_per_month * nodes) * annuity
    space = o.space_usd_per_node_per_month * nodes * annuity
    return kept + residual + power + maintenance + staff + space


def test_the_work_fits_on_far_fewer_gpus() -> None:
    cfg = load_config()
    samples, procs = _genomics()
    r = analyze_rollups(rollups(samples, procs), cfg)
    c = r.consolidation
    assert c is not None
    # by hand: 8 × 0.24 = 1.92 GPUs of work at most; at 70 % it fits on ceil(1.92 / 0.7) = 3 GPUs
    assert c.peak_in_use_gpus == pytest.approx(1.92, rel=1e-6)
    assert c.fits_on_gpus == 3 and c.target_utilization == 0.7
    assert c.plan_usd == pytest.approx(_own(cfg, 3, 16, 300.0), rel=1e-9)
    by_id = {s.id: s for s in r.costs.scenarios}
    assert c.recommended_usd == pytest.approx(by_id[r.decision.recommended_scenario].total.value, rel=1e-12)
    assert c.saving_usd == pytest.approx(c.recommended_usd - c.plan_usd, rel=1e-12) and c.saving_usd > 0
    assert by_id["stay-as-is"].total.value == pytest.approx(_own(cfg, 16, 16, 300.0), rel=1e-9)
    # how: the idle allocations, naming their holder, and sharing GPUs
    assert c.top_idle_holders[0].startswith("bob (")
    assert any("release idle holds" in h and "bob" in h for h in c.how)
    assert any("MIG" in h for h in c.how)
    # never mixed into "cheapest": the cheapest is a measured plan, not a change of behaviour
    assert not by_id[r.costs.cheapest].what_if and r.decision.recommended_scenario == r.costs.cheapest
    # named beside the buy/rent answer
    verdict = build_report(r, version="t").verdict
    lever = next(f for f in verdict.figures if f.label.startswith("Biggest lever"))
    assert "owns 3 GPUs" in lever.text and "bob" in lever.source


def test_the_lever_says_what_it_changes_in_the_recommended_plans_terms() -> None:
    """The demo (128 GPUs × 90 days) read "the work fits on 109 GPUs: $555k less than the recommended plan"
    beside a recommendation that keeps 88, and "own enough GPUs for the packed peak (9)" sat beside "the work
    fits on 10" and a hybrid-if-packed owning 7. The lever says what the recommended plan would own and rent
    instead; the packed work's GPU count is in its source, labelled as the packed work's."""
    cfg = load_config()
    samples, procs = _genomics()
    r = analyze_rollups(rollups(samples, procs), cfg)
    c = r.consolidation
    assert c is not None
    rec = next(s for s in r.costs.scenarios if s.id == r.decision.recommended_scenario)
    assert c.recommended_owned_gpus == rec.owned_gpus
    assert c.recommended_cloud_gpu_hours == pytest.approx(rec.cloud_gpu_hours)
    lever = next(f for f in build_report(r, version="t").verdict.figures if f.label.startswith("Biggest lever"))
    assert f"the recommended plan owns {c.owned_gpus:,} GPUs instead of {rec.owned_gpus:,}" in lever.text
    assert "fits on" not in lever.text and f"fits on {c.fits_on_gpus:,} GPUs" in lever.source
    packed = {s.id: s for s in r.costs.scenarios}["all-on-prem-if-packed"]
    assert "packed peak" not in packed.description and f"the work fits on {c.fits_on_gpus:,}" in packed.description


def _bursty() -> tuple[list[dict], list[dict]]:  # type: ignore[type-arg]
    """16 GPUs held all the time for two days; 8 of them at 90 % SM activity on the first day, idle after."""
    samples, procs = [], []
    for g in range(16):
        rows = gpu_rows(f"n{g // 8}", f"G-{g}", 48 * 12, interval_s=300,
                        sm=(lambda i: 0.9 if i < 24 * 12 else 0.0) if g < 8 else 0.0, procs=1)
        samples += rows
        procs += proc_rows(f"n{g // 8}", f"G-{g}", ends(rows), user="alice" if g < 8 else "bob")
    return samples, procs


def test_the_lever_and_the_what_if_plans_are_one_packed_fleet() -> None:
    """rv1 (issue 26.4): the lever packed the work bucket by bucket ("fits on 11") while the "if behaviour
    changes" plans scaled held demand by one factor (S ÷ target ÷ R: "own enough GPUs for the packed peak (6)"),
    and the consolidated plan and its what-if were sized and priced apart ($489,910 against $489,900). One packed
    demand: the work fits on what all-on-prem-if-packed owns, and the consolidated plan is the what-if in the
    recommended plan's shape, to the dollar."""
    cfg = load_config()
    samples, procs = _bursty()
    r = analyze_rollups(rollups(samples, procs), cfg)
    c = r.consolidation
    assert c is not None
    by_id = {s.id: s for s in r.costs.scenarios}
    # by hand: 8 GPUs × 0.9 on the first day packed to 70 % is 10.3 GPUs at once: 11, never 16 × one factor
    assert c.peak_in_use_gpus == pytest.approx(7.2, rel=1e-6)
    assert c.fits_on_gpus == 11 == by_id["all-on-prem-if-packed"].owned_gpus
    rec = by_id[r.decision.recommended_scenario]
    shape = ("hybrid-if-packed" if rec.owned_gpus and rec.cloud_gpu_hours else
             "all-cloud-if-packed" if rec.cloud_gpu_hours else "all-on-prem-if-packed")
    assert c.owned_gpus == by_id[shape].owned_gpus
    assert c.plan_usd == by_id[shape].total.value
    assert c.cloud_gpu_hours == pytest.approx(by_id[shape].cloud_gpu_hours if rec.cloud_gpu_hours else 0.0)


def test_the_what_ifs_own_packing_target_is_gone_with_a_clear_message(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """cloud.right_size_target_efficiency packed the what-if plans to a target of their own beside the lever's
    analysis.consolidation_target: two packed fleets. A config that still sets it is told which key replaced it."""
    from gpuaudit.errors import GpuauditError

    path = tmp_path / "c.toml"
    path.write_text("[cloud]\nright_size_target_efficiency = 0.6\n")
    with pytest.raises(GpuauditError, match=r"right_size_target_efficiency.*removed.*analysis\.consolidation_target"):
        load_config(path)
