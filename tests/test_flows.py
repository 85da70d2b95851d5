"""One flow behind `analyze`, `report` and `demo` (gpuaudit.flows): the same checks and the same messages
whichever command runs it (analyze and report once told a missing dataset in two different ways)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers import one_error_line, run_cli

from gpuaudit import flows
from gpuaudit.errors import NoDataError


def test_every_reading_command_says_the_same_about_a_missing_dataset(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    lines = set()
    for command in (["analyze"], ["analyze", "--json"], ["report", "--out", str(tmp_path / "r")],
                    ["sql", "SELECT 1"]):
        r = run_cli(*command, "--data", str(missing), cwd=tmp_path)
        lines.add(one_error_line(r, f"no dataset at {missing}", "gpuaudit demo"))
    assert len(lines) == 1, lines
    assert not (tmp_path / "r").exists()  # nothing written for a dataset that is not there


def test_the_flow_refuses_before_reading_the_config(tmp_path: Path) -> None:
    with pytest.raises(NoDataError, match="no dataset at"):
        flows.analyze(tmp_path / "none", config=tmp_path / "no-such.toml")


def test_the_report_library_does_not_hold_a_flow() -> None:
    """report/pipeline.py once held a second analyze flow: the flows live in gpuaudit.flows only."""
    import importlib.util

    assert importlib.util.find_spec("gpuaudit.report.pipeline") is None
