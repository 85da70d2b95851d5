"""The command line as a whole: help everywhere, README coverage, version, import discipline."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import typer.main
from tests.helpers import REPO, run_bin

from gpuaudit import __version__, schema
from gpuaudit.cli import app


def _commands() -> list[tuple[str, Any]]:
    root = typer.main.get_command(app)
    out: list[tuple[str, Any]] = []

    def walk(cmd: Any, path: str) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}".strip())
        else:
            out.append((path, cmd))

    walk(root, "")
    return out


def test_every_command_has_help_text() -> None:
    cmds = _commands()
    assert {"sql", "compact"} <= {p for p, _ in cmds}
    for path, cmd in cmds:
        assert (cmd.help or "").strip(), f"`gpuaudit {path}` has no help text"
        for param in cmd.params:
            if getattr(param, "param_type_name", "") == "option" and not getattr(param, "hidden", False):
                assert (param.help or "").strip(), f"`gpuaudit {path} {param.opts[0]}` has no help text"


def test_every_command_appears_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    for path, _ in _commands():
        assert f"gpuaudit {path}" in readme, f"`gpuaudit {path}` is not documented in README.md"


def test_readme_schema_tables_match_the_contract() -> None:
    readme = (REPO / "README.md").read_text()
    for table in schema.TABLES:
        assert schema.markdown_table(table) in readme, f"README schema table for {table} is stale"


def test_readme_starts_with_the_two_commands() -> None:
    head = "\n".join((REPO / "README.md").read_text().splitlines()[:8])
    assert "make demo" in head and "make test" in head
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci


def test_version_and_help_run() -> None:
    """The real binary (`python -m gpuaudit`, what the console script runs) in a fresh interpreter."""
    r = run_bin("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gpuaudit {__version__}"
    r = run_bin("--help")
    assert r.returncode == 0 and "sql" in r.stdout


@pytest.mark.parametrize("code", [
    "import gpuaudit",
    "import gpuaudit.cli",
    "from gpuaudit.cli import app; from typer.testing import CliRunner; CliRunner().invoke(app, ['--help'])",
])
def test_import_and_help_stay_light(code: str) -> None:
    heavy = ["polars", "pynvml", "prometheus_api_client", "matplotlib", "pyarrow", "pandas", "numpy"]
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "", f"{code!r} imported {r.stdout.strip()}"


def test_analysis_and_report_never_import_typer_or_pynvml() -> None:
    probe = (
        "import importlib, pkgutil, sys\n"
        "for pkg in ('gpuaudit.analysis', 'gpuaudit.report'):\n"
        "    try:\n"
        "        m = importlib.import_module(pkg)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    for info in pkgutil.walk_packages(m.__path__, pkg + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "print(','.join(x for x in ('typer', 'pynvml', 'click') if x in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_shell_completion_script_is_offered() -> None:
    """Typer finds the shell from the command's parent process (shellingham), not from its arguments: run in
    this process under a detached pytest (nohup, CI) it said "Shell  not supported". A user types it in a
    shell, so the test does too (`; exit $?` keeps bash from exec-ing the command in its own place)."""
    r = subprocess.run(["bash", "-c", f"{sys.executable} -m gpuaudit --show-completion; exit $?"],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "SHELL": "/bin/bash"})
    assert r.returncode == 0 and "complete -o default -F" in r.stdout, r.stderr


def test_readme_states_the_schema_version_and_mig_instance_as_they_are() -> None:
    """Issue 26.15: README said the schema version is "currently 1" (files say schema.SCHEMA_VERSION) and
    `mig_instance` "null for a whole GPU" while gpu_hours and sql/gpu_summary.sql show -1."""
    readme = (REPO / "README.md").read_text()
    assert f"currently **{schema.SCHEMA_VERSION}**" in readme
    assert "-1 for a whole GPU" in " ".join(readme.split())
