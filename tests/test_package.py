"""The wheel ships sql/ and templates/, and works from a fresh virtualenv."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from tests.helpers import REPO
from tests.test_store import samples_frame

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
