"""Report files others can open, and no contradicting leftovers. The real analyzer and report writer over a
small simulated dataset."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuaudit.flows import report_dataset
from gpuaudit.sim import bulk as sim


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reportfiles") / "data"
    sim.simulate(root, "phantom", gpus=2, days=2, interval_s=900, seed=4)
    return root


def _report(data: Path, out: Path, formats: str) -> None:
    report_dataset(data, out, formats=formats, quiet=True)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_report_files_honour_the_umask(data: Path, tmp_path: Path, umask: int) -> None:
    """Defect: report.html/.md/.json and the charts were written mode 0600 whatever the umask (mkstemp)."""
    out = tmp_path / "report"
    old = os.umask(umask)
    try:
        _report(data, out, "html,md,json")
    finally:
        os.umask(old)
    files = [out / "report.html", out / "report.md", out / "report.json", *sorted((out / "charts").glob("*.svg"))]
    assert len(files) > 3
    for f in files:
        assert _mode(f) == 0o666 & ~umask, (f.name, oct(_mode(f)))


def test_report_with_fewer_formats_removes_the_older_ones(data: Path, tmp_path: Path) -> None:
    """Defect: `report --format html` into an --out holding an older report.md / report.json left them there,
    contradicting the new report.html side by side."""
    out = tmp_path / "report"
    _report(data, out, "html,md,json")
    assert (out / "report.md").is_file() and (out / "report.json").is_file() and list((out / "charts").glob("*.svg"))
    (out / "notes.txt").write_text("mine")
    before = (out / "report.html").stat().st_mtime_ns
    _report(data, out, "html")
    assert (out / "report.html").stat().st_mtime_ns >= before
    assert not (out / "report.md").exists() and not (out / "report.json").exists()
    assert not list((out / "charts").glob("*.svg")) if (out / "charts").exists() else True
    assert (out / "notes.txt").read_text() == "mine"  # not gpuaudit's: untouched
    _report(data, out, "json")
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["notes.txt", "report.json"]
