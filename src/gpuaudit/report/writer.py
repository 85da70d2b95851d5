"""Write a report to a directory: report.html (self-contained), report.md + charts/*.svg, report.json.

Every file is first written in full to a temporary name in its directory (and fsynced, util.atomic); only
when all of them are written are they renamed into place, all or none (util.atomic.publish_all). A failure at any
step (a full disk, an I/O error, a rename that fails) removes the temporary files and leaves an earlier report in
`out` as it was: never a half-written file, and never a new report.html next to an old report.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.errors import GpuauditError
from gpuaudit.util import atomic
from gpuaudit.util.jsonio import document_bytes

if TYPE_CHECKING:
    from gpuaudit.analysis.result import AnalysisResult
    from gpuaudit.report.chartpool import ChartPool

FORMATS = ("html", "md", "json")
_FILE_NAMES = {"html": "report.html", "md": "report.md", "json": "report.json"}


@dataclass
class WrittenReport:
    out: Path
    files: dict[str, Path] = field(default_factory=dict)  # format -> path
    charts: list[Path] = field(default_factory=list)
    report: Any = None  # the model (gpuaudit.report.model.Report) when html or md was written


def parse_formats(value: str | Iterable[str]) -> list[str]:
    """'html,md' -> ['html', 'md']; unknown names are an error listing the known ones."""
    items = value.split(",") if isinstance(value, str) else list(value)
    formats = []
    for item in items:
        name = item.strip().lower()
        if name == "markdown":
            name = "md"
        if not name:
            continue
        if name not in FORMATS:
            raise GpuauditError(f"unknown report format {item.strip()!r}; choose from {', '.join(FORMATS)}")
        if name not in formats:
            formats.append(name)
    if not formats:
        raise GpuauditError(f"no report format given; choose from {', '.join(FORMATS)}")
    return formats


def write_files(out: Path, files: list[tuple[Path, str | bytes]], stale: Iterable[Path] = ()) -> None:
    """Write all `files` or none: stage every one (written and synced, 0o666 less the umask as the data files:
    a report is for colleagues), then rename them into place and remove the `stale` files (an earlier report's
    other formats, which would contradict this one) with `atomic.publish_all`: a failure at any step leaves the
    earlier report in `out` as it was."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            staged.append((atomic.stage(path, data), path))
        atomic.publish_all(staged, remove=stale)
    except OSError as e:
        raise GpuauditError(
            f"cannot write the report to {out}: {e.strerror or e}; nothing was written "
            "(an earlier report there is unchanged)"
        ) from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)  # only those not renamed: after a failure


def write_report(
    result: AnalysisResult,
    out: Path,
    formats: Iterable[str] = FORMATS,
    *,
    version: str | None = None,
    progress: Callable[[str], None] | None = None,
    by: Iterable[str] = (),
    pool: ChartPool | None = None,
) -> WrittenReport:
    """Render `result` (an AnalysisResult) into `out` in the given formats; return what was written. `by`:
    chargeback keys (account, user, partition, namespace) whose CSV and JSON files are written too. `pool`:
    chart workers (report/chartpool.py) that draw the charts, else this process does."""
    from gpuaudit import __version__
    from gpuaudit.report import render
    from gpuaudit.report.sections import build_report

    formats = parse_formats(list(formats))
    by = list(by)
    step = progress or (lambda _msg: None)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise GpuauditError(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GpuauditError(f"cannot create the report directory {out}: {e.strerror}") from None
    written = WrittenReport(out=out)
    files: list[tuple[Path, str | bytes]] = []
    if "html" in formats or "md" in formats:
        from gpuaudit.report.chargeback import chargeback_links

        report = build_report(result, version=version or __version__, progress=step)
        written.report = dataclasses.replace(report, files=chargeback_links(result, by))
        drawn = render.draw_charts(written.report, narrow="html" in formats, progress=step, pool=pool)
    if "html" in formats:
        step("rendering report.html")
        written.files["html"] = out / _FILE_NAMES["html"]
        files.append((written.files["html"], render.render_html(written.report, drawn)))
    if "md" in formats:
        step("rendering report.md and charts")
        for chart in written.report.charts():
            path = out / render.CHART_DIR / f"{chart.name}.svg"
            files.append((path, drawn[chart.name].wide))
            written.charts.append(path)
        written.files["md"] = out / _FILE_NAMES["md"]
        files.append((written.files["md"], render.render_markdown(written.report)))
    if "json" in formats:
        step("rendering report.json")
        written.files["json"] = out / _FILE_NAMES["json"]
        # Compact for files; `gpuaudit analyze --json` prints the same document indented for people. Never NaN /
        # Infinity tokens, never a raw control or bidi character (JSON escapes: the data round-trips).
        files.append((written.files["json"], document_bytes(result, indent=False) + b"\n"))
    from gpuaudit.report.chargeback import chargeback_files

    for path, text in chargeback_files(result, out, by):
        written.files[path.name] = path
        files.append((path, text))
    step("writing the report files")
    write_files(out, files, _stale_files(out, formats, written.charts))
    return written


def _stale_files(out: Path, formats: Iterable[str], charts: Iterable[Path]) -> list[Path]:
    """What an earlier report left in `out` that this one does not rewrite: the files of the formats not
    asked for now (a report.md from last week beside today's report.html would contradict it), and chart SVGs
    this report does not draw. Only gpuaudit's own names: nothing else in `out` is touched."""
    from gpuaudit.report.render import CHART_DIR

    wanted = set(formats)
    out_files = [out / _FILE_NAMES[f] for f in FORMATS if f not in wanted]
    drawn = set(charts)
    old_charts = sorted((out / CHART_DIR).glob("*.svg")) if (out / CHART_DIR).is_dir() else []
    return [p for p in out_files if p.is_file()] + [p for p in old_charts if p not in drawn]
