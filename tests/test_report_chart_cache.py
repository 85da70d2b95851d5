"""The chart cache (report/chartcache.py): a re-run reads the charts whose data did not change instead of drawing
them again, with the same bytes; a cache anyone else can write is never read; `--no-cache` neither reads nor
fills it. Each test has its own $XDG_CACHE_HOME (conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.report_helpers import count_figures, normalize_generated, write_fixed_dataset

from gpuaudit import flows
from gpuaudit.report import chartcache, chartpool, charts
from gpuaudit.report.model import ChartSpec, Series

POISON = '<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><script>alert("planted")</script></svg>\n'


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_fixed_dataset(tmp_path / "data", days=7)
    return tmp_path / "data"


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The charts drawn in this process (no worker: every drawing is counted here)."""
    monkeypatch.setattr(chartpool, "default_drawers", lambda: 0)
    return count_figures(monkeypatch)


def _report(data: Path, out: Path, *, cache: bool = True, config: Path | None = None) -> tuple[str, int]:
    """report.html's text (the generation time masked) and how many charts the report has."""
    written = flows.report_dataset(data, out, formats="html,md", quiet=True, cache=cache, config=config)
    return normalize_generated((out / "report.html").read_text()), len(written.report.charts())


def _entries() -> list[Path]:
    return sorted(chartcache.cache_dir().glob(f"*{chartcache.SUFFIX}"))


def test_a_rerun_draws_only_the_charts_whose_data_changed_with_the_same_bytes_and_no_cache_ignores_the_cache(
    data: Path, tmp_path: Path, drawn: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    first, n = _report(data, tmp_path / "a")
    assert len(drawn) == 2 * n and len(_entries()) == 2 * n  # each chart at two widths, each kept
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in _entries())
    assert oct(chartcache.cache_dir().stat().st_mode & 0o777) == "0o700"
    drawn.clear()
    again, _ = _report(data, tmp_path / "b")
    assert drawn == [] and again == first
    # A new price: the cost charts are drawn, not the utilization, the ledger or the heatmap.
    price = tmp_path / "price.toml"
    price.write_text("[cloud]\ninstance_usd_per_hour = 40.0\n")
    _report(data, tmp_path / "priced", config=price)
    assert 0 < len(drawn) < 2 * n
    assert "utilization" not in drawn and "heatmap" not in drawn and "breakeven" in drawn
    drawn.clear()
    _plant(0o600)  # entries the flag must not read: --no-cache draws every chart and writes none
    cold, _ = _report(data, tmp_path / "c", cache=False)
    assert cold == first and len(drawn) == 2 * n  # drawn, the same bytes as read from the cache
    assert all(p.read_text() == POISON for p in _entries())
    capsys.readouterr()


def _plant(mode: int) -> None:
    for p in _entries():
        p.write_text(POISON)
        p.chmod(mode)


JOBS = [(ChartSpec("trend", labels=("2026-W01", "2026-W02"), series=(Series("runtime", (0.5, 0.6)),
                                                                    Series("real", (0.2, 0.3)))), narrow)
        for narrow in (False, True)]


def _draw(jobs: list[chartpool.Job] = JOBS) -> list[str]:
    with chartpool.ChartPool(0, cache=True) as pool:
        return pool.draw(jobs)


def test_a_cache_entry_anyone_else_can_write_is_never_read(tmp_path: Path, drawn: list[str]) -> None:
    """An entry is pasted into report.html as markup: one that another user could have written is drawn again."""
    with chartpool.ChartPool(0) as pool:  # without `cache` (--no-cache): nothing is kept
        clean = pool.draw(JOBS)
    assert not chartcache.cache_dir().exists()
    assert _draw() == clean
    assert clean == [charts.draw(spec, narrow=n) for spec, n in JOBS]
    # The control: an entry this user alone can write is used as it is (so the checks below can fail).
    _plant(0o600)
    drawn.clear()
    assert _draw() == [POISON, POISON] and drawn == []
    for mode in (0o620, 0o602):  # writable by the group, by anyone
        _plant(mode)
        assert _draw() == clean and len(drawn) == 2
        assert all(p.read_text() != POISON and p.stat().st_mode & 0o777 == 0o600 for p in _entries())  # redrawn
        drawn.clear()
    # A directory others can write: neither read nor written.
    _plant(0o600)
    chartcache.cache_dir().chmod(0o777)
    assert _draw() == clean and len(drawn) == 2
    assert all(p.read_text() == POISON for p in _entries())
    # A link planted in a directory of ours is not followed, and is replaced by a drawing.
    chartcache.cache_dir().chmod(0o700)
    target = tmp_path / "elsewhere.svg"
    target.write_text(POISON)
    target.chmod(0o600)  # a target the checks would pass: only the link is refused
    for p in _entries():
        p.unlink()
        p.symlink_to(target)
    assert _draw() == clean
    assert target.read_text() == POISON and not any(p.is_symlink() for p in _entries())


