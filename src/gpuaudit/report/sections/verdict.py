"""The verdict at the top of the report: the headline, the rule, the confidence and the key figures."""

from __future__ import annotations

from typing import Any

from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.columns import TornadoColumns
from gpuaudit.analysis.confidence import no_interval_reason
from gpuaudit.analysis.quality import short_trial_text
from gpuaudit.analysis.result import AnalysisResult, Condition, Consolidation
from gpuaudit.report.model import KeyFigure, Verdict
from gpuaudit.report.sections.formatting import (
    headline_tiles,
    scenario,
)
from gpuaudit.util import fmt

_HEADLINES = {
    ("cloud", "cloud"): "Stay in the cloud",
    ("cloud", "on-prem"): "Move to the cloud",
    ("on-prem", "on-prem"): "Keep the GPUs on-prem",
    ("on-prem", "cloud"): "Bring the GPUs on-prem",
}


def build(r: AnalysisResult) -> Verdict:
    d = r.decision
    rec = d.recommendation
    current = d.inputs.current.value
    rule_branch = d.branch.value
    if d.recommended_scenario == "stay-as-is" and rec == "hybrid":
        headline = "Keep what you have"  # owning part and renting the rest is already a hybrid: no move to make
    else:
        headline = "Go hybrid" if rec == "hybrid" else _HEADLINES.get((rec, current), rec)
    if d.action:  # the plan in counts: what to sell, keep, buy, reserve and rent
        headline += f": {d.action}"
    elif rec == "hybrid":
        headline += f": own {r.hybrid.n_owning:,} GPUs, burst the rest to the cloud"
    if not d.determined:
        headline += " (the utilization rule cannot tell: measure SM activity)"
    elif not d.agrees_with_costs:
        headline += f" — your prices say so; the utilization rule says {rule_branch}"
    conds = "; ".join(_condition(c) for c in d.rule.conditions)
    description = d.rule.description.rstrip(". ")
    rule = f"{description} ({conds})" if conds else description
    if not d.determined:
        rule += ". Possible branches while SM activity is unmeasured: " + " or ".join(d.possible_branches)
    caveats = [c for c in d.caveats if not c.lower().startswith("provisional")]  # said on its own line
    if caveats:
        rule += ". Caveats: " + "; ".join(caveats)
    c = r.confidence
    conf = d.confidence
    what = "the upper bound of real utilization" if c.real_is_upper_bound else "real utilization"
    if c.resamples:
        confidence = (
            f"{conf.level} — {what} {fmt.pct(c.real_utilization.low)} to {fmt.pct(c.real_utilization.high)} "
            f"({c.level:.0%} interval); the rule's branch changes in {c.flip_share:.0%} and the cheapest scenario in "
            f"{c.cheapest_flip_share:.0%} of {c.resamples:,} resamples of the {c.days} observed days"
        )
    else:
        confidence = (
            f"{conf.level} — {what} {fmt.pct(c.real_utilization.point)}; no day-resamples "
            f"({no_interval_reason(c)}), no interval"
        )
    if conf.reasons:
        confidence += ". Not higher because: " + "; ".join(conf.reasons)
    figs = [*headline_tiles(r, hl.REAL, hl.BELIEVED, hl.PHANTOM_GAP, emphasis=(hl.REAL,)), _cheapest_figure(r)]
    lever = _lever_figure(r)
    if lever is not None:
        figs.append(lever)
    below = {a.key: a.value for a in r.assumptions}.get("decision.provisional_below_days", 90.0)
    reason = f"{short_trial_text(r.trial.days, float(below))}; collect more data and re-run"
    return Verdict(
        branch=rec,
        headline=headline,
        why=d.headline,
        rule=rule,
        confidence=confidence,
        provisional=bool(d.provisional),
        provisional_reason=reason,
        reevaluate_on=d.reevaluate_on.isoformat(),
        figures=tuple(figs),
        cost_note=_cost_note(r),
        decides=_decides(r),
    )


