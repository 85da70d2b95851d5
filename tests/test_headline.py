"""The headline figures: one name and one value per figure in every output of one result (analysis.headline)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from tests.helpers import run_cli
from tests.report_helpers import simulate_small, write_fixed_dataset

from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.pipeline import analyze
from gpuaudit.analysis.text import summary
from gpuaudit.util import fmt

_VALUE = re.compile(r"^[\s:|*]*((?:[≤≥] )?(?:−?[\d,.]+ (?:%|pp|GPU-h)(?: – [\d,.]+ %)?|never))")


def _values_after(doc: str, name: str) -> list[str]:
    """The values shown right after each mention of `name` (tags stripped): a tile, a list item, a table row;
    mentions followed by words (a formula, a definition) are not values."""
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", doc))
    out = []
    for part in flat.split(name)[1:]:
        m = _VALUE.match(part)
        if m:
            out.append(m.group(1))
    return out


def _at(d: dict, path: str) -> object:
    for k in path.split("."):
        d = d[k]
    return d


@pytest.mark.parametrize("kind", ["allocations", "processes"])
def test_every_output_shows_each_headline_figure_with_one_name_and_one_value(tmp_path: Path, kind: str) -> None:
    """`gpuaudit report` printed "believed (runtime-hour) utilization 55.7 %" on the terminal while report.md and
    report.html said "Believed: allocated (scheduler) utilization 60.3 %", and `analyze` said "phantom gap 41.3 %"
    where the report said pp (phantom, 16 GPUs, 14 days, seed 4). The terminal summary, report.md, report.html,
    report.json and analyze's summary of one dataset show each headline figure under the same name with the
    same value, with and without scheduler allocations."""
    data = tmp_path / "data"
    if kind == "allocations":
        simulate_small(data, "phantom", gpus=8, days=3)
    else:
        write_fixed_dataset(data, days=3)
    out = tmp_path / "out"
    r = run_cli("report", "--data", str(data), "--out", str(out), env={"COLUMNS": "250"})
    assert r.returncode == 0, r.stderr
    terminal = r.stdout
    md = (out / "report.md").read_text()
    page = html.unescape((out / "report.html").read_text())
    doc = json.loads((out / "report.json").read_text())
    result = analyze(data)
    text = summary(result)
    heads = hl.headline_figures(result)
    assert (heads[0].name == hl.BELIEVED_ALLOCATED) is (kind == "allocations")
    assert {h.key for h in heads} >= {hl.BELIEVED, hl.REAL, hl.PHANTOM_GAP, hl.BILLED_HOUR, hl.BREAK_EVEN}
    for h in heads:
        shown = f"{h.name}: {h.text}"
        assert shown in text, (shown, text)
        assert h.name in terminal and h.text in terminal.split(h.name, 1)[1].splitlines()[0], (h.name, terminal)
        for name, doc_text in (("md", md), ("html", page)):
            shown_values = _values_after(doc_text, h.name)
            assert shown_values and set(shown_values) == {h.text}, (name, h.name, h.text, shown_values)
        value = _at(doc, h.path)["value"]  # type: ignore[index]
        assert value == (None if h.figure.value is None else pytest.approx(h.figure.value, rel=1e-12)), h.path
    names = [h.name for h in heads]
    assert len(set(names)) == len(names)


def test_phantom_gap_is_believed_minus_real_in_points(tmp_path: Path) -> None:
    """The phantom-gap tile computed held-hour − real (R/W − S/W = 41.3 pp) beside a believed tile of 70.2 % and
    a real one of 25.5 %: 70.2 − 25.5 is 44.7, not 41.3. The gap is believed − real, the two tiles beside it, and
    billed-hour utilization (what the cloud bills) is never below believed."""
    simulate_small(tmp_path, "phantom", gpus=8, days=3)
    r = analyze(tmp_path)
    u = r.utilization
    assert r.ledger is not None and r.ledger.basis == "allocations"
    assert u.believed_utilization is not None and u.billed_utilization is not None
    assert u.believed_utilization.value == pytest.approx(  # allocations imported: believed is A/W
        (r.ledger.allocated_gpu_hours.value or 0.0) / (u.observed_gpu_hours.value or 1.0))
    assert u.phantom_gap.value == pytest.approx(u.believed_utilization.value - u.real_utilization.value)
    assert u.billed_utilization.value >= u.believed_utilization.value - 1e-12
    assert r.break_even.measured_billed == pytest.approx(u.billed_utilization.value)
    w = u.observed_gpu_hours.value or 0.0
    assert u.phantom_gpu_hours.value == pytest.approx(
        (r.ledger.allocated_gpu_hours.value or 0.0) - (u.real_gpu_hours.value or 0.0))
    assert r.costs.phantom_usd.value == pytest.approx(
        (u.phantom_gpu_hours.value or 0.0) * (r.costs.cloud_flexible_usd_per_gpu_hour.value or 0.0))
    assert w > 0


def test_docs_define_each_headline_name_once() -> None:
    """docs/report.md said believed and held-hour were one quantity while the report showed two values under
    those names: the Definitions table lists every headline name exactly once."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text()
    table = doc.split("## Definitions used in the report", 1)[1].split("\n## ", 1)[0]
    terms = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")][1:]
    for name in (*hl.NAMES.values(), hl.BELIEVED_ALLOCATED, hl.BELIEVED_HELD):
        assert terms.count(name) == 1, name