def test_a_torn_entry_is_drawn_again_and_only_the_newest_entries_stay(
    drawn: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = _draw()
    torn = _entries()[0]
    torn.write_text(torn.read_text()[:200])  # a disk that filled while another writer wrote it
    drawn.clear()
    assert _draw() == clean and len(drawn) == 1
    monkeypatch.setattr(chartcache, "KEEP", 2)
    for i, p in enumerate(_entries()):
        os.utime(p, ns=(i * 10**9, i * 10**9))
    newest = _entries()[-1]
    chartcache.save([("f" * 64, POISON)])
    assert _entries() == sorted([newest, chartcache.cache_dir() / f"{'f' * 64}{chartcache.SUFFIX}"])


def test_a_directory_above_the_cache_others_can_write_turns_it_off(drawn: list[str]) -> None:
    """Found in review: only the cache directory itself was checked. Whoever can write a directory above it can
    swap the cache for a directory of theirs between the check and the read."""
    clean = _draw()
    _plant(0o600)
    home = Path(os.environ["XDG_CACHE_HOME"])
    home.chmod(0o777)
    drawn.clear()
    assert _draw() == clean and len(drawn) == 2
    assert all(p.read_text() == POISON for p in _entries())  # nor written
    home.chmod(0o1777)  # sticky, as /tmp: only an entry's owner can rename it
    assert _draw() == [POISON, POISON]


def test_missing_directories_above_the_cache_are_made_for_this_user_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "new" / "cache"))
    old = os.umask(0o002)  # a umask that would leave them group-writable
    try:
        chartcache.save([("a" * 64, POISON)])
    finally:
        os.umask(old)
    for d in (tmp_path / "new", tmp_path / "new" / "cache", chartcache.cache_dir().parent, chartcache.cache_dir()):
        assert d.stat().st_mode & 0o777 == 0o700, d
    assert _entries() == [chartcache.cache_dir() / f"{'a' * 64}{chartcache.SUFFIX}"]


def test_a_fifo_under_an_entrys_name_is_drawn_over_not_waited_on(drawn: list[str]) -> None:
    """Found in review: opening a planted FIFO blocked the report for ever."""
    clean = _draw()
    for p in _entries():
        p.unlink()
        os.mkfifo(p, 0o600)
    drawn.clear()
    assert _draw() == clean and len(drawn) == 2


def test_a_matplotlibrc_does_not_change_a_drawing(drawn: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: the style was applied over the user's rc settings, so a run in a directory with a
    matplotlibrc filled the cache with drawings that --no-cache would not give. Charts draw on matplotlib's
    defaults: the bytes are the same wherever the report runs."""
    import matplotlib

    clean = [charts.draw(spec, narrow=n) for spec, n in JOBS]
    monkeypatch.setitem(matplotlib.rcParams, "axes.linewidth", 5.0)  # what a matplotlibrc sets on import
    monkeypatch.setitem(matplotlib.rcParams, "lines.linewidth", 7.0)
    assert [charts.draw(spec, narrow=n) for spec, n in JOBS] == clean


def test_drawing_code_that_cannot_be_identified_turns_the_cache_off(
    drawn: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: an install without the sources' .py files raised FileNotFoundError."""
    monkeypatch.setattr(chartcache, "_code_digest", lambda: None)
    assert _draw() == [charts.draw(spec, narrow=n) for spec, n in JOBS]
    assert not chartcache.cache_dir().exists()
