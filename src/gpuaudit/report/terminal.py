"""The short terminal summary printed after a report is written (rich tables), and step progress on
stderr for the long parts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from gpuaudit.util import fmt

if TYPE_CHECKING:
    from rich.console import Console

    from gpuaudit.analysis.result import AnalysisResult
    from gpuaudit.report.writer import WrittenReport


def print_summary(result: AnalysisResult, written: WrittenReport, *, console: Console | None = None) -> None:
    """Verdict, the key figures and the scenario costs, then where the files are."""
    from rich.console import Console
    from rich.markup import escape as _markup
    from rich.table import Table

    from gpuaudit.analysis.headline import headline_figures
    from gpuaudit.util.textsafe import printable

    def escape(text: str) -> str:  # data and paths: no rich markup, no raw control characters
        return _markup(printable(text))

    console = console or Console()
    report = written.report
    d = result.decision
    headline = report.verdict.headline if report is not None else str(d.branch)
    provisional = " [bold red](provisional)[/]" if d.provisional else ""
    console.print(f"[bold]Recommendation:[/] {escape(headline)}{provisional}")
    console.print(escape(d.headline))
    figures = Table(show_header=False, box=None, pad_edge=False)
    figures.add_column(style="dim")
    figures.add_column(justify="right", style="bold")
    for h in headline_figures(result):
        figures.add_row(h.name, h.text)
    figures.add_row("hybrid: GPUs to own (best N ≥ 1)", f"{result.hybrid.n_owning:,}")
    figures.add_row("confidence", d.confidence.level)
    figures.add_row("re-evaluate on", d.reevaluate_on.isoformat())
    console.print(figures)
    costs = Table(title=f"Cost over {result.costs.horizon_months} months (present value)", title_justify="left")
    costs.add_column("scenario")
    costs.add_column("total", justify="right")
    for s in result.costs.scenarios:
        mark = " ◀" if s.id == result.costs.cheapest else " (plan)" if s.what_if else "" if s.allowed else " (rents)"
        costs.add_row(escape(s.label) + mark, fmt.money(s.total.value))
    console.print(costs)
    for s in result.costs.scenarios:  # the mix each renting plan is priced at, unwrapped: a CFO checks it
        if s.priced_mix is not None:
            console.print(f"{escape(s.label)}: cloud GPU-hours {escape(s.priced_mix.text)}", soft_wrap=True)
    for kind, path in written.files.items():
        console.print(f"[green]wrote[/] {kind:<4} {escape(str(path))}")


@contextmanager
def progress_steps(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A callable that shows the current step (spinner + message) on stderr; silent when disabled or when
    stderr is not a terminal, so logs and tests stay clean."""
    if not enabled:
        yield lambda _msg: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda _msg: None
        return
    from rich.markup import escape

    with console.status("starting…") as status:
        yield lambda msg: status.update(escape(msg))


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A callable (done, total) drawing a progress bar on stderr while the block runs (terminal only)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda _done, _total: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f} %"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
