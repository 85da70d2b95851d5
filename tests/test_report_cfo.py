"""The report a CFO can act on: the action in counts ("sell 4 of your 8 GPUs"), one "how many to own" (the
others labelled as checks), a break-even sentence that says against what, one "held but did no work" figure,
and one cloud price per use, with its card."""

from __future__ import annotations

from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.report.sections import build_report
from gpuaudit.util import fmt


def _half_idle() -> list[dict]:  # type: ignore[type-arg]
    """8 owned GPUs: 4 held all the time at 60 % SM activity, 4 never used."""
    busy = [r for g in range(4) for r in gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=0.6, procs=1)]
    return busy + [r for g in range(4) for r in gpu_rows("n1", f"I-{g}", 48 * 12, interval_s=300, sm=0.0)]


def _figures(report):  # type: ignore[no-untyped-def]
    return {f.label: f for s in report.sections for f in s.figures} | {f.label: f for f in report.verdict.figures}


def test_the_report_says_the_action_in_counts_and_one_answer_per_question() -> None:
    cfg = load_config().replace("cloud", instance_usd_per_hour=110.0)  # owning the busy half pays
    r = analyze_rollups(rollups(_half_idle()), cfg)
    best = {s.id: s for s in r.costs.scenarios}[r.decision.recommended_scenario]
    assert best.owned_gpus == 4 and r.costs.owned_gpus == 8
    assert r.decision.action.startswith("sell 4 of your 8 GPUs")
    report = build_report(r, version="t")
    assert "sell 4 of your 8 GPUs" in report.verdict.headline
    figs = _figures(report)
    # one "how many to own": the recommended plan's; the sizing figures are labelled as checks
    own = figs["GPUs to own (the recommended plan)"]
    assert own.text == "4" and own.emphasis
    demand = next(s for s in report.sections if s.key == "demand")
    others = [f.label for f in demand.figures if "own" in f.label.lower() and f is not own]
    assert others and all(label.startswith("Check:") for label in others)
    # the break-even says against what, in words, and points to the recommendation
    assert "keeping the GPUs owned today (8 GPUs) pays against renting all of its demand above" in demand.lead
    assert "keep-the-owned-fleet" not in demand.lead and "the recommended plan" in demand.lead
    # one phantom GPU-hours figure, and section 2's idle-held hours said to be part of it
    labels = list(figs)
    assert sum(label.startswith("Phantom GPU-hours") for label in labels) == 1
    assert "Idle-held GPU-hours" in labels
    assert "part of the phantom GPU-hours" in (r.utilization.idle_held_gpu_hours.definition or "")
    # the waste in dollars uses a price on a card: the flexible price shown in section 5
    flexible = r.costs.cloud_flexible_usd_per_gpu_hour.value
    dollars = next(f for f in figs.values() if f.label == "Phantom gap in dollars (trial)")
    assert f"${flexible:,.2f}/GPU-h" in dollars.source and "flexible price" in dollars.source
    card = next(f for label, f in figs.items() if label.startswith("Cloud flexible price per GPU-hour"))
    assert card.text == fmt.unit_value(flexible, "USD/GPU-h")


def test_markdown_folds_each_figures_formula_into_how_computed() -> None:
    """The Markdown report printed each headline figure's formula and SQL file names beside it ("14.0 % — S / W
    — gpu_samples via sql/analysis_streams.sql …"), where the HTML folds them into a "how computed" disclosure:
    now the Markdown folds them too, one <details> block under each list or table of figures, every figure's
    source in it, escaped like every other value."""
    from gpuaudit.report.render import md_escape, render_markdown

    report = build_report(analyze_rollups(rollups(_half_idle()), load_config()), version="t")
    md = render_markdown(report)
    blocks = md.split("<details><summary>How computed</summary>")
    assert len(blocks) - 1 == 1 + sum(1 for s in report.sections if s.figures)  # the verdict's and each section's
    for block in blocks[1:]:
        assert "</details>" in block
    folded = "".join(b.split("</details>")[0] for b in blocks[1:])
    shown = blocks[0] + "".join(b.split("</details>", 1)[1] for b in blocks[1:])
    for f in [*report.verdict.figures, *(f for s in report.sections for f in s.figures)]:
        assert f"- {md_escape(f.label)}: {md_escape(f.source)}" in folded, f.label
    # shown: the label and the value only
    for f in report.verdict.figures:
        assert f"- {md_escape(f.label)}: **{md_escape(f.text)}**\n" in shown, f.label
    for f in (f for s in report.sections for f in s.figures):
        value = f"**{md_escape(f.text)}**" if f.emphasis else md_escape(f.text)
        assert f"| {md_escape(f.label)} | {value} |\n" in shown, f.label
    # the jargon a headline uses is explained where it is first shown, not only in the fold
    assert "pp = percentage points" in blocks[0]