def test_analyze_counts_the_hurdle_in_gpus_held_around_the_clock(tmp_path: Path) -> None:
    """`analyze` printed "owning pays only above ~12.1 busy GPUs" where the report said "held around the clock":
    busy is the duty cycle, the hurdle counts held GPUs. One wording."""
    write_fixed_dataset(tmp_path, days=3)
    text = summary(analyze(tmp_path))
    assert "busy GPUs" not in text
    assert "GPUs held around the clock" in text or "never at these prices" in text


def test_utilization_chart_names_the_headline_phantom_gap(tmp_path: Path) -> None:
    """With scheduler allocations charts/utilization.svg said "Phantom gap: 39.5 percentage points of the fleet's
    hours" (held − real) beside the tile "Phantom gap: believed − real 43.9 pp": the chart shows the headline's
    phantom gap, its name and its value, and shades believed − real."""
    import xml.etree.ElementTree as ET

    from gpuaudit.report import charts
    from gpuaudit.report.sections import build_report

    simulate_small(tmp_path, "phantom", gpus=8, days=3)
    r = analyze(tmp_path)
    assert hl.scheduled(r)
    gap = hl.by_key(r)[hl.PHANTOM_GAP]
    held_gap = (r.utilization.runtime_utilization.value or 0) - (r.utilization.real_utilization.value or 0)
    assert fmt.pp(held_gap) != gap.text  # the two quantities differ on this dataset
    report = build_report(r, version="t")
    chart = next(c for s in report.sections for c in s.charts if c.name == "utilization")
    for narrow in (False, True):
        svg = charts.draw(chart.spec, narrow=narrow)
        texts = " ".join("".join(t.itertext()) for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text"))
        flat = re.sub(r"\s+", " ", texts)
        assert f"{hl.short_name(hl.PHANTOM_GAP)} = {gap.text}" in flat, flat
        assert fmt.pp(held_gap) not in flat and "percentage points of" not in flat


def test_break_even_curve_is_described_by_its_axis_billed_hour_utilization(tmp_path: Path) -> None:
    """report.json's break_even.curve said "by held-hour utilization" and its column "share of the fleet's hours
    held by jobs" where the axis is billed-hour utilization (held or, where larger, allocated)."""
    simulate_small(tmp_path, "phantom", gpus=8, days=3)
    curve = analyze(tmp_path).to_dict()["break_even"]["curve"]
    text = json.dumps(curve)
    assert "held-hour" not in text and "held by jobs" not in text
    assert "billed-hour utilization" in curve["description"]


@pytest.mark.parametrize("scenario", ["phantom", "mixed-models"])
def test_billed_hour_utilization_is_never_below_believed_or_held_hour(tmp_path: Path, scenario: str) -> None:
    """Billed-hour utilization ("held or, where larger, allocated") read 86.48 % against believed 86.59 % on a
    6-GPU, 2-day phantom trial (seed 2): it was the mean of per-bucket ratios scaled to the fleet, and the trial's
    partial first and last buckets weighed as much as full ones. A maximum is never below what it is the maximum
    of: billed GPU-hours ÷ W, on the basis of believed (A / W) and held-hour (R / W)."""
    from gpuaudit.sim.bulk import simulate

    data = tmp_path / "data"
    simulate(data, scenario, gpus=6, days=2, interval_s=60, seed=2)
    u = analyze(data).utilization
    assert u.billed_utilization is not None and u.billed_utilization.value is not None
    billed = u.billed_utilization.value
    assert u.believed_utilization is not None and u.believed_utilization.value is not None
    assert billed >= u.believed_utilization.value - 1e-12
    assert billed >= (u.runtime_utilization.value or 0.0) - 1e-12
    assert billed <= 1.0 + 1e-12


def test_phantom_gap_shown_is_the_difference_of_the_two_tiles_shown(tmp_path: Path) -> None:
    """Review of issue 26.2: the gap tile showed 43.9 pp beside believed 68.6 % and real 24.6 % (68.6 − 24.6 is
    44.0): each was rounded on its own. The gap shown is the difference of the two values shown beside it
    (report.json keeps the unrounded one)."""
    import dataclasses

    simulate_small(tmp_path, "phantom", gpus=8, days=3)
    r = analyze(tmp_path)
    u = r.utilization
    assert u.believed_utilization is not None
    believed, real = 0.68640, 0.24560  # shown 68.6 % and 24.6 %; the exact gap 0.4408 would show 44.1 pp
    u2 = dataclasses.replace(
        u, believed_utilization=dataclasses.replace(u.believed_utilization, value=believed),
        real_utilization=dataclasses.replace(u.real_utilization, value=real),
        phantom_gap=dataclasses.replace(u.phantom_gap, value=believed - real))
    heads = hl.by_key(dataclasses.replace(r, utilization=u2))
    assert (heads[hl.BELIEVED].text, heads[hl.REAL].text) == ("68.6 %", "24.6 %")
    assert heads[hl.PHANTOM_GAP].text == "44.0 pp"
    assert heads[hl.PHANTOM_GAP].figure.value == pytest.approx(believed - real)  # the figure stays exact


def test_phantom_gpu_hours_tile_adds_up_from_the_ledger_states_it_names(tmp_path: Path) -> None:
    """Review of issue 26.2: "Phantom GPU-hours 2,363" said it was the held-but-idle and allocated-with-no-
    process hours, while those two ledger states summed to 2,400 (phantom 16 GPUs × 14 days, seed 4): believed
    is what was allocated, and the ledger's held states also count time held outside any allocation. The tile
    states the sum it is, with the ledger's own figures, and the sum adds up."""
    from gpuaudit.report.sections import believed as believed_section

    for kind in ("allocations", "processes"):
        data = tmp_path / kind
        if kind == "allocations":
            simulate_small(data, "phantom", gpus=16, days=4, seed=4)
        else:
            write_fixed_dataset(data, days=3)
        r = analyze(data)
        led = r.ledger
        assert led is not None
        tile = next(f for f in believed_section.build(r, lambda _s: None).figures
                    if f.label.startswith("Phantom GPU-hours"))
        m = re.search(r"= ([\d,.]+) GPU-h held, SMs idle(?: \+ ([\d,.]+) GPU-h allocated, no process)?"
                      r"(?: − ([\d,.]+) GPU-h held outside any allocation)?", tile.source)
        assert m, (kind, tile.source)
        parts = [float(g.replace(",", "")) if g else 0.0 for g in m.groups()]
        assert parts[0] + parts[1] - parts[2] == pytest.approx(float(tile.text.split()[-2].replace(",", "")),
                                                               abs=1.5), (kind, tile)
        exact = (led.held_idle.value or 0.0) + (led.allocated_no_process.value or 0.0) - (
            led.held_outside_allocation_gpu_hours.value or 0.0 if kind == "allocations" else 0.0)
        assert exact == pytest.approx(r.utilization.phantom_gpu_hours.value, rel=1e-9), kind
        if kind == "allocations":
            assert m.group(2) and m.group(3), tile.source


def test_report_json_names_each_utilization_once(tmp_path: Path) -> None:
    """Review of issue 26.2: report.json carried believed twice (`utilization.allocated_utilization` beside
    `utilization.believed_utilization`, and without allocations "allocated" was R/W under the scheduler's name),
    and `break_even.billed_utilization` (the break-even u*) shared its key with `utilization.billed_utilization`
    (the trial's measured billed-hour utilization): two quantities, one name."""
    for kind in ("allocations", "processes"):
        data = tmp_path / kind
        if kind == "allocations":
            simulate_small(data, "phantom", gpus=8, days=3)
        else:
            write_fixed_dataset(data, days=3)
        doc = analyze(data).to_dict()
        u, be = doc["utilization"], doc["break_even"]
        assert "allocated_utilization" not in u, kind
        assert "billed_utilization" in u and "billed_utilization" not in be, kind
        assert "break_even_billed_utilization" in be, kind
        b = u["believed_utilization"]["value"]
        same = sorted(k for k, v in u.items() if isinstance(v, dict) and v.get("unit") == "fraction"
                      and k != "believed_utilization" and v.get("value") == b)
        # without allocations believed IS the held-hour utilization and what the cloud bills (their definitions
        # say so); with them, no other key repeats it
        assert same == ([] if kind == "allocations" else ["billed_utilization", "runtime_utilization"]), (kind, same)


def test_headline_sentence_spells_real_utilization_as_its_tile_does(tmp_path: Path) -> None:
    """Review of issue 26: the headline said "Real utilization is 23.3%" under a tile reading "23.3 %": one
    figure, two spellings. The sentence carries the tile's text."""
    simulate_small(tmp_path, "phantom", gpus=8, days=3)
    r = analyze(tmp_path)
    shown = hl.by_key(r)[hl.REAL].text
    assert f"real utilization is {shown}" in r.decision.headline.lower(), (shown, r.decision.headline)
