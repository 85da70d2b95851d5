"""Usage errors and option values as one `gpuaudit: error: ...` line, and every warning through one escaping
logger. The real console script where its exit status is what is tested."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers import one_error_line, run_bin, run_cli

from gpuaudit.sim import bulk as sim


@pytest.mark.parametrize(("args", "needles"), [
    (["analyze", "--dat", "x"], ["No such option: --dat", "--data", "analyze --help"]),
    (["anlyze"], ["No such command", "Did you mean 'analyze'"]),
    (["simulate", "--gpus", "many"], ["Invalid value for '--gpus'"]),
    (["sql", "--data"], ["requires an argument"]),
    (["agent", "run", "--bogus"], ["No such option: --bogus", "agent run --help"]),
    (["report", "extra", "args"], ["unexpected extra argument"]),
])
def test_usage_errors_are_one_line(args: list[str], needles: list[str]) -> None:
    """Defect: Typer drew usage errors as a 4-6 line box, where the README promises one line."""
    r = run_cli(*args)
    line = one_error_line(r, *needles)
    assert "╭" not in r.stderr and "Usage:" not in r.stderr, r.stderr
    assert len(line) < 400, line


def test_the_real_binary_exits_2_with_one_line() -> None:
    """The exit status and stderr a shell sees from a fresh interpreter, not only the in-process entry's."""
    one_error_line(run_bin("report", "extra", "args"), "unexpected extra argument")


def test_a_huge_unknown_option_is_echoed_cut_short() -> None:
    r = run_cli("sql", "--" + "x" * 100_000)
    line = one_error_line(r, "No such option", "characters")
    assert len(line) < 600, len(line)


def test_help_and_no_arguments_still_show_the_help() -> None:
    r = run_cli("--help")
    assert r.returncode == 0 and "analyze" in r.stdout
    r = run_cli("agent")
    assert r.returncode == 2 and "run" in r.stdout + r.stderr and "error" not in r.stderr


@pytest.mark.parametrize("date", ["2026-13-45", "2026-02-30", "2026-*", "26-03-01", "../x"])
def test_compact_refuses_a_date_that_is_not_a_day(date: str, tmp_path: Path) -> None:
    """Defect: `compact --date 2026-13-45` was accepted (and compacted nothing, silently)."""
    sim.simulate(tmp_path, "phantom", gpus=1, days=0.05, interval_s=900, seed=1)
    one_error_line(run_cli("compact", "--data", str(tmp_path), "--date", date), "--date", "YYYY-MM-DD")


def test_unknown_config_key_is_echoed_cut_short(tmp_path: Path) -> None:
    """Defect: an unknown TOML key was echoed whole: a 200 KB error line."""
    cfg = tmp_path / "costs.toml"
    cfg.write_text("[cloud]\n" + "k" * 200_000 + " = 1\n")
    line = one_error_line(run_cli("analyze", "--data", str(tmp_path), "--config", str(cfg)), "unknown key")
    assert len(line) < 1000 and "200,000 characters" in line, len(line)
    cfg.write_text("[" + "s" * 200_000 + "]\nx = 1\n")
    line = one_error_line(run_cli("analyze", "--data", str(tmp_path), "--config", str(cfg)), "unknown section")
    assert len(line) < 1000, len(line)


@pytest.mark.parametrize("name", ["/dev/zero", "dir", "big.toml"])
def test_config_must_be_a_regular_file_of_a_sane_size(name: str, tmp_path: Path) -> None:
    """Defect (item 4): `--config /dev/zero` read without limit."""
    import resource
    import subprocess
    import sys

    from tests.helpers import REPO

    path = Path(name) if name.startswith("/") else tmp_path / name
    if name == "dir":
        path.mkdir()
    elif name == "big.toml":
        path.write_text("# " + "x" * (2 << 20) + "\n")
    r = subprocess.run([sys.executable, "-m", "gpuaudit", "analyze", "--data", str(tmp_path), "--config", str(path)],
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)),
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")})
    one_error_line(r, "--config", {"dir": "is a directory", "big.toml": "larger than"}.get(name, "regular file"))


# --- item 7: every warning through one escaping logger ---------------------------------------------------------
NASTY_NAME = "bad\x1b[2J\x1b]0;owned\x07\u202eevil.parquet"


@pytest.mark.parametrize("command", [["analyze"], ["report", "--format", "json", "--out", "{tmp}/r"]])
def test_skipped_file_warning_is_prefixed_and_escaped(command: list[str], tmp_path: Path) -> None:
    """Defect: the "skipping unreadable file" warning of analyze/report went through Python's last-resort
    handler, raw: ESC[2J, an OSC title, BEL and U+202E in a pushed file's name reached the terminal."""
    data = tmp_path / "data"
    sim.simulate(data, "phantom", gpus=2, days=1, interval_s=900, seed=1)
    part = next((data / "gpu_samples").glob("host=*/date=*"))
    (part / NASTY_NAME).write_bytes(b"not parquet at all")
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    r = run_cli(*args[:1], "--data", str(data), *args[1:], timeout=300)
    assert r.returncode == 0, r.stderr
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in r.stderr, repr(r.stderr)
    warnings = [line for line in r.stderr.splitlines() if "skipping unreadable file" in line]
    assert len(warnings) == 1, r.stderr
    assert warnings[0].startswith("gpuaudit: warning: skipping unreadable file "), warnings[0]
    assert "\\x1b[2J" in warnings[0] and "\\u202e" in warnings[0], warnings[0]