def _lever_figure(r: AnalysisResult) -> KeyFigure | None:
    """The consolidation lever beside the buy/rent answer: how many GPUs the work fits on, what that saves and
    how (never part of "cheapest": it changes how GPUs are held)."""
    c = r.consolidation
    # a saving inside the cost model's own uncertainty (the tie tolerance) is no lever
    if c is None or c.saving_usd <= max(r.decision.tie_usd, 0.0):
        return None
    how = "; ".join(c.how) if c.how else "pack the work onto fewer GPUs"
    return KeyFigure(
        "Biggest lever: consolidation (not in “cheapest”)",
        f"packed, the recommended plan {_lever_change(c)}: {fmt.money(c.saving_usd)} less",
        f"the work packed at {c.target_utilization:.0%} SM activity fits on {c.fits_on_gpus:,} GPUs (the peak "
        f"over buckets of SM-weighted demand ÷ {c.target_utilization:.0%} target, at most the GPUs held in the "
        f"bucket, rounded up; SM-weighted demand peaks at {c.peak_in_use_gpus:,.1f} GPUs); the recommended "
        f"plan on the packed work: {c.plan}, {fmt.money(c.plan_usd)} against {fmt.money(c.recommended_usd)}. "
        f"How: {how}",
    )


def _lever_change(c: Consolidation) -> str:
    """What consolidation changes in the recommended plan, in its own terms: the GPUs it owns and the GPU-hours
    it rents (the packed work's GPU count is the tile's source, labelled as such)."""
    parts = []
    if c.owned_gpus != c.recommended_owned_gpus:
        parts.append(f"owns {c.owned_gpus:,} GPUs instead of {c.recommended_owned_gpus:,}")
    fewer = c.recommended_cloud_gpu_hours - c.cloud_gpu_hours
    if abs(fewer) >= 0.5:
        parts.append(f"rents {fmt.num(abs(fewer))} {'fewer' if fewer > 0 else 'more'} GPU-hours")
    return " and ".join(parts) if parts else "keeps its GPUs and uses them fully"


def _cost_note(r: AnalysisResult) -> str:
    d = r.decision
    if d.agrees_with_costs:
        return ""
    best = scenario(r, r.costs.cheapest)
    name = best.label if best else r.costs.cheapest
    if not d.determined:
        return (
            f"The utilization rule could land on {' or '.join(d.possible_branches)}: real utilization is only "
            f"bounded. The cost model, which bills held hours (measured), finds {name} cheapest. See section 5."
        )
    return (
        f"The utilization rule says {d.branch.value}; the cost "
        f"model finds {name} cheaper by {fmt.money(d.versus_tree_usd)} over {r.costs.horizon_months} months "
        "with your prices. The recommendation follows the prices; check them in Method and assumptions."
    )


def _condition(c: Condition) -> str:
    def show(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float) and c.fact.endswith(("utilization", "share")):
            return fmt.pct(v)
        if isinstance(v, float):
            return f"{v:,.4g}"
        return str(v)

    return f"{c.fact.replace('_', ' ')} = {show(c.actual)} {c.op} {show(c.threshold)}"


def _cheapest_figure(r: AnalysisResult) -> KeyFigure:
    best = scenario(r, r.costs.cheapest)
    stay = scenario(r, "stay-as-is")
    months = r.costs.horizon_months
    if best is None:
        return KeyFigure("Cheapest scenario", r.costs.cheapest, "cost model")
    if stay is not None and stay.id != best.id and stay.total.value is not None and best.total.value is not None:
        saving = r.decision.saving_usd  # stay-as-is minus the cheapest
        return KeyFigure(
            label=f"Cheapest over {months} months: {best.label}",
            text=f"saves {fmt.money(saving)}" if saving >= 0 else f"costs {fmt.money(-saving)} more",
            source=f"vs today: {stay.label} {fmt.money(stay.total.value)} − {best.label} {fmt.money(best.total.value)}"
            + (f"; its cloud GPU-hours are {best.priced_mix.text}" if best.priced_mix else ""),
            emphasis=True,
        )
    return KeyFigure(f"Cheapest over {months} months: {best.label}", fmt.money(best.total.value), best.total.formula)


