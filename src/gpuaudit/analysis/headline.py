"""The headline figures: the utilization figures every output leads with, each with one name and one value.

The terminal summary of `gpuaudit report`, report.md, report.html and `gpuaudit analyze`'s summary all render
this list (docs/report.md, Definitions, defines each name once), so a figure cannot have two values or two names
(the terminal once printed R/W as "believed" beside a report whose believed was the scheduler's allocated share).
Each entry keeps its `Figure` (formula, source) and the path of that figure in `analyze --json`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaudit.analysis.figure import Figure
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.util import fmt

BELIEVED, HELD_HOUR, REAL, PHANTOM_GAP, IDLE_HELD, BILLED_HOUR, BREAK_EVEN = (
    "believed", "held_hour", "real", "phantom_gap", "idle_held", "billed_hour", "break_even")

# The one name of each figure (docs/report.md, Definitions).
NAMES = {
    HELD_HOUR: "Held-hour (runtime-hour) utilization R/W",
    REAL: "Real utilization (SM active) S/W",
    PHANTOM_GAP: "Phantom gap: believed − real (pp = percentage points)",
    IDLE_HELD: "Idle-held GPU-hours",
    BILLED_HOUR: "Billed-hour utilization",
    BREAK_EVEN: "Break-even billed-hour utilization",
}
BELIEVED_ALLOCATED = "Believed: allocated (scheduler) utilization A/W"
BELIEVED_HELD = "Believed: held-hour (runtime-hour) utilization R/W"


@dataclass(frozen=True)
class HeadlineFigure:
    key: str  # one of the constants above
    name: str
    text: str  # the value as every output shows it (bounds marked: "≤ ", "≥ ", a range)
    figure: Figure
    path: str  # where `analyze --json` carries it: dotted keys into AnalysisResult.to_dict()


def scheduled(r: AnalysisResult) -> bool:
    """Whether scheduler allocations were imported: then believed is what the scheduler shows (allocated)."""
    return r.ledger is not None and r.ledger.basis != "processes" and r.utilization.believed_utilization is not None


def _bounded(figure: Figure, text: str) -> str:
    if figure.value is None:
        return text
    return ("≤ " if figure.upper_bound else "≥ " if figure.lower_bound else "") + text


def _gap_shown(gap: Figure, believed_text: str, real_text: str) -> str:
    """The gap as the difference of the two values shown beside it (68.6 % − 24.6 % reads 44.0 pp, where the
    unrounded 0.4408 would show 44.1): each rounded on its own, they disagreed by 0.1 pp. report.json keeps the
    exact figure."""
    if gap.value is None:
        return fmt.pp(None)
    try:
        return fmt.pp((float(believed_text.split()[0]) - float(real_text.split()[0])) / 100)
    except ValueError:  # either is not a number ("n/a")
        return fmt.pp(gap.value)


def headline_figures(r: AnalysisResult) -> tuple[HeadlineFigure, ...]:
    """Believed, held-hour (where it differs from believed), real, the phantom gap, idle-held GPU-hours,
    billed-hour utilization and the break-even, in that order."""
    u, be = r.utilization, r.break_even
    sched = scheduled(r)
    believed = u.believed_utilization or u.runtime_utilization
    real = (f"{fmt.pct(u.real_utilization_lower.value)} – {fmt.pct(u.real_utilization.value)}"
            if u.real_is_upper_bound else fmt.pct(u.real_utilization.value))
    billed = u.billed_utilization or Figure(be.measured_billed, "fraction", "billed GPU-hours / W",
                                            u.runtime_utilization.source)
    out = [HeadlineFigure(BELIEVED, BELIEVED_ALLOCATED if sched else BELIEVED_HELD, fmt.pct(believed.value),
                          believed, "utilization.believed_utilization")]
    if sched:  # without allocations held-hour IS believed: shown once
        out.append(HeadlineFigure(HELD_HOUR, NAMES[HELD_HOUR], fmt.pct(u.runtime_utilization.value),
                                  u.runtime_utilization, "utilization.runtime_utilization"))
    out += [
        HeadlineFigure(REAL, NAMES[REAL], real, u.real_utilization, "utilization.real_utilization"),
        HeadlineFigure(PHANTOM_GAP, NAMES[PHANTOM_GAP], _bounded(u.phantom_gap, _gap_shown(
                           u.phantom_gap, fmt.pct(believed.value), fmt.pct(u.real_utilization.value))),
                       u.phantom_gap, "utilization.phantom_gap"),
        HeadlineFigure(IDLE_HELD, NAMES[IDLE_HELD],
                       _bounded(u.idle_held_gpu_hours, fmt.hours(u.idle_held_gpu_hours.value)),
                       u.idle_held_gpu_hours, "utilization.idle_held_gpu_hours"),
        HeadlineFigure(BILLED_HOUR, NAMES[BILLED_HOUR], fmt.pct(billed.value), billed,
                       "utilization.billed_utilization"),
        HeadlineFigure(BREAK_EVEN, NAMES[BREAK_EVEN],
                       "never" if be.never else fmt.pct(be.break_even_billed_utilization.value),
                       be.break_even_billed_utilization, "break_even.break_even_billed_utilization"),
    ]
    return tuple(out)


def short_name(key: str) -> str:
    """The figure's name without its parenthesis, for a chart title: "Phantom gap: believed − real"."""
    return NAMES[key].split(" (", 1)[0]


def by_key(r: AnalysisResult) -> dict[str, HeadlineFigure]:
    return {h.key: h for h in headline_figures(r)}
