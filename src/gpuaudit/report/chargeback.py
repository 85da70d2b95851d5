"""Chargeback / showback files next to the report: chargeback-<key>.csv / .json per `--by` key and
idle-jobs.csv / .json (the tables of AnalysisResult.chargeback, analysis/chargeback.py)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.errors import GpuauditError
from gpuaudit.util.jsonio import json_text, plain

if TYPE_CHECKING:
    from gpuaudit.analysis.figure import Table
    from gpuaudit.analysis.result import AnalysisResult
    from gpuaudit.report.model import LinkedFile

_BY_KEYS = ("account", "user", "partition", "namespace")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell that starts with these


def parse_by(value: str | Iterable[str] | None) -> list[str]:
    """'account,user' -> ['account', 'user']; an unknown key is a one-line error naming the known ones."""
    if not value:
        return []
    items = value.split(",") if isinstance(value, str) else [p for v in value for p in v.split(",")]
    out = []
    for item in (i.strip().lower() for i in items):
        if not item:
            continue
        if item not in _BY_KEYS:
            raise GpuauditError(f"unknown --by {item!r}; choose from {', '.join(_BY_KEYS)}")
        if item not in out:
            out.append(item)
    return out


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value  # names come from the data: never a formula in someone's spreadsheet
    return "" if value is None else value


def _table_csv(table: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    names = table.column_names()
    w.writerow(names)
    for row in table.rows:
        w.writerow([_cell(row.get(n)) for n in names])
    return buf.getvalue()


def _table_json(table: Table, extra: dict[str, Any]) -> str:
    return json_text({**extra, **plain(table, rich=True)}, indent=2) + "\n"


def chargeback_files(result: AnalysisResult, out: Path, by: Iterable[str]) -> list[tuple[Path, str]]:
    """(path, text) of the chargeback files for the `by` keys (none when `by` is empty)."""
    keys = list(by)
    if not keys:
        return []
    charge = result.chargeback
    if charge is None:
        raise GpuauditError("this result has no chargeback (analyze it again with this version)")
    meta = {"usd_per_gpu_hour": charge.usd_per_gpu_hour,
            "basis": result.ledger.basis if result.ledger is not None else "processes"}
    files: list[tuple[Path, str]] = []
    for key in keys:
        table = charge.by(key)
        files.append((out / f"chargeback-{key}.csv", _table_csv(table)))
        files.append((out / f"chargeback-{key}.json", _table_json(table, meta)))
    files.append((out / "idle-jobs.csv", _table_csv(charge.idle_jobs)))
    files.append((out / "idle-jobs.json", _table_json(charge.idle_jobs, meta)))
    return files


def _sum(table: Table, column: str) -> float:
    return float(sum(row.get(column) or 0.0 for row in table.rows))


def _totals(table: Table, what: str, usd_per_gpu_hour: float, allocations: bool) -> str:
    """A breakdown file's totals, as its rows sum: how many rows, GPU-hours allocated / held / unused (chargeback)
    or idle (idle jobs), and their cost, each under the name its file's columns carry."""
    from gpuaudit.util import fmt

    word = "unused" if "unused_gpu_hours" in {c.name for c in table.columns} else "idle"
    table.require("allocated_gpu_hours", "held_gpu_hours", f"{word}_gpu_hours", f"{word}_usd")
    allocated = (f"{fmt.hours(_sum(table, 'allocated_gpu_hours'))} allocated" if allocations
                 else "no scheduler allocations imported")
    return (f"{fmt.count(len(table.rows), what)}: {allocated}, "
            f"{fmt.hours(_sum(table, 'held_gpu_hours'))} held, {fmt.hours(_sum(table, f'{word}_gpu_hours'))} {word}, "
            f"{fmt.money(_sum(table, f'{word}_usd'), exact=True)} {word} cost at ${usd_per_gpu_hour:,.2f}/GPU-h")


def chargeback_links(result: AnalysisResult, by: Iterable[str]) -> tuple[LinkedFile, ...]:
    """The files `chargeback_files` writes for `by`, as the report lists and links them, with their totals."""
    from gpuaudit.report.model import LinkedFile

    keys = list(by)
    charge = result.chargeback
    if not keys or charge is None:
        return ()
    rate = charge.usd_per_gpu_hour
    allocations = result.ledger is not None and result.ledger.basis != "processes"
    out = [LinkedFile(f"Chargeback by {key}", _totals(charge.by(key), key, rate, allocations),
                      (("CSV", f"chargeback-{key}.csv"), ("JSON", f"chargeback-{key}.json"))) for key in keys]
    out.append(LinkedFile("Idle jobs", _totals(charge.idle_jobs, "job", rate, allocations),
                          (("CSV", "idle-jobs.csv"), ("JSON", "idle-jobs.json"))))
    return tuple(out)