_STAFF_KEYS = ("on_prem.staff_usd_per_month", "on_prem.staff_usd_per_node_per_month")


def _decides(r: AnalysisResult) -> tuple[str, ...]:
    """What decides this: every input that, moved ±fraction on its own, changes the cheapest plan (in full, with
    its config key and what becomes cheapest), then staff on its own line (the largest fixed cost of owning)."""
    s, tc = r.sensitivity, TornadoColumns
    frac = f"{s.fraction:.0%}"

    def plan(sid: Any) -> str:
        found = scenario(r, str(sid))
        return (found.label if found else str(sid)).lower()

    lines = []
    for row in s.tornado.rows:
        if not row.get(tc.CHANGES_CHEAPEST) or row.get(tc.KEY) in _STAFF_KEYS:
            continue
        lines.append(
            f"{row[tc.PARAMETER]} ({row[tc.KEY]}), {_value(row.get(tc.BASE_VALUE))}: at "
            f"{_value(row.get(tc.LOW_VALUE))} (−{frac}) the cheapest plan is {plan(row.get(tc.CHEAPEST_LOW))}, at "
            f"{_value(row.get(tc.HIGH_VALUE))} (+{frac}) {plan(row.get(tc.CHEAPEST_HIGH))}"
            + (f" ({row[tc.LIMIT]})" if row.get(tc.LIMIT) else "")
        )
    staff_flips = any(row.get(tc.CHANGES_CHEAPEST) for row in s.tornado.rows if row.get(tc.KEY) in _STAFF_KEYS)
    if not lines:
        lines.append(
            f"No {'input other than staff' if staff_flips else 'single input'}, moved ±{frac} on its own, "
            "changes the cheapest plan (section 6, Sensitivity)"
        )
    staff = _staff_line(r, frac, staff_flips)
    if staff:
        lines.append(staff)
    return tuple(lines)


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.6g}"
    return str(v)


def _staff_line(r: AnalysisResult, frac: str, flips: bool) -> str:
    """Staff as its own line: the configured base and per-node figures, their share of staying as is and of the
    recommended plan, what staying as is would cost with no staff at all, and whether ±fraction on them changes
    the cheapest plan."""
    values = {a.key: a.value for a in r.assumptions}
    if _STAFF_KEYS[0] not in values:
        return ""
    base, per_node = float(values[_STAFF_KEYS[0]]), float(values.get(_STAFF_KEYS[1], 0.0))
    stay = scenario(r, "stay-as-is")
    rec = scenario(r, r.decision.recommended_scenario or r.costs.cheapest)
    text = (
        f"Staff: {fmt.money(base, exact=True)}/month base ({_STAFF_KEYS[0]}: one full-time engineer, loaded)"
        + (f" + {fmt.money(per_node, exact=True)} per node per month ({_STAFF_KEYS[1]})" if per_node else "")
        + f", paid while anything is owned, over {r.costs.horizon_months} months:"
    )
    shares = []
    # the recommended plan once: when it is staying as is, the first line already says it
    plans = ((stay, "staying as is"),) + (((rec, rec.label.lower()),) if rec is not None and rec is not stay else ())
    for plan, name in plans:
        if plan is None or not plan.total.value:
            continue
        usd = plan.components.get("staff", 0.0)
        shares.append(
            f"{fmt.money(usd)}, {round(usd / plan.total.value * 100):.0f} % of {name} ({fmt.money(plan.total.value)})"
            if usd
            else f"none in {name} (it owns nothing)"
        )
    text += " " + "; ".join(shares)
    if stay is not None and rec is not None and rec is not stay and stay.total.value and rec.total.value:
        without = stay.total.value - stay.components.get("staff", 0.0)
        other = rec.total.value - rec.components.get("staff", 0.0)
        text += (
            f"; with no staff cost staying as is would cost {fmt.money(without)} against {rec.label.lower()}'s "
            f"{fmt.money(other)} ({'cheaper' if without < other else 'still dearer'})"
        )
    return text + f"; ±{frac} on it {'changes' if flips else 'does not change'} the cheapest plan"
