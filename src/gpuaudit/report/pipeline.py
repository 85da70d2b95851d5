"""The two end-to-end flows behind the CLI: analyze a dataset and write its report; and the demo
(simulate a trial, then the same). Printing goes to the terminal; the work is in the modules it calls."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuaudit.errors import GpuauditError, NoDataError

DEMO_DATA = "data"  # the demo's dataset lives inside its output directory


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def analyze(root: Path | str, config: Path | None = None, preset: str | None = None,
            progress: Callable[[str], None] | None = None, **inputs: Any) -> Any:
    """Run the analyzer on the dataset at `root` with the config file / preset and the decision inputs
    (`latency_sensitive`, `data_residency`, `egress_gb_per_week`, `current`) of `gpuaudit analyze`."""
    from gpuaudit.analysis.config import load_config
    from gpuaudit.analysis.pipeline import analyze as run
    from gpuaudit.store import dataset_exists

    if not dataset_exists(root):  # a directory, or an s3:// URL
        raise NoDataError(f"no dataset at {root}: record one with `gpuaudit agent run`, import one with "
                          f"`gpuaudit import prometheus`, or try `gpuaudit demo`")
    cfg = load_config(config, preset)  # a bad config fails before the long part
    if progress:
        progress("analyzing the dataset")
    return run(root, cfg, **inputs)


def report_dataset(root: Path | str, out: Path, *, formats: str = "html,md,json", config: Path | None = None,
                   preset: str | None = None, quiet: bool = False, **inputs: Any) -> Any:
    """Analyze `root` and write the report into `out`; print a short summary unless quiet."""
    from gpuaudit.report.terminal import print_summary, progress_steps
    from gpuaudit.report.writer import parse_formats, write_report
    from gpuaudit.util.textsafe import printable

    wanted = parse_formats(formats)  # fail on a bad --format before the long part
    with progress_steps(not quiet) as step:
        result = analyze(root, config, preset, step, **inputs)
        written = write_report(result, out, wanted, progress=step)
    if quiet:
        for path in written.files.values():
            print(printable(str(path)))
    else:
        print_summary(result, written)
    return written


def run_demo(out: Path, *, scenario: str = "mixed", gpus: int = 64, days: float = 90, interval_s: float = 60,
             seed: int = 1, formats: str = "html,md,json") -> Any:
    """Simulate a trial of `scenario` into OUT/data, analyze it, write the report into OUT."""
    from gpuaudit.report.terminal import progress_bar
    from gpuaudit.report.writer import parse_formats
    from gpuaudit.sim.bulk import simulate, validate

    parse_formats(formats)
    validate(scenario, gpus, days, interval_s)  # bad arguments fail before anything is written
    out = Path(out)
    data = out / DEMO_DATA
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

