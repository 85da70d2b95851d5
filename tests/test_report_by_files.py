"""`report --by` writes chargeback and idle-job files beside the report: report.md and report.html list and link
each of them with its totals (which tie out to the rows of the file), and say nothing of files not written."""

from __future__ import annotations

import csv
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.helpers import run_cli
from tests.report_helpers import open_in_chromium, write_fixed_dataset

from gpuaudit.util import fmt

FILES = (
    "chargeback-user.csv",
    "chargeback-user.json",
    "chargeback-account.csv",
    "chargeback-account.json",
    "idle-jobs.csv",
    "idle-jobs.json",
)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files") / "data"
    write_fixed_dataset(root)
    return root


@pytest.fixture(scope="module")
def out(data: Path) -> Path:
    out = data.parent / "out"
    proc = run_cli("report", "--data", str(data), "--out", str(out), "--by", "user,account")
    assert proc.returncode == 0, proc.stderr
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _totals(path: Path, word: str) -> tuple[int, float, float]:
    rows = _rows(path)
    return len(rows), sum(float(r["held_gpu_hours"]) for r in rows), sum(float(r[f"{word}_usd"]) for r in rows)


def test_markdown_lists_and_links_every_file_with_its_totals(out: Path) -> None:
    md = (out / "report.md").read_text().replace("\\", "")
    section = md[md.index("## Files written with this report") : md.index("\n---\n")]
    links = re.findall(r"\[([^\]]+)\]\(([^)]+)\)", section)
    assert sorted(href for _, href in links) == sorted(FILES)
    for _, href in links:
        assert (out / href).is_file(), href
    for name, what, word in (("chargeback-user", "user", "unused"), ("chargeback-account", "account", "unused"),
                             ("idle-jobs", "job", "idle")):
        n, held, usd = _totals(out / f"{name}.csv", word)
        line = next(x for x in section.splitlines() if f"({name}.csv)" in x)
        assert f"{n:,} {what}{'' if n == 1 else 's'}:" in line, line
        assert f"{held:,.0f} GPU-h held" in line and f"{fmt.money(usd, exact=True)} {word} cost" in line, line
    # the JSON file carries the same rows
    assert (
        len(json.loads((out / "chargeback-user.json").read_text())["rows"])
        == _totals(out / "chargeback-user.csv", "unused")[0]
    )


def test_html_links_exactly_the_files_written(out: Path) -> None:
    html = (out / "report.html").read_text()
    parser = _Links()
    parser.feed(html)
    files = [h for h in parser.hrefs if not h.startswith("#")]
    assert sorted(files) == sorted(FILES)
    assert "#files" in parser.hrefs  # the contents list points at the section
    assert all((out / h).is_file() for h in files)
    n, _, _ = _totals(out / "chargeback-user.csv", "unused")
    assert f"{n:,} users:" in html


def test_without_by_no_file_is_listed(data: Path, tmp_path: Path) -> None:
    proc = run_cli("report", "--data", str(data), "--out", str(tmp_path / "plain"), "--format", "html,md")
    assert proc.returncode == 0, proc.stderr
    for name in ("report.md", "report.html"):
        text = (tmp_path / "plain" / name).read_text()
        assert "Files written with this report" not in text and "chargeback-" not in text


def test_chromium_shows_the_files_and_fetches_nothing(out: Path) -> None:
    """Opened as a reader opens it: the list is rendered, each link resolves to a file beside the report, and the
    links load nothing (the page asks only for itself)."""
    probes = {"hrefs": "Array.from(document.querySelectorAll('#files a')).map(a => a.href)"}
    visit = open_in_chromium(out / "report.html", probes=probes)
    assert "Files written with this report" in visit.text
    assert not visit.console_errors, visit.console_errors
    assert visit.requests == [visit.url]
    resolved = sorted(Path(h.removeprefix("file://")).name for h in visit.probes["hrefs"])
    assert resolved == sorted(FILES)
    assert all((out / name).is_file() for name in resolved)


def test_without_allocations_nothing_claims_zero_hours_allocated(out: Path) -> None:
    """Review of issue 26.7: on a dataset with no scheduler allocations the chargeback line said "0.0 GPU-h
    allocated" (and the CSV column 0) while the ledger showed allocated = held (inferred from processes):
    unknown is not zero. The files leave allocated empty and the line says none were imported."""
    md = (out / "report.md").read_text().replace("\\", "")
    section = md[md.index("## Files written with this report") : md.index("\n---\n")]
    assert "GPU-h allocated" not in section, section
    for name in ("chargeback-user", "chargeback-account", "idle-jobs"):
        line = next(x for x in section.splitlines() if f"({name}.csv)" in x)
        assert "no scheduler allocations imported" in line, line
        rows = _rows(out / f"{name}.csv")
        assert rows and all(r["allocated_gpu_hours"] == "" for r in rows), (name, rows[:2])
        doc = json.loads((out / f"{name}.json").read_text())
        assert all(r["allocated_gpu_hours"] is None for r in doc["rows"]), name
