"""A short plain-text summary of an AnalysisResult for `gpuaudit analyze` (the report has the rest)."""

from __future__ import annotations

from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.confidence import no_interval_reason
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.util import fmt
from gpuaudit.util.textsafe import printable

_pct, _usd = fmt.summary_pct, fmt.summary_usd  # the one vocabulary, as `analyze`'s summary spells it


def _ci(low: float | None, high: float | None, level: float, fmt: object = _pct) -> str:
    if low is None or high is None:
        return "(no day-resamples: no interval)"
    return f"({level:.0%} CI {fmt(low)}–{fmt(high)})"  # type: ignore[operator]


def _ledger_lines(r: AnalysisResult) -> list[str]:
    """The four-state ledger in one line, and the scheduler's view when allocations were imported."""
    led = r.ledger
    if led is None:
        return []
    w = led.observed_gpu_hours.value or 0.0
    parts = ", ".join(f"{name} {_pct((getattr(led, key).value or 0.0) / w if w else None)}" for key, name in (
        ("productive", "productive"), ("held_idle", "held idle"), ("allocated_no_process", "allocated no process"),
        ("unallocated", "unallocated")))
    out = [f"ledger ({led.basis}): {parts}"]
    return out


def _headline_lines(r: AnalysisResult) -> list[str]:
    """The headline figures with their names and texts as every output shows them, the intervals beside."""
    ci = r.confidence
    intervals = {hl.REAL: None if r.utilization.real_is_upper_bound else ci.real_utilization,
                 hl.HELD_HOUR: ci.runtime_utilization,
                 hl.BELIEVED: None if hl.scheduled(r) else ci.runtime_utilization}
    out = []
    for h in hl.headline_figures(r):
        iv = intervals.get(h.key)
        out.append(f"{h.name}: {h.text}" + (f"  {_ci(iv.low, iv.high, ci.level)}" if iv is not None else ""))
    return out


def _model_lines(r: AnalysisResult) -> list[str]:
    """The GPU models found: name as reported -> key, GPUs, where the price came from."""
    return [f"model {m.model:<16} {m.gpus:>5} GPUs  ← {', '.join(m.gpu_names)}; "
            f"${m.usd_per_gpu_hour:.2f}/GPU-h, hardware ${m.hardware_usd_per_gpu:,.0f}"
            + ("" if m.known else " (not in the catalogue)")
            + (" — assumed: fleet default" if m.assumed else f" — {m.instance}")
            for m in r.models]


def _pool_lines(r: AnalysisResult) -> list[str]:
    """Per model, in a fleet of several: its utilization, its own tree branch, and what the recommended plan
    does with it at the model's own prices."""
    if len(r.pools) < 2:
        return []
    out = []
    for p in r.pools:
        plan = next(s for s in p.scenarios if s.id == p.recommendation)
        out.append(f"pool {p.model:<17} {p.gpus:>5} GPUs  held {_pct(p.held_utilization)}  real "
                   f"{_pct(p.real_utilization)}  tree: {p.branch}  plan: {p.action} "
                   f"(${plan.total.value or 0.0:,.0f} at ${p.usd_per_gpu_hour:.2f}/GPU-h on demand, "
                   f"${p.hardware_usd_per_gpu:,.0f} to own)")
    fixed = sum(r.fleet_fixed_usd.values())
    out.append(f"fleet-level fixed costs (counted once, not per model): ${fixed:,.0f} when the plan owns and rents")
    return out


def _right_size_lines(r: AnalysisResult) -> list[str]:
    """Per pool where some held GPU-hours fit a cheaper model: the what-if, with its assumption beside it."""
    out = []
    for p in r.pools:
        rs = p.right_size
        if rs is None or not rs.targets:
            continue
        where = ", ".join(f"{t.gpu_hours:,.1f} h to {t.model} at ${t.usd_per_gpu_hour:.2f}/GPU-h" for t in rs.targets)
        out.append(f"right-size {rs.model} (what-if, never counted as cheapest): {rs.movable_gpu_hours:,.1f} of "
                   f"{rs.held_gpu_hours:,.1f} held GPU-hours fit a cheaper model ({where}): ${rs.usd_today:,.0f} "
                   f"at ${rs.usd_per_gpu_hour:.2f}/GPU-h → ${rs.usd_on_targets:,.0f}, saving ${rs.saving_usd:,.0f} "
                   f"over the trial, {rs.assumption}")
    return out


def _mix(s: CostScenario) -> str:
    """The mix a plan's cloud GPU-hours are priced at, beside its total."""
    return f"  (cloud GPU-hours {s.priced_mix.text})" if s.priced_mix else ""


