"""What one `gpuaudit sql` may reach and take: no file outside the dataset through DuckDB's temp directory, a
deadline, a memory limit, a row limit for a terminal, and a query file that is a regular file of a sane size.
Real DuckDB over a real simulated dataset, the real CLI."""

from __future__ import annotations

import csv
import io
import os
import pty
import resource
import select
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from tests.helpers import REPO, one_error_line, run_cli

from gpuaudit.sim import bulk as sim
from gpuaudit.store import sqlquery

ENDLESS = "SELECT count(*) FROM range(10000000000000)"


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sqllimits") / "data"
    sim.simulate(root, "phantom", gpus=2, days=1, interval_s=900, seed=2)
    return root


def test_sql_cannot_read_files_in_duckdb_default_temp_directory(data: Path, tmp_path: Path) -> None:
    """Defect: DuckDB's temp directory (<cwd>/.tmp) was among the allowed paths, so a query read a Parquet file
    put there, outside the dataset."""
    (tmp_path / ".tmp").mkdir()
    secret = tmp_path / ".tmp" / "x.parquet"
    duckdb.sql(f"COPY (SELECT 'secret' AS s) TO '{secret}'")
    r = run_cli("sql", "--data", str(data), "--format", "csv", f"SELECT * FROM read_parquet('{secret}')",
                cwd=tmp_path)
    one_error_line(r, "refused")
    assert "secret" not in r.stdout


def test_sql_spills_to_a_private_directory_removed_afterwards(data: Path, tmp_path: Path) -> None:
    """Defect: the spill directory was `<cwd>/.tmp`, a place others can fill; now a fresh mkdtemp (mode 0700,
    unguessable) that is gone when the command ends."""
    r = run_cli("sql", "--data", str(data), "--format", "csv",
                "SELECT current_setting('temp_directory') AS t, current_setting('memory_limit') AS m", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    spill = Path(_csv(r.stdout)[1][0])
    assert spill.is_absolute() and spill.name.startswith("gpuaudit-sql-"), spill
    assert not str(spill).startswith(str(tmp_path)), spill
    assert not spill.exists(), "the private spill directory outlived the command"


def test_sql_timeout_stops_an_endless_query(data: Path) -> None:
    """Defect: no statement timeout: `SELECT count(*) FROM range(10^13)` ran until killed."""
    t0 = time.monotonic()
    r = run_cli("sql", "--data", str(data), "--timeout", "1", ENDLESS, timeout=120)
    one_error_line(r, "ran longer than 1 s", "--timeout")
    assert time.monotonic() - t0 < 60


def test_sql_has_a_default_timeout_and_memory_limit(data: Path) -> None:
    """Defect: no default bounds at all. The defaults: a 600 s deadline and half this machine's memory."""
    r = run_cli("sql", "--help")
    assert "--timeout" in r.stdout and "600" in r.stdout and "--memory-limit" in r.stdout, r.stdout
    total = sqlquery.memory_total_bytes()
    assert 0 < total <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    r = run_cli("sql", "--data", str(data), "--format", "csv",
                "SELECT current_setting('memory_limit') AS m")
    assert r.returncode == 0, r.stderr
    assert sqlquery.memory_limit_bytes("50%", total) == total // 2
    shown = _csv(r.stdout)[1][0]  # DuckDB shows it in its own units (e.g. 11.7 GiB)
    value, unit = shown.split()
    limit = float(value) * {"MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]
    assert abs(limit - total / 2) / (total / 2) < 0.02, (shown, total)


def test_sql_memory_limit_stops_a_query_that_cannot_spill(data: Path) -> None:
    """--memory-limit is enforced: a list aggregate (which DuckDB cannot spill) over 10^8 values needs far more
    than 64 MiB, and fails in one line instead of growing."""
    r = run_cli("sql", "--data", str(data), "--memory-limit", "64MiB",
                "SELECT length(list(range)) FROM range(100000000)", timeout=120)
    line = one_error_line(r, "query failed")
    assert "memory" in line.lower(), line


def test_sql_memory_limit_values_are_checked() -> None:
    assert sqlquery.memory_limit_bytes("4GB") == 4 * 10**9
    assert sqlquery.memory_limit_bytes("512MiB") == 512 * 2**20
    for bad in ("lots", "0%", "150%", "1MB", "-4GB"):
        with pytest.raises(Exception, match="--memory-limit"):
            sqlquery.memory_limit_bytes(bad)
    one_error_line(run_cli("sql", "--memory-limit", "lots", "SELECT 1"), "--memory-limit")


def _on_terminal(args: list[str]) -> tuple[str, str]:
    """Run `gpuaudit ARGS` with stdout on a pseudo-terminal (as a user at a shell); stdout and stderr."""
    leader, follower = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "gpuaudit", *args], stdout=follower, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "200"})
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            p.kill()
            raise AssertionError("no output from the terminal for 60 s")
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert p.stderr is not None
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n"), err


