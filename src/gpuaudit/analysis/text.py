"""A short plain-text summary of an AnalysisResult for `gpuaudit analyze` (the report has the rest)."""

from __future__ import annotations

from gpuaudit.analysis.result import AnalysisResult


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f} %"


def _usd(x: float | None) -> str:
    return "—" if x is None else f"${x:,.0f}"


def summary(r: AnalysisResult) -> str:
    u, d, c, t = r.utilization, r.decision, r.costs, r.trial
    ub = " (upper bound)" if u.real_is_upper_bound else ""
    ci = r.confidence
    be = "never (renting is cheaper)" if r.break_even.never else _pct(r.break_even.real_utilization.value)
    lines = [
        f"trial: {t.start:%Y-%m-%d %H:%M} → {t.end:%Y-%m-%d %H:%M} UTC ({t.days:.1f} days), {t.gpus} GPUs on "
        f"{t.hosts} hosts, {t.samples:,} samples" + (" — PROVISIONAL (< 90 days)" if t.provisional else ""),
        f"observed GPU-hours W      {u.observed_gpu_hours.value:,.1f}",
        f"runtime GPU-hours R       {u.runtime_gpu_hours.value:,.1f}",
        f"real GPU-hours S          {u.real_gpu_hours.value:,.1f}{ub}",
        f"runtime-hour utilization  {_pct(u.runtime_utilization.value)}  "
        f"(90 % CI {_pct(ci.runtime_utilization.low)}–{_pct(ci.runtime_utilization.high)})",
        f"real utilization          {_pct(u.real_utilization.value)}{ub}  "
        f"(90 % CI {_pct(ci.real_utilization.low)}–{_pct(ci.real_utilization.high)})",
        f"efficiency while held     {_pct(u.efficiency_while_held.value)}",
        f"phantom gap               {_pct(u.phantom_gap.value)}",
        f"idle-held GPU-hours       {u.idle_held_gpu_hours.value:,.1f}",
        f"never-used GPUs           {int(u.never_used_count.value or 0)}",
        "",
        f"decision: {d.branch.value.upper()} — {d.headline}",
        f"  rule {d.rule.id}: " + "; ".join(
            f"{x.fact} {x.op} {x.threshold} (actual {x.actual})" for x in d.rule.conditions),
        *(f"  caveat: {x}" for x in d.caveats),
        f"  flips in {ci.flip_share:.0%} of {ci.resamples} day-resamples; re-evaluate on {d.reevaluate_on}",
        "",
        f"costs over {c.horizon_months} months (preset {c.preset}; cloud "
        f"${c.cloud_effective_usd_per_gpu_hour.value:.2f}/GPU-h effective, owned "
        f"${c.owned_usd_per_gpu_hour.value:.2f}/GPU-h marginal):",
        *(f"  {s.id:<22} {_usd(s.total.value):>14}{'  ← cheapest' if s.id == c.cheapest else ''}"
          for s in c.scenarios),
        f"break-even real utilization: {be}",
        f"hybrid: own N* = {r.hybrid.n_star} GPUs (critical fractile: {r.hybrid.critical_fractile_n}); "
        f"peak demand {r.hybrid.peak_demand.value:.1f} GPUs",
    ]
    if r.warnings:
        lines.append("")
        lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines) + "\n"
