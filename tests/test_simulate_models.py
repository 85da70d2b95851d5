"""`simulate --scenario mixed-models`: a fleet of two GPU models, each written under the name NVML reports for
it, with its ground truth per model in simulation.json (8 H100 training around the clock at ~70 % SM
activity beside 32 T4 held ~15 % of the hours at ~30 %)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuaudit.catalog import identify
from gpuaudit.sim import bulk
from gpuaudit.store import open_dataset, read_json

START = datetime(2026, 9, 7, tzinfo=UTC)  # a Monday
PER_MODEL = ("SELECT gpu_name, count(DISTINCT gpu_uuid) AS gpus, max(mem_total_bytes) AS mem, "
             "sum((n_processes > 0)::INT * interval_s) / sum(interval_s) AS held, "
             "sum(sm_active * interval_s) / sum(interval_s) AS real FROM samples GROUP BY gpu_name ORDER BY gpu_name")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bulk.SimulationSummary]:
    root = tmp_path_factory.mktemp("mixed-models")
    return root, bulk.simulate(root, "mixed-models", None, 7, 900, seed=1, start=START)


def test_both_models_are_written_under_their_nvml_names(fleet: tuple[Path, bulk.SimulationSummary]) -> None:
    root, summary = fleet
    assert summary.gpus == 40
    with open_dataset(root) as ds:
        rows = {r[0]: r[1:] for r in ds.fetchall(PER_MODEL)}
        types = dict(ds.fetchall("SELECT host, min(gpu_type) FROM allocations GROUP BY host"))
    assert set(rows) == {"NVIDIA H100 80GB HBM3", "Tesla T4"}
    assert [identify(n)[0] for n in sorted(rows)] == ["h100-sxm-80gb", "t4"]
    assert rows["NVIDIA H100 80GB HBM3"][0] == 8 and rows["Tesla T4"][0] == 32
    assert rows["Tesla T4"][1] == 15360 * 1024 * 1024
    assert sorted(set(types.values())) == ["h100", "t4"]  # the scheduler's gres type follows the board


def test_the_truth_per_model_is_what_was_written_and_what_the_scenario_states(
        fleet: tuple[Path, bulk.SimulationSummary]) -> None:
    root, _ = fleet
    side = read_json(root, bulk.SIDECAR)
    with open_dataset(root) as ds:
        measured = {r[0]: r[1:] for r in ds.fetchall(PER_MODEL)}
    stated = {"NVIDIA H100 80GB HBM3": (8, 1.0, 0.70), "Tesla T4": (32, 0.15, 0.045)}
    assert set(side["models"]) == set(stated)
    for name, (gpus, held, real) in stated.items():
        truth = side["models"][name]
        assert truth["gpus"] == gpus
        assert truth["documented"] == {"runtime_util": held, "real_util": real}
        assert truth["runtime_util"] == pytest.approx(measured[name][2], abs=1e-5)
        assert truth["real_util"] == pytest.approx(measured[name][3], abs=1e-5)
        assert abs(truth["runtime_util"] - held) <= 0.02 and abs(truth["real_util"] - real) <= 0.02, name
    # The fleet as one: the GPU-weighted mean of the two, as the scenario documents it.
    assert side["documented"]["runtime_util"] == 0.32 and side["documented"]["real_util"] == 0.176
    assert abs(side["real_util"] - 0.176) <= 0.02


def test_a_one_model_scenario_states_its_truth_for_its_one_model(tmp_path: Path) -> None:
    bulk.simulate(tmp_path, "phantom", 8, 1, 1800, seed=1, start=START)
    side = read_json(tmp_path, bulk.SIDECAR)
    assert list(side["models"]) == ["NVIDIA H100 80GB HBM3"]
    h100 = side["models"]["NVIDIA H100 80GB HBM3"]
    assert h100["documented"] == {"runtime_util": 0.60, "real_util": 0.23}
    assert h100["real_util"] == side["real_util"] and h100["gpus"] == 8


def test_the_simulated_agent_sees_each_host_s_board() -> None:
    """`agent run --simulate mixed-models`: the fake NVML names each GPU as its host's board (the T4s without
    GPM), so the agent records both models as it would on those hosts."""
    from gpuaudit.agent.nvml import Nvml
    from gpuaudit.agent.sampler import Sampler
    from gpuaudit.sim.agentfake import build_fake

    fake = build_fake("mixed-models", n_gpus=40, host="sim")
    sampler = Sampler(Nvml(fake), "sim", fake.attribution)
    units = sampler.discover()
    sampler.close()
    names = [u.gpu_name for u in units]
    assert names.count("NVIDIA H100 80GB HBM3") == 8 and names.count("Tesla T4") == 32
    assert {u.gpu_name for u in units if u.gpm is not None} == {"NVIDIA H100 80GB HBM3"}