def summary(r: AnalysisResult) -> str:
    u, d, c, t = r.utilization, r.decision, r.costs, r.trial
    ub = " (upper bound)" if u.real_is_upper_bound else ""
    ci = r.confidence
    be = r.break_even
    heads = hl.by_key(r)
    conf = d.confidence
    lines = [
        f"trial: {t.start:%Y-%m-%d %H:%M} → {t.end:%Y-%m-%d %H:%M} UTC ({fmt.span(t.days)}), {t.gpus} GPUs on "
        f"{t.hosts} hosts, {t.samples:,} samples" + (" — PROVISIONAL (< 90 days)" if t.provisional else ""),
        *_model_lines(r),
        *_pool_lines(r),
        *_right_size_lines(r),
        f"observed GPU-hours W      {u.observed_gpu_hours.value:,.1f}",
        f"runtime GPU-hours R       {u.runtime_gpu_hours.value:,.1f}",
        f"real GPU-hours S          {u.real_gpu_hours.value:,.1f}{ub}",
        *_headline_lines(r),
        f"efficiency while held     {_pct(u.efficiency_while_held.value)}{ub}",
        f"never-used GPUs           {int(u.never_used_count.value or 0)}",
        *_ledger_lines(r),
        "",
        f"recommendation: {d.recommendation.upper()} (confidence {conf.level}) — {d.headline}",
        f"  rule {d.rule.id} → {d.branch.value}"
        + ("" if d.determined else f" (could be {' or '.join(d.possible_branches)})") + ": " + "; ".join(
            f"{x.fact} {x.op} {x.threshold} (actual {x.actual})" for x in d.rule.conditions),
        f"  costs: cheapest allowed scenario {d.cheapest_scenario} → {d.cost_branch}",
        *(f"  caveat: {x}" for x in d.caveats),
        *(f"  confidence: {x}" for x in conf.reasons),
        (f"  rule flips in {ci.flip_share:.0%} and the cheapest scenario in {ci.cheapest_flip_share:.0%} of "
         f"{ci.resamples} day-resamples" if ci.resamples else f"  no day-resamples ({no_interval_reason(ci)})")
        + f"; re-evaluate on {d.reevaluate_on}",
        "",
        f"costs, present value over {c.horizon_months} months at {c.discount_rate_per_year:.0%}/year (preset "
        f"{c.preset}; cloud ${c.cloud_flexible_usd_per_gpu_hour.value:.2f}/GPU-h flexible, "
        f"${c.cloud_reserved_usd_per_gpu_hour.value:.2f} reserved; owned ${c.owned_usd_per_gpu_hour.value:.2f}/GPU-h "
        "marginal):",
        *(f"  {s.id:<22} {_usd(s.total.value):>14}{'  ← cheapest' if s.id == c.cheapest else ''}"
          f"{'  (not allowed: rents)' if not s.allowed else ''}{_mix(s)}"
          for s in c.scenarios if not s.what_if),
        "  if behaviour changes (held hours × " f"{c.pack_factor:.2f}; never counted as cheapest):",
        *(f"  {s.id:<22} {_usd(s.total.value):>14}{_mix(s)}" for s in c.scenarios if s.what_if),
        f"all-cloud − cheapest owning: {_usd(ci.cost_difference_usd.point)} "
        + _ci(ci.cost_difference_usd.low, ci.cost_difference_usd.high, ci.level, _usd),
        f"break-even: {heads[hl.BILLED_HOUR].name.lower()} {heads[hl.BILLED_HOUR].text} against u* "
        f"{heads[hl.BREAK_EVEN].text}" + (" (renting is cheaper even with every GPU billed all the time)" if be.never
                                          else "") + f" → {be.verdict}"
        + (" (data residency forbids renting; at these prices renting would cost less)"
           if d.inputs.data_residency and be.cloud_usd < be.own_usd else ""),
        f"hybrid: best N ≥ 1 = {r.hybrid.n_owning} GPUs, N* = {r.hybrid.n_star} (critical fractile "
        f"{r.hybrid.critical_fractile_n}; {'agrees' if r.hybrid.agrees else 'differs'}); owning pays only above "
        + (f"~{r.hybrid.hurdle_gpus.value:,.1f} GPUs held around the clock" if r.hybrid.hurdle_gpus.value is not None
           else "— never at these prices")
        + f"; peak demand {r.hybrid.peak_demand.value:.1f} GPUs",
    ]
    if r.warnings:  # also on stderr as `gpuaudit: warning:` lines (flows.warn): here they stay with the figures
        lines += ["", "Warnings:"]
        lines += [f"  - {w}" for w in r.warnings]
    # Warnings and caveats can quote data (paths, names): no raw control characters on the terminal.
    return "\n".join(printable(line) for line in lines) + "\n"
