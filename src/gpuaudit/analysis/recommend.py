"""One consistent recommendation: the decision tree checked against the cost model, with how sure we are.

The tree reads real utilization (the article's rule of thumb); the cost model prices this fleet's demand with
your prices. The recommendation is the cost model's cheapest allowed scenario (data residency removes every
scenario that rents); when the tree lands elsewhere, or cannot tell because real utilization is only bounded,
the headline says so plainly and the confidence is low. Confidence is a typed result with every reason that
lowered it, never a guess: a recommendation that can be wrong must not read "high".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuaudit.analysis.cloudmix import spot_caveat
from gpuaudit.analysis.decision import Rule
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.quality import short_trial_text
from gpuaudit.analysis.result import (
    Branch,
    Confidence,
    ConfidenceLevel,
    Decision,
    DecisionInputs,
    Deployment,
    RuleFired,
    Trial,
)
from gpuaudit.util import fmt

_LEVELS = ("low", "medium", "high")
# What the reader should do, per rule (the rule id and its figures are shown next to the headline).
_ADVICE = {
    "data-residency": "on-prem (data residency forbids the cloud)",
    "low-utilization": "move to the cloud",
    "mid-utilization": "go hybrid — own the steady base, burst the rest to the cloud",
    "high-utilization": "on-prem may pay — check egress costs first",
    "high-utilization-latency": "on-prem (latency-sensitive)",
}
_BRANCH_WORDS = {"cloud": "the cloud", "hybrid": "hybrid", "on-prem": "on-prem"}


def _usd(x: float) -> str:
    return f"${abs(x):,.0f}"


def _scenario_branch(s: CostScenario, current: Deployment) -> str:
    """The branch a scenario carries out."""
    if s.id.startswith("all-cloud"):
        return Branch.CLOUD.value
    if s.id.startswith("all-on-prem"):
        return Branch.ON_PREM.value
    if s.id.startswith("hybrid"):
        return Branch.HYBRID.value if s.cloud_gpu_hours > 1e-9 else Branch.ON_PREM.value
    if current is Deployment.CLOUD:
        return Branch.CLOUD.value
    return Branch.HYBRID.value if s.cloud_gpu_hours > 1e-9 else Branch.ON_PREM.value


def _carries(s: CostScenario, current: Deployment) -> str:
    """The branch a scenario is the plan for, whatever it ends up renting (the tree's point of comparison)."""
    if s.id == "stay-as-is":
        return current.value
    return s.id.removeprefix("all-").removesuffix("-if-packed") if s.id != "all-cloud" else Branch.CLOUD.value


@dataclass(frozen=True)
class Evidence:
    """What the confidence level weighs besides the tree and the costs."""

    confidence: Confidence
    coverage: float
    sensitivity_flips: Sequence[str]  # inputs whose ± change moves the cheapest scenario: label (config key)
    sensitivity_fraction: float
    real_low: float
    real_high: float
    upper_bound: bool
    horizon_months: int
    model_caveats: Sequence[str] = ()  # what the cost model leaves out for these settings
    growth_flip: tuple[float, str] | None = None  # lowest demand growth/year at which another plan is cheapest
    tie_fraction: float = 0.0  # decision.tie_fraction
    spread_usd: float = 0.0  # half the width of the day-resample interval of staying − the cheapest (0: none)
    provisional_below_days: float = 90.0  # decision.provisional_below_days


def _gpus(n: float) -> str:
    n = round(n, 1)
    text = f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"
    return f"{text} GPU" + ("" if n == 1 else "s")


def action(s: CostScenario, owned_today: int, months: int, current: Deployment = Deployment.ON_PREM) -> str:
    """The plan in counts, as a CFO would say it: what to sell, keep or buy, and what to reserve or rent (staying
    in the cloud rents the instances that run, not only what jobs hold)."""
    n, e = s.owned_gpus, owned_today
    parts = []
    if e > 0 and n < e:
        parts.append(f"sell {e - n:,} of your {e:,} GPUs" if n > 0 else f"sell all {e:,} of your GPUs")
    elif e > 0 and n > e:
        parts.append(f"keep your {e:,} GPUs and buy {n - e:,} more")
    elif n > e:
        parts.append(f"buy {_gpus(n)}")
    elif n > 0:
        parts.append(f"keep your {e:,} GPUs")
    hours = s.cloud_gpu_hours / (730.0 * months) if months else 0.0  # GPUs rented on average
    if hours > 1e-9:
        rest = ("the instances that run today" if s.id == "stay-as-is" and current is Deployment.CLOUD
                else "the rest" if n > 0 else "what jobs hold")
        if s.reserved_gpus > 1e-9:
            parts.append(f"reserve {_gpus(s.reserved_gpus)} around the clock and rent {rest} flexibly (on average "
                         f"{_gpus(hours)} rented)")
        else:
            parts.append(f"rent {rest} flexibly (on average {_gpus(hours)})")
    elif n > 0 and not parts:
        parts.append(f"own {_gpus(n)}")
    return ", ".join(parts)


def keeps_what_you_have(scenarios: Sequence[CostScenario], cheapest: str, tie_fraction: float, spread_usd: float,
                        residency: bool = False) -> tuple[bool, float]:
    """(whether the recommendation keeps what you have, the tie tolerance $): a plan that beats staying as is by
    no more than the model's own uncertainty (max($1, tie_fraction × staying's total, the day-resample spread))
    is a tie, and a tie keeps what you have."""
    by_id = {s.id: s for s in scenarios}
    stay, best = by_id.get("stay-as-is"), by_id[cheapest]
    if stay is None:
        return False, 0.0
    tie_usd = max(1.0, tie_fraction * abs(stay.total.value or 0.0), spread_usd)
    saving = float((stay.total.value or 0.0) - (best.total.value or 0.0))
    return (stay.allowed and best.id != "stay-as-is" and saving <= tie_usd and not residency), tie_usd


def recommend(rule: Rule, fired: RuleFired, inputs: DecisionInputs, trial: Trial, scenarios: Sequence[CostScenario],
              cheapest: str, possible: Sequence[Branch], ev: Evidence, owned_today: int = 0) -> Decision:
    by_id = {s.id: s for s in scenarios}
    best = by_id[cheapest]
    current = inputs.current
    cost_branch = _scenario_branch(best, current)
    tree = [b.value for b in possible]
    determined = len(tree) == 1
    residency = fired.id == "data-residency"

    stay = by_id.get("stay-as-is")
    saving = float((stay.total.value or 0.0) - (best.total.value or 0.0)) if stay else 0.0
    tie_keep, tie_usd = keeps_what_you_have(scenarios, cheapest, ev.tie_fraction, ev.spread_usd, residency)
    if tie_keep and stay is not None:
        runner_up = best
        best = stay
        cost_branch = _scenario_branch(best, current)
    tree_pool = [s for s in scenarios if s.allowed and not s.what_if and _carries(s, current) in tree]
    tree_best = min(tree_pool, key=lambda s: s.total.value or 0.0) if tree_pool else best
    versus_tree = float((tree_best.total.value or 0.0) - (best.total.value or 0.0))
    # The rule's own plan costing the same as the cheapest (a hybrid whose best split owns the whole peak is
    # staying on-prem) is agreement, not a "$0 cheaper" disagreement.
    tie = determined and tree_pool != [] and versus_tree <= max(1.0, 1e-9 * abs(best.total.value or 0.0))
    # The rule's branch with no allowed plan (latency-sensitive work the rule would rent): the constraint decides,
    # as data residency does; there is nothing to disagree with.
    forbidden = determined and not tree_pool and not residency
    agrees = residency or forbidden or (determined and (cost_branch == fired.branch.value or tie))
    recommendation = Branch.ON_PREM.value if residency else cost_branch
    months = ev.horizon_months

    caveats = [rule.caveat] if rule.caveat else []
    caveats.extend(ev.model_caveats)
    share = inputs.latency_sensitive_share
    if share > 0:
        caveats.append(("all work is" if share >= 1 else f"{fmt.share(share)} of demand is") + " latency-sensitive: it "
                       "stays on owned GPUs, and plans that would rent it are not allowed")
    spot = spot_caveat(best.label.lower(), best.priced_mix)
    if spot:
        caveats.append(spot)
    if trial.provisional:
        caveats.append(f"provisional: {short_trial_text(trial.days, ev.provisional_below_days)}; re-run on a "
                       "longer trial")
    if ev.upper_bound:
        caveats.append(f"real utilization is bounded, not measured: between {fmt.pct(ev.real_low)} and "
                       f"{fmt.pct(ev.real_high)} (duty cycle stood in for SM activity)")

    if tie_keep and stay is not None:
        # Name the plans inside the tolerance and those outside it: "the alternatives are within $4k" beside an
        # all-cloud $979k dearer read as if every plan were.
        others = [x for x in scenarios if x.allowed and not x.what_if and x.id != stay.id]
        stay_usd = stay.total.value or 0.0
        near = [x.label.lower() for x in others if abs((x.total.value or 0.0) - stay_usd) <= tie_usd]
        far = [f"{x.label.lower()} ({_usd(abs((x.total.value or 0.0) - stay_usd))} "
               f"{'more' if (x.total.value or 0.0) > stay_usd else 'less'})"
               for x in others if abs((x.total.value or 0.0) - stay_usd) > tie_usd]
        near_text = " and ".join(near) if near else "no other plan"
        headline = (f"{_utilization_text(inputs, ev)[0].upper()}{_utilization_text(inputs, ev)[1:]}: keep what you "
                    f"have; {near_text} {'is' if len(near) <= 1 else 'are'} within {_usd(tie_usd)} over {months} "
                    f"months (the cheapest, {runner_up.label.lower()}, saves {_usd(saving)}: inside the cost "
                    "model's uncertainty)" + (f"; not within it: {', '.join(far)}." if far else "."))
    else:
        headline = _headline(fired, inputs, best, stay, tree, tree_best, saving, versus_tree, ev, months,
                             residency, agrees, tie and cost_branch != fired.branch.value, forbidden)
    renting = any(s.id == "all-cloud" and s.allowed for s in scenarios)
    level = _confidence(tree, determined, agrees, cost_branch, residency, trial, ev, fired, renting)
    return Decision(
        branch=fired.branch, rule=fired, inputs=inputs, caveats=tuple(caveats), provisional=trial.provisional,
        reevaluate_on=trial.reevaluate_on, cheapest_scenario=cheapest, agrees_with_costs=agrees, headline=headline,
        possible_branches=tuple(tree), determined=determined, cost_branch=cost_branch,
        recommendation=recommendation, saving_usd=saving, versus_tree_usd=versus_tree, confidence=level,
        recommended_scenario=best.id, tie=tie_keep, tie_usd=tie_usd,
        action=action(best, owned_today, months, current),
    )


def _advice(fired: RuleFired, current: Deployment) -> str:
    """What the rule says, for where the fleet runs today: a cloud fleet is never told to move to the cloud."""
    text = _ADVICE.get(fired.id, fired.branch.value)
    if current is Deployment.CLOUD and fired.id == "low-utilization":
        return "stay in the cloud"
    return text


def _utilization_text(inputs: DecisionInputs, ev: Evidence) -> str:
    if not ev.upper_bound:
        return f"real utilization is {fmt.pct(inputs.real_utilization)}"
    return (f"real utilization is between {fmt.pct(ev.real_low)} and {fmt.pct(ev.real_high)} (SM activity was not "
            "measured everywhere: duty cycle gives only an upper bound)")


def constraint_text(inputs: DecisionInputs) -> str:
    """What rules renting out, in words ("" when nothing does)."""
    share = inputs.latency_sensitive_share
    if inputs.data_residency:
        return "data residency forbids renting"
    if share >= 1:
        return "all work is latency-sensitive and must run on owned GPUs"
    if share > 0:
        return f"{fmt.share(share)} of demand is latency-sensitive and must run on owned GPUs"
    return ""


def _headline(fired: RuleFired, inputs: DecisionInputs, best: CostScenario, stay: CostScenario | None, tree: list[str],
              tree_best: CostScenario, saving: float, versus_tree: float, ev: Evidence, months: int,
              residency: bool, agrees: bool, same_cost: bool = False, forbidden: bool = False) -> str:
    util = _utilization_text(inputs, ev)
    at_prices = f"at your prices {best.label.lower()}"
    ruled_out = ""  # staying as is ruled out: said, never left for the cost table to explain
    if stay is not None and best.id != "stay-as-is":
        vs_stay = (f"{_usd(saving)} less than staying as is" if saving >= 0
                   else f"{_usd(saving)} more than staying as is")
        costs = f"{at_prices} is the cheapest option, {vs_stay} over {months} months"
        if not stay.allowed and not residency:
            # the constraint is named once: the forbidden branch's sentence names it already
            ruled_out = f"staying as is is not allowed ({constraint_text(inputs)})"
            costs = (f"{at_prices} is the cheapest allowed option, {vs_stay} over {months} months" if forbidden
                     else f"{ruled_out}: {at_prices} is the cheapest allowed option, {vs_stay} over {months} months")
    else:
        costs = f"at your prices staying as is is the cheapest option over {months} months"
    if residency:
        return f"Data residency forbids the cloud: on-prem; {costs.replace('option', 'option that rents nothing')}."
    if forbidden:
        return (f"{util[0].upper()}{util[1:]}: the utilization rule says {_advice(fired, inputs.current)}, but "
                f"{constraint_text(inputs)}, which rules out the plans it points to; {costs}.")
    if len(tree) > 1:
        allowed = " or ".join(_BRANCH_WORDS[b] for b in tree)
        return (f"{util[0].upper()}{util[1:]}: the utilization rule allows {allowed}; {costs}. Measure SM activity "
                "(DCGM profiling metrics or NVML GPM) to settle the rule.")
    if same_cost:  # the rule's plan is the cheapest, but it turns out to be another branch
        plan = (f"the best {tree_best.label.lower()} plan rents nothing and owns the whole peak "
                f"({tree_best.owned_gpus:,} GPUs)" if tree_best.owned_gpus and tree_best.cloud_gpu_hours <= 1e-9
                else f"the rule's best plan ({tree_best.label.lower()}) comes out as "
                     f"{_BRANCH_WORDS[_scenario_branch(tree_best, inputs.current)]}")
        return (f"{util[0].upper()}{util[1:]}: the utilization rule says {_advice(fired, inputs.current)}; "
                f"at your prices {plan}: the same as {best.label.lower()}, {_usd(best.total.value or 0.0)} over "
                f"{months} months" + (f"; {ruled_out}: {vs_stay}." if ruled_out else "."))
    if agrees:
        return f"{util[0].upper()}{util[1:]}: {_advice(fired, inputs.current)}; {costs}."
    return (f"The utilization rule says {_advice(fired, inputs.current)} ({util}), but {at_prices} is "
            f"{_usd(versus_tree)} cheaper over {months} months than {tree_best.label.lower()}: your prices point to "
            f"{_BRANCH_WORDS[_scenario_branch(best, inputs.current)]}.")


def _confidence(tree: list[str], determined: bool, agrees: bool, cost_branch: str, residency: bool, trial: Trial,
                ev: Evidence, fired: RuleFired, renting_allowed: bool = True) -> ConfidenceLevel:
    level = 2
    reasons: list[str] = []

    def cap(to: int, why: str) -> None:
        nonlocal level
        level = min(level, to)
        reasons.append(why)

    c = ev.confidence
    if c.too_few_days:
        cap(0, f"the trial has data on {fmt.count(c.days, 'UTC day')}, fewer than the {c.min_days} a day-block "
               "bootstrap needs (analysis.bootstrap_min_days: a week, so that the weekly cycle is in every "
               "resample): no interval is claimed")
    elif not c.resamples:
        cap(1, "no day-resamples were drawn (analysis.bootstrap_resamples = 0): how much the answer moves with "
               "the days observed was not measured")
    if not residency:
        if not determined:
            cap(0, f"real utilization is only bounded ({fmt.pct(ev.real_low)}–{fmt.pct(ev.real_high)}): the rule "
                   "could say " + " or ".join(tree))
        elif not agrees:
            cap(0, f"the utilization rule says {fired.branch.value}, the cost model {cost_branch}")
        if c.resamples and c.flip_share >= 0.2:
            cap(0, f"the rule's branch changes in {c.flip_share:.0%} of day-resamples")
        elif c.resamples and c.flip_share >= 0.05:
            cap(1, f"the rule's branch changes in {c.flip_share:.0%} of day-resamples")
    if c.resamples and c.cheapest_flip_share >= 0.2:
        cap(0, f"the cheapest scenario changes in {c.cheapest_flip_share:.0%} of day-resamples")
    elif c.resamples and c.cheapest_flip_share >= 0.05:
        cap(1, f"the cheapest scenario changes in {c.cheapest_flip_share:.0%} of day-resamples")
    d = c.cost_difference_usd
    # the interval of a plan nobody may choose (renting all, under residency or latency) says nothing here
    if renting_allowed and c.resamples and d.low is not None and d.high is not None and d.low < 0 < d.high:
        cap(1, f"the {c.level:.0%} interval of all-cloud − owning ({_signed(d.low)} to {_signed(d.high)}) "
               "includes zero")
    if trial.provisional:
        cap(1, short_trial_text(trial.days, ev.provisional_below_days))
    if ev.sensitivity_flips:
        flips = ev.sensitivity_flips
        shown = flips[0] if len(flips) == 1 else "any one of " + ", ".join(flips[:-1]) + " or " + flips[-1]
        cap(1, f"±{ev.sensitivity_fraction:.0%} on {shown} changes the cheapest scenario")
    if ev.growth_flip is not None:
        g, other = ev.growth_flip
        if g <= 0.25 + 1e-9:  # a growth many teams plan for: the answer rests on demand staying flat
            cap(1, f"with demand growing {g:.0%} a year the cheapest scenario becomes {other}")
    if ev.coverage < 0.9:
        cap(1, f"coverage is {ev.coverage:.0%}: unreported GPU time was assumed to look like the rest")
    return ConfidenceLevel(_LEVELS[level], tuple(reasons))


def _signed(x: float) -> str:
    return f"−${-x:,.0f}" if x < 0 else f"${x:,.0f}"
