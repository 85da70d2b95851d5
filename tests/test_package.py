"""The wheel ships sql/ and templates/, and works from a fresh virtualenv; its base install (the agent's) works
without the analysis stack."""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import duckdb
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from tests.helpers import REPO
from tests.store_helpers import samples_frame

from gpuaudit import schema, store


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
                   check=True, capture_output=True)
    [whl] = out.glob("gpuaudit-*.whl")
    return whl


def test_wheel_contains_sql_and_templates(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for sql in (REPO / "sql").glob("*.sql"):
        assert f"gpuaudit/sql/{sql.name}" in names
    templates = [p for p in (REPO / "templates").rglob("*") if p.is_file()]
    assert templates, "templates/ is empty"
    for t in templates:
        assert f"gpuaudit/templates/{t.relative_to(REPO / 'templates')}" in names
    assert "gpuaudit/py.typed" in names  # PEP 561: type checkers use the package's own annotations
    assert "gpuaudit/catalog/models.toml" in names  # issue 25: the GPU model catalogue is data in the package


def test_wheel_runs_a_canned_query_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True)
    # Dependencies come from the test environment (no download); plain path lines in a .pth do not
    # run the editable-install hook, so `gpuaudit` itself resolves to the wheel.
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    data = tmp_path / "data"
    store.write_table(data, schema.SAMPLES, samples_frame(60))
    r = subprocess.run([str(venv / "bin" / "gpuaudit"), "sql", "--data", str(data), "--file",
                        "sql/fleet_summary.sql", "--format", "json"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["sample_rows"] == 60
    where = subprocess.run([str(py), "-c", "import gpuaudit; print(gpuaudit.__file__)"],
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(site)


# ------------------------------------------------------------------------- the agent's lean install

ANALYSIS_STACK = ("polars", "numpy", "pyarrow", "matplotlib", "jinja2", "prometheus_api_client")


def wheel_requirements(whl: Path) -> list[str]:
    z = zipfile.ZipFile(whl)
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    return email.message_from_bytes(z.read(meta)).get_all("Requires-Dist") or []


def dependency_closure(requirements: list[str], extras: frozenset[str] = frozenset()) -> list[metadata.Distribution]:
    """The distributions `requirements` pull in (with `extras` of the root), as installed in this test env."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, extras) for r in requirements]
    while todo:
        text, active = todo.pop()
        req = Requirement(text)
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (active or {""})):
            continue
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(req.name)
        found[key[0]] = dist
        todo += [(r, frozenset(req.extras)) for r in dist.requires or []]
    return list(found.values())


@pytest.fixture(scope="module")
def lean_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed WITHOUT extras: only the base requirements' closure, linked from
    this test env (offline), so anything the code imports beyond what the wheel declares is missing."""
    venv = tmp_path_factory.mktemp("lean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True)
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for dist in dependency_closure(wheel_requirements(wheel)):
        base = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            if not (site / top).exists():
                (site / top).symlink_to(base / top)
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout  # every declared requirement is satisfied
    return venv


def _run(venv: Path, *args: str, cwd: Path, exe: str = "gpuaudit") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the test env leaks in
    return subprocess.run([str(venv / "bin" / exe), *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def test_lean_install_runs_the_agent_without_the_analysis_stack(lean_venv: Path, tmp_path: Path) -> None:
    probe = f"import importlib.util as u; print([m for m in {ANALYSIS_STACK!r} if u.find_spec(m)])"
    r = _run(lean_venv, "-c", probe, cwd=tmp_path, exe="python")
    assert r.stdout.strip() == "[]", r.stderr
    data = tmp_path / "data"
    # `static` drives the real sampler, buffer and (forked) store writer through the fake NVML.
    r = _run(lean_venv, "agent", "run", "--simulate", "static", "--once", "--interval", "0.5", "--host", "n1",
             "--data", str(data), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    shared = tmp_path / "shared"  # --upload to a shared directory: the uploader (`gpuaudit push`) is lean too
    r = _run(lean_venv, "agent", "run", "--simulate", "static", "--once", "--interval", "0.5", "--host", "n1",
             "--data", str(data), "--upload", str(shared), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(list((shared / "gpu_samples").rglob("*.parquet"))) == 2
    # --metrics-listen (issue 28): prometheus-client is in the base install
    r = _run(lean_venv, "agent", "run", "--simulate", "static", "--once", "--interval", "0.5", "--host", "n2",
             "--data", str(tmp_path / "data-metrics"), "--metrics-listen", "127.0.0.1:0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _run(lean_venv, "agent", "status", "--simulate", "static", "--host", "n1", "--json", "--data", str(data),
             cwd=tmp_path)
    assert r.returncode in (0, 3), r.stderr  # 3: NVML works, no agent running now (the --once runs ended)
    status = json.loads(r.stdout)
    assert status["nvml_error"] is None and len(status["devices"]) == 8 and status["agent"]["rows_written"] == 16
    r = _run(lean_venv, "compact", "--data", str(data), cwd=tmp_path)  # a node compacts its own data
    assert r.returncode == 0, r.stderr
    files = list((data / "gpu_samples").rglob("*.parquet"))
    assert len(files) == 1  # two flushes merged into one
    [row] = duckdb.connect().execute(
        f"SELECT count(*), count(DISTINCT gpu_uuid), min(sm_active) FROM '{files[0]}'").fetchall()
    assert row == (16, 8, pytest.approx(0.4))


def test_lean_install_says_in_one_line_which_extra_a_command_needs(lean_venv: Path, tmp_path: Path) -> None:
    r = _run(lean_venv, "report", "--data", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == "gpuaudit: error: gpuaudit report needs the analysis libraries: pip install 'gpuaudit[full]'\n"
    # The workload scenarios of `agent run --simulate` are the numpy load model: the full install's.
    r = _run(lean_venv, "agent", "run", "--simulate", "phantom", "--once", "--data", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "gpuaudit: error: gpuaudit agent run needs the analysis libraries: pip install 'gpuaudit[full]'"]


def test_a_missing_module_that_is_no_extra_stays_a_bug() -> None:
    from gpuaudit.cli._common import missing_extra_message

    assert missing_extra_message(ModuleNotFoundError(name="gpuaudit.nope"), "gpuaudit x") is None
    assert missing_extra_message(ModuleNotFoundError(name="polars.io"), "gpuaudit x") == \
        "gpuaudit x needs the analysis libraries: pip install 'gpuaudit[full]'"