def test_sql_table_to_a_terminal_is_cut_at_the_default_limit_with_a_note(data: Path) -> None:
    """Defect: `SELECT * FROM range(10^6)` as a table to a terminal printed a million lines."""
    out, err = _on_terminal(["sql", "--data", str(data), "SELECT * FROM range(5000)"])
    rows = [line for line in out.splitlines() if line.strip().isdigit()]
    assert len(rows) == 1000 and rows[-1].strip() == "999", (len(rows), out[-300:])
    assert "gpuaudit: note: showing the first 1,000 rows" in err and "--limit 0" in err, err


def test_sql_limit_option_cuts_any_output_and_says_so(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    r = run_cli("sql", "--data", str(data), "--limit", "5", "--format", "csv", "--out", str(out),
                "SELECT * FROM range(100)")
    assert r.returncode == 0, r.stderr
    assert _csv(out.read_text()) == [["range"], ["0"], ["1"], ["2"], ["3"], ["4"]]
    assert "showing the first 5 rows" in r.stderr
    r = run_cli("sql", "--data", str(data), "--limit", "5", "SELECT * FROM range(5)")
    assert r.returncode == 0 and "note" not in r.stderr, r.stderr  # exactly 5: nothing was cut


def test_sql_to_a_pipe_is_not_cut(data: Path) -> None:
    r = run_cli("sql", "--data", str(data), "--format", "csv", "SELECT * FROM range(1500)")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1501 and "note" not in r.stderr


def test_sql_query_starting_with_dashes_goes_after_double_dash(data: Path) -> None:
    """Defect: a query starting with a `--` comment was taken for an option, in a box, with no way out named."""
    query = "-- GPUs per host\nSELECT count(DISTINCT gpu_uuid) AS gpus FROM samples"
    r = run_cli("sql", "--data", str(data), "--format", "csv", "--", query)
    assert r.returncode == 0 and _csv(r.stdout) == [["gpus"], ["2"]], (r.stdout, r.stderr)
    one_error_line(run_cli("sql", "--data", str(data), query), "goes after `--`")
    assert "sql --" in " ".join(run_cli("sql", "--help").stdout.split())


# --- the query file: a regular file of a sane size --------------------------------------------------------
def _capped_memory() -> None:
    """A child that reads /dev/zero whole (the defect) fails fast on this cap instead of taking the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.parametrize("name", ["/dev/zero", "fifo", "big.sql", "dir"])
def test_sql_file_must_be_a_regular_file_of_a_sane_size(name: str, data: Path, tmp_path: Path) -> None:
    """Defect: `sql --file /dev/zero` read without limit (12.9 GB RSS); a FIFO blocked forever."""
    path = Path(name) if name.startswith("/") else tmp_path / name
    if name == "fifo":
        os.mkfifo(path)
    elif name == "big.sql":
        path.write_text("SELECT 1 " + "-" * (2 << 20))
    elif name == "dir":
        path.mkdir()
    r = subprocess.run([sys.executable, "-m", "gpuaudit", "sql", "--data", str(data), "--file", str(path)],
                       capture_output=True, text=True, timeout=60, preexec_fn=_capped_memory,
                       env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    one_error_line(r, "--file", "regular file" if name != "big.sql" else "larger than")
