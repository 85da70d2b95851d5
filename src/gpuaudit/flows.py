"""The end-to-end flows behind `gpuaudit analyze`, `report` and `demo`, the one place each is written: check
the dataset is there, read the settings, analyze (gpuaudit.analysis), then print or write the report
(gpuaudit.report). The commands in cli/ only parse their options and call these."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.errors import GpuauditError, NoDataError

if TYPE_CHECKING:
    from gpuaudit.analysis.overrides import Overrides
    from gpuaudit.analysis.result import AnalysisResult

_DEMO_DATA = "data"  # the demo's dataset lives inside its output directory


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def require_dataset(root: Path | str) -> None:
    """Refuse a dataset root that does not exist (a directory, or an s3:// URL) with the one message."""
    from gpuaudit.store import dataset_exists
    from gpuaudit.util import paths

    if not dataset_exists(root):
        raise NoDataError(f"no dataset at {root}: use --data DIR or set GPUAUDIT_DATA; record one with "
                          "`gpuaudit agent run`, import one with `gpuaudit import prometheus`, or try `gpuaudit demo`")
    if not paths.as_url(root) and not Path(root).is_dir():  # a file is not a dataset
        raise NoDataError(f"--data {root} is a file, not a directory: give the dataset's root directory (the one "
                          "`gpuaudit simulate`, `gpuaudit agent run` or `gpuaudit import` wrote)")


def analyze(root: Path | str, config: Path | None = None, preset: str | None = None,
            progress: Callable[[str], None] | None = None, overrides: Overrides | None = None,
            engine: str = "duckdb", cache: bool = True) -> AnalysisResult:
    """Run the analyzer on the dataset at `root` with the config file / preset and the command line's
    decision inputs (`overrides`), stage 1 on `engine` (`cache`: reuse the stage-1 rollup cache)."""
    require_dataset(root)
    from gpuaudit.store.reader import StampAhead

    # The dataset's stamp (what a cached run is looked up by) is taken beside the imports and the config below.
    ahead = StampAhead(root) if cache and engine == "duckdb" else None
    try:
        from gpuaudit.analysis.config import load_config
        from gpuaudit.analysis.overrides import NONE
        from gpuaudit.analysis.pipeline import analyze as run

        cfg = load_config(config, preset)  # a bad config fails before the long part
        if progress:
            progress("analyzing the dataset")
        return run(root, cfg, overrides or NONE, engine=engine, cache=cache, stamp_of=ahead)
    finally:
        if ahead is not None:
            ahead.close()


def print_analysis(root: Path | str, *, as_json: bool = False, config: Path | None = None,
                   preset: str | None = None, overrides: Overrides | None = None, engine: str = "duckdb",
                   cache: bool = True) -> None:
    """`gpuaudit analyze`: the result as text on stdout, or (`as_json`) the whole result as JSON."""
    result = analyze(root, config, preset, overrides=overrides, engine=engine, cache=cache)
    if as_json:
        from gpuaudit.util.jsonio import document_bytes

        # Never NaN / Infinity tokens, never a raw escape sequence or bidi override on the terminal. Bytes: a
        # fleet's document is tens of MB, and UTF-8 is what JSON is.
        sys.stdout.flush()
        sys.stdout.buffer.write(document_bytes(result, indent=True) + b"\n")
        sys.stdout.buffer.flush()
    else:
        from gpuaudit.analysis.text import summary

        sys.stdout.write(summary(result))
        sys.stdout.flush()
    warn(result.warnings)


def report_dataset(root: Path | str, out: Path, *, formats: str = "html,md,json", config: Path | None = None,
                   preset: str | None = None, quiet: bool = False, by: str | None = None,
                   overrides: Overrides | None = None, engine: str = "duckdb", cache: bool = True) -> Any:
    """Analyze `root` and write the report into `out` (and the chargeback files per `by` key: account, user,
    partition, namespace); print a short summary unless quiet."""
    from gpuaudit.report.chargeback import parse_by
    from gpuaudit.report.chartpool import ChartPool, default_drawers
    from gpuaudit.report.terminal import print_summary, progress_steps
    from gpuaudit.report.writer import parse_formats, write_report
    from gpuaudit.util.textsafe import printable

    wanted = parse_formats(formats)  # fail on a bad --format or --by before the long part
    keys = parse_by(by)
    # The chart worker starts now: it imports matplotlib while the analysis runs (report/chartpool.py).
    drawers = default_drawers() if {"html", "md"} & set(wanted) else 0
    with progress_steps(not quiet) as step, ChartPool(drawers, cache=cache) as pool:
        result = analyze(root, config, preset, step, overrides, engine, cache)
        written = write_report(result, out, wanted, progress=step, by=keys, pool=pool)
    if quiet:
        for path in written.files.values():
            print(printable(str(path)))
    else:
        print_summary(result, written)
    warn(result.warnings)  # on stderr too: a warning must not live only in the files
    return written


def warn(warnings: Sequence[str]) -> None:
    """The result's warnings on stderr, one `gpuaudit: warning: ...` line each (the one format, logsetup's)."""
    import logging

    log = logging.getLogger("gpuaudit")
    for warning in warnings:
        log.warning("%s", warning)


def run_demo(out: Path, *, scenario: str = "mixed", gpus: int = 64, days: float = 90, interval_s: float = 60,
             seed: int = 1, formats: str = "html,md,json") -> Any:
    """Simulate a trial of `scenario` into OUT/data, analyze it, write the report into OUT."""
    from gpuaudit.report.terminal import progress_bar
    from gpuaudit.report.writer import parse_formats
    from gpuaudit.sim.bulk import simulate, validate

    parse_formats(formats)
    validate(scenario, gpus, days, interval_s)  # bad arguments fail before anything is written
    out = Path(out)
    data = out / _DEMO_DATA
    if data.exists() and any(data.iterdir()) and not (data / "simulation.json").is_file():
        raise GpuauditError(f"{data} holds data that `gpuaudit demo` did not write; choose another --out")
    t0 = time.monotonic()
    _say(f"gpuaudit demo: simulating a {days:g}-day trial of the {scenario!r} scenario "
         f"({gpus} GPUs, one sample every {interval_s:g} s) into {data}")
    with progress_bar("simulating") as bar:
        # force: a rerun replaces the previous demo simulation; the simulator refuses any other data.
        simulate(data, scenario, gpus=gpus, days=days, interval_s=interval_s, seed=seed, progress=bar,
                 force=True)
    _say(f"gpuaudit demo: simulated in {time.monotonic() - t0:.0f} s; analyzing and writing the report")
    written = report_dataset(data, out, formats=formats)
    html = written.files.get("html")
    _say(f"gpuaudit demo: done in {time.monotonic() - t0:.0f} s.")
    if html is not None:
        _say(f"Open the report: {html.resolve()}")
    _say(f"Query the simulated data: gpuaudit sql --data {data} \"SELECT count(*) FROM samples\"")
    return written
