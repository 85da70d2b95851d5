"""A trial shorter than the bootstrap minimum says why there is no interval, and a sub-day trial's length is
shown in hours, in `analyze` and in the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli


@pytest.fixture(scope="module")
def short_trial(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("short")
    r = run_cli("simulate", "--gpus", "8", "--days", "0.05", "--interval", "300", "--start", "2026-01-01T00:00:00Z",
                "--data", str(data))
    assert r.returncode == 0, r.stderr
    return data


def test_analyze_names_too_few_days_not_zero_resamples(short_trial: Path) -> None:
    """Defect: with bootstrap_resamples 1000 the text said "no day-resamples (analysis.bootstrap_resamples = 0)"
    and the header "(0.0 days)" for a 1.2-hour trial."""
    r = run_cli("analyze", "--data", str(short_trial))
    assert r.returncode == 0, r.stderr
    assert "bootstrap_resamples = 0" not in r.stdout
    assert "too few days (1, need 7)" in r.stdout, r.stdout
    assert "0.0 days" not in r.stdout + r.stderr and "(1.2 hours)" in r.stdout, r.stdout


def test_report_header_shows_hours_for_a_sub_day_trial(short_trial: Path, tmp_path: Path) -> None:
    r = run_cli("report", "--data", str(short_trial), "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "r" / "report.md").read_text()
    assert "0.0 days" not in md and "(1.2 hours)" in md
    assert "too few days (1, need 7)" in md


def test_analyze_warns_on_stderr_in_the_one_format_with_units_and_plurals(short_trial: Path) -> None:
    """rv1 (issue 26.9 / 26.15): `analyze` printed its warnings only as "warning: ..." lines among the figures on
    stdout, outside the README's `gpuaudit: warning:` format; the provisional-trial warning said "less than 90"
    with no unit, and the confidence reason "1 day(s)"."""
    r = run_cli("analyze", "--data", str(short_trial))
    assert r.returncode == 0, r.stderr
    err = r.stderr.splitlines()
    assert any(line.startswith("gpuaudit: warning: the trial covers 1.2 hours, less than 90 days "
                               "(decision.provisional_below_days)") for line in err), r.stderr
    assert not any(line.startswith("warning:") for line in r.stdout.splitlines()), r.stdout
    assert "Warnings:" in r.stdout  # they stay beside the figures too
    assert "day(s)" not in r.stdout + r.stderr
    j = run_cli("analyze", "--data", str(short_trial), "--json")
    assert j.returncode == 0 and j.stdout.lstrip().startswith("{")
    assert "gpuaudit: warning: the trial covers" in j.stderr


def test_report_spells_a_sub_day_trial_one_way_everywhere(short_trial: Path, tmp_path: Path) -> None:
    """Review of issue 26.9: beside the header's "(1.2 hours)" the method section's tile said "Trial length 0.05
    days", data coverage "days with data: 1 of 0.1" and "confidence method: … 0 resamples" (1,000 configured:
    none were drawn because the trial has too few days), and the confidence said "the trial has 1 day of data"
    and "the trial covers 1.2 hours, fewer than 90" (90 what?). One spelling of the trial's length, and the
    reason instead of a zero."""
    r = run_cli("report", "--data", str(short_trial), "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "r" / "report.md").read_text().replace("\\_", "_")
    assert "0.05 days" not in md and "| Trial length | 1.2 hours |" in md, md
    assert " of 0.1" not in md and "| days with data | 1 day in a trial of 1.2 hours |" in md
    assert "0 resamples" not in md
    assert "none drawn, too few days (1, need 7)" in md
    assert "fewer than 90" not in md and "1 day of data" not in md
    assert "the trial has data on 1 UTC day, fewer than the 7" in md
    assert "the trial covers 1.2 hours, less than 90 days (decision.provisional_below_days)" in md
    assert "(< 90)" not in md and "less than the minimum for a firm decision" not in md
