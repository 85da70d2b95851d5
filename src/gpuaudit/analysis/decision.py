"""The decision tree, as rules in typed data (evaluated in order; the first whose conditions all hold
fires). Comparisons are `operator` functions picked by an enum, thresholds are named config values:
nothing is parsed or eval'd.

    1. data residency forbids cloud                  → on-prem (overrides everything)
    2. real utilization <  cloud_below    (30 %)     → cloud
    3. real utilization <= on_prem_above  (70 %)     → hybrid: steady base on-prem, burst to cloud
    4. real utilization >  on_prem_above, latency    → on-prem
    5. real utilization >  on_prem_above, no latency → on-prem may pay: check egress first
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuaudit.analysis.result import Branch, Condition, DecisionInputs, Deployment, RuleFired


class Op(enum.Enum):
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="

    @property
    def fn(self) -> Callable[[Any, Any], bool]:
        return _OPS[self]


_OPS: dict[Op, Callable[[Any, Any], bool]] = {
    Op.LT: operator.lt, Op.LE: operator.le, Op.GT: operator.gt, Op.GE: operator.ge, Op.EQ: operator.eq,
}


class _Fact(enum.StrEnum):
    REAL_UTILIZATION = "real_utilization"
    LATENCY_SENSITIVE = "latency_sensitive"
    DATA_RESIDENCY = "data_residency"


@dataclass(frozen=True)
class _Cond:
    """`fact op threshold`; threshold is a literal or the name of a DecisionInputs threshold."""

    fact: _Fact
    op: Op
    threshold: float | bool | str


@dataclass(frozen=True)
class Rule:
    id: str
    branch: Branch
    conditions: tuple[_Cond, ...]
    description: str
    caveat: str = ""


RULES: tuple[Rule, ...] = (
    Rule("data-residency", Branch.ON_PREM, (_Cond(_Fact.DATA_RESIDENCY, Op.EQ, True),),
         "Data residency forbids the cloud: on-prem, whatever the utilization."),
    Rule("low-utilization", Branch.CLOUD, (_Cond(_Fact.REAL_UTILIZATION, Op.LT, "cloud_below"),),
         "Real utilization below the cloud threshold: the cloud, where a GPU is paid for only while it is rented "
         "(an owned one costs money idle)."),
    Rule("mid-utilization", Branch.HYBRID, (_Cond(_Fact.REAL_UTILIZATION, Op.LE, "on_prem_above"),),
         "Real utilization between the thresholds: hybrid, keep the steady base on-prem and burst to the "
         "cloud."),
    Rule("high-utilization-latency", Branch.ON_PREM,
         (_Cond(_Fact.REAL_UTILIZATION, Op.GT, "on_prem_above"), _Cond(_Fact.LATENCY_SENSITIVE, Op.EQ, True)),
         "High real utilization and latency-sensitive: on-prem.",
         "re-evaluate every six months: spot pricing changes"),
    Rule("high-utilization", Branch.ON_PREM,
         (_Cond(_Fact.REAL_UTILIZATION, Op.GT, "on_prem_above"), _Cond(_Fact.LATENCY_SENSITIVE, Op.EQ, False)),
         "High real utilization, not latency-sensitive: on-prem may pay, but check egress first.",
         "check egress first: on-prem pays only if moving data out of the cloud is not the cheaper fix"),
)

# Utilization is compared at this precision so float32 storage noise (0.3 stored as 0.30000001) never
# moves a value across a threshold.
_DECIMALS = 9


def _facts(inputs: DecisionInputs) -> Mapping[_Fact, Any]:
    return {
        _Fact.REAL_UTILIZATION: round(inputs.real_utilization, _DECIMALS),
        _Fact.LATENCY_SENSITIVE: inputs.latency_sensitive,
        _Fact.DATA_RESIDENCY: inputs.data_residency,
    }


def _threshold(value: float | bool | str, inputs: DecisionInputs) -> float | bool:
    if isinstance(value, str):
        return round(float(getattr(inputs, value)), _DECIMALS)
    return value


def evaluate(inputs: DecisionInputs, rules: tuple[Rule, ...] = RULES) -> tuple[Rule, RuleFired]:
    facts = _facts(inputs)
    for rule in rules:
        evaluated = []
        for c in rule.conditions:
            limit = _threshold(c.threshold, inputs)
            actual = facts[c.fact]
            evaluated.append(Condition(str(c.fact), c.op.value, limit, actual, bool(c.op.fn(actual, limit))))
        if all(e.holds for e in evaluated):
            return rule, RuleFired(rule.id, rule.branch, rule.description, tuple(evaluated))
    raise AssertionError("the decision rules cover every input")  # rules 2-5 partition [0, ∞)


def branch_for(real_utilization: float, inputs: DecisionInputs, rules: tuple[Rule, ...] = RULES) -> Branch:
    """The branch for another real utilization with the same flags (the bootstrap calls this per
    resample, so it skips building the evaluated-conditions record)."""
    facts = {**_facts(inputs), _Fact.REAL_UTILIZATION: round(real_utilization, _DECIMALS)}
    for rule in rules:
        if all(c.op.fn(facts[c.fact], _threshold(c.threshold, inputs)) for c in rule.conditions):
            return rule.branch
    raise AssertionError("the decision rules cover every input")


def branch_at(real_utilization: float, cloud_below: float, on_prem_above: float) -> Branch:
    """The branch for a real utilization between these thresholds, neither latency-sensitive nor bound by data
    residency (the simulator's ground truth for its scenarios)."""
    inputs = DecisionInputs(real_utilization, latency_sensitive=False, data_residency=False, egress_gb_per_week=0.0,
                            current=Deployment.ON_PREM, cloud_below=cloud_below, on_prem_above=on_prem_above)
    return branch_for(real_utilization, inputs)


def branches_between(low: float, high: float, inputs: DecisionInputs, rules: tuple[Rule, ...] = RULES
                     ) -> tuple[Branch, ...]:
    """Every branch the tree can take for a real utilization anywhere in [low, high] (in rule order): the ends,
    and both sides of every threshold inside."""
    lo, hi = sorted((round(low, _DECIMALS), round(high, _DECIMALS)))
    points = {lo, hi}
    step = 10.0 ** -_DECIMALS
    for t in (inputs.cloud_below, inputs.on_prem_above):
        t = round(float(t), _DECIMALS)
        points.update(p for p in (t - step, t, t + step) if lo <= p <= hi)
    found = {branch_for(p, inputs, rules) for p in points}
    return tuple(b for b in dict.fromkeys(r.branch for r in rules) if b in found)
