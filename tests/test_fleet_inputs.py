"""The fleet a user states (--fleet-gpus, [analysis] fleet_gpus, [on_prem] owned_gpus) against the GPUs the
dataset shows, and --data that is not a dataset directory: bad input is refused in one line, through the CLI on
a dataset `gpuaudit simulate` wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import one_error_line, run_cli

GPUS = 16


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet") / "data"
    r = run_cli("simulate", "--gpus", str(GPUS), "--days", "1", "--interval", "300", "--seed", "4",
                "--data", str(root))
    assert r.returncode == 0, r.stderr
    return root


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_a_fleet_smaller_than_the_gpus_seen_is_refused(sim: Path, tmp_path: Path, command: str) -> None:
    """Issue 26.5: `--fleet-gpus 4` with 16 GPUs seen priced a 4-GPU fleet ("peak demand 4.0 GPUs", all cloud
    $906k → $279k): a fleet smaller than the GPUs that reported is refused, in one line."""
    out = ["--out", str(tmp_path / "r")] if command == "report" else []
    r = run_cli(command, "--data", str(sim), "--fleet-gpus", "4", *out, timeout=120)
    one_error_line(r, "--fleet-gpus 4", f"{GPUS} GPUs", "seen")
    assert not (tmp_path / "r" / "report.html").exists()


def test_a_configured_fleet_smaller_than_the_gpus_seen_is_refused(sim: Path, tmp_path: Path) -> None:
    """Issue 26.5: the same fleet set in the config file is refused too, naming the key and the file."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[analysis]\nfleet_gpus = 15\n")
    r = run_cli("analyze", "--data", str(sim), "--config", str(cfg), timeout=120)
    one_error_line(r, "analysis.fleet_gpus", "15", str(cfg), f"{GPUS} GPUs")


def test_a_fleet_as_large_as_the_gpus_seen_or_larger_is_accepted(sim: Path) -> None:
    """Issue 26.5: the boundary: the GPUs seen, or more (nodes without an agent), still analyze."""
    for n in (GPUS, 2 * GPUS):
        r = run_cli("analyze", "--json", "--data", str(sim), "--fleet-gpus", str(n), timeout=120)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["costs"]["fleet_gpus"] == n


@pytest.mark.parametrize("owned", [GPUS + 1, 160, 100_000])
def test_more_owned_gpus_than_the_fleet_are_refused(sim: Path, tmp_path: Path, owned: int) -> None:
    """Issue 26.6: `owned_gpus = 160` with 16 GPUs seen read "$5,014,642 less than staying as is" (staying paid
    for 160, 100000 gave $3.39 billion) beside a warning that owning "keeps 16 and sells the rest": the fleet,
    the owned count and every plan could not agree. More owned GPUs than the fleet is refused in one line."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[on_prem]\nowned_gpus = {owned}\n")
    r = run_cli("analyze", "--data", str(sim), "--config", str(cfg), timeout=120)
    line = one_error_line(r, "on_prem.owned_gpus", f"{owned:,}", f"{GPUS} GPUs", "--fleet-gpus")
    assert "sells the rest" not in line


def test_owned_gpus_within_a_stated_fleet_agree_everywhere(sim: Path, tmp_path: Path) -> None:
    """Issue 26.6: owned GPUs up to the fleet (here a stated 20-GPU fleet owning 20) are accepted, and the
    fleet, the owned count and staying as is agree; no warning about selling."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[on_prem]\nowned_gpus = 20\n")
    r = run_cli("analyze", "--json", "--data", str(sim), "--config", str(cfg), "--fleet-gpus", "20", timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["costs"]["fleet_gpus"] == 20 and doc["costs"]["owned_gpus"] == 20
    stay = next(s for s in doc["costs"]["scenarios"] if s["id"] == "stay-as-is")
    assert stay["owned_gpus"] == 20
    assert not any("sells the rest" in w for w in doc["warnings"])


def test_no_source_says_it_keeps_some_and_sells_the_rest() -> None:
    """Issue 26.6: the wording that contradicted stay-as-is is gone from the product."""
    src = Path(__file__).parents[1] / "src"
    assert not [p for p in src.rglob("*.py") if "sells the rest" in p.read_text()]


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_data_that_is_a_file_says_so(tmp_path: Path, command: str) -> None:
    """Issue 26.14: `analyze --data some/file.json` said "no GPU samples … record some first": a file is not a
    dataset directory, and the line says so."""
    f = tmp_path / "file.json"
    f.write_text("{}")
    out = ["--out", str(tmp_path / "r")] if command == "report" else []
    r = run_cli(command, "--data", str(f), *out, timeout=120)
    line = one_error_line(r, str(f), "not a directory")
    assert "record some first" not in line
