"""A GPU's model from what it reports (NVML / nvidia-smi names, dcgm-exporter `modelName`, Slurm gres types,
MIG slices) as a stable key, and the shipped price catalogue with a source and a date for every figure,
overridable per model in the config ([models."<key>"]), so that a T4 fleet is never priced as H100s."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.analysis_helpers import ends, gpu_rows, proc_rows, write
from tests.helpers import REPO, one_error_line, run_cli

from gpuaudit.analysis.config import NEW_MODEL_FIGURES, load_config, model_toml_lines
from gpuaudit.catalog import FIGURES, ModelSpec, catalogue, identify, model_key, slug
from gpuaudit.errors import GpuauditError

# Names as real collectors report them. NVML / nvidia-smi product names (the agent's gpu_name), dcgm-exporter
# `modelName` labels as seen in public exporter output (e.g. modelName="Tesla T4" on GKE,
# modelName="NVIDIA A100-SXM4-40GB" on a DGX A100, modelName="NVIDIA H100 PCIe"), Kubernetes GPU feature
# discovery's nvidia.com/gpu.product (dashes for spaces), GCP accelerator types, Slurm gres types.
REPORTED = [
    ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),          # NVML, H100 SXM5
    ("NVIDIA H100 PCIe", "h100-pcie-80gb"),              # dcgm-exporter modelName
    ("NVIDIA H200", "h200"),                             # NVML, H200 SXM
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),              # dcgm-exporter on DGX A100
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ("NVIDIA-A100-SXM4-80GB", "a100-sxm-80gb"),          # nvidia.com/gpu.product label
    ("Tesla T4", "t4"),                                  # dcgm-exporter on GKE
    ("nvidia-tesla-t4", "t4"),                           # GCP accelerator type
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA A10G", "a10g"),                             # AWS g5
    ("NVIDIA A10", "a10"),
    ("Tesla V100-SXM2-16GB", "v100"),
    ("Tesla V100-PCIE-32GB", "v100"),
    ("Tesla V100S-PCIE-32GB", "v100"),
    # a MIG slice belongs to its parent's model (NVML names the slice after the parent)
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "h100-sxm-80gb"),
    ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB MIG 7g.80gb", "a100-sxm-80gb"),
    # Slurm gres types (gres.conf Type=, sacct AllocTRES gres/gpu:<type>)
    ("h100", "h100-sxm-80gb"),
    ("a100_80g", "a100-sxm-80gb"),
    ("a100", "a100-40gb"),
    ("gpu:a100:4", "a100-40gb"),
    ("t4", "t4"),
    ("l40s", "l40s"),
    ("v100", "v100"),
    ("  NVIDIA L4  ", "l4"),
]


@pytest.mark.parametrize(("name", "key"), REPORTED)
def test_reported_names_map_to_stable_keys(name: str, key: str) -> None:
    assert identify(name) == (key, True)
    assert model_key(name) == key


def test_memory_tells_an_a100_80gb_from_a_40gb_where_the_name_does_not() -> None:
    """A Slurm gres type "a100" says nothing of memory; NVML's mem_total_bytes does."""
    assert identify("a100", memory_bytes=81920 * 2**20) == ("a100-sxm-80gb", True)
    assert identify("a100", memory_bytes=40960 * 2**20) == ("a100-40gb", True)
    assert identify("NVIDIA A100-SXM4-40GB", memory_bytes=81920 * 2**20) == ("a100-40gb", True)  # the name wins


@pytest.mark.parametrize(("name", "suggested"), [
    ("NVIDIA H100 NVL", "h100-nvl"),          # 94 GB, another product and price than the SXM
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ("NVIDIA L40", "l40"),                    # not an L40S, not an L4
    ("AMD Instinct MI300X", "amd-instinct-mi300x"),
    ("", "unknown"),
    ("\x1b[31m!!\x00", "31m"),
    ("x" * 500, "x" * 40),
])
def test_unknown_names_get_a_suggested_key_and_are_flagged(name: str, suggested: str) -> None:
    assert identify(name) == (suggested, False)
    assert re.fullmatch(r"[a-z0-9-]+", slug(name))


def test_catalogue_covers_the_issue_models_and_every_figure_has_a_source() -> None:
    cat = catalogue()
    for key in ("h200", "h100-sxm-80gb", "h100-pcie-80gb", "a100-sxm-80gb", "a100-40gb", "l40s", "l4", "a10g",
                "a10", "t4", "v100"):
        assert key in cat, key
    for key, spec in cat.items():
        assert isinstance(spec, ModelSpec) and spec.key == key and spec.name and spec.instance
        # every model can be rented: the cloud price is never missing
        assert spec.instance_usd_per_hour and spec.gpus_per_instance, key
        for f in FIGURES:
            value = getattr(spec, f)
            if value is None:
                # only purchase prices and throughput figures are left out untraced
                assert f in ("hardware_usd_per_gpu", "dense_fp16_tflops"), (key, f)
                continue
            assert value > 0, (key, f)
            src = spec.sources[f]
            assert src.text and src.url.startswith("https://"), (key, f)
            assert re.fullmatch(r"\d{4}(-\d{2}(-\d{2})?)?", src.date), (key, f, src.date)
        assert spec.idle_watts_per_gpu is not None and spec.busy_watts_per_gpu is not None
        assert spec.idle_watts_per_gpu < spec.busy_watts_per_gpu, key
    # the issue's example: a T4 rents for about $0.53 an hour, not an H100's $6.88
    assert cat["t4"].usd_per_gpu_hour == pytest.approx(0.526)
    assert cat["h100-sxm-80gb"].usd_per_gpu_hour == pytest.approx(6.88)
    assert catalogue() is not catalogue()  # callers get their own dict


def test_docs_table_agrees_with_the_catalogue() -> None:
    """docs/analyzer.md lists every model with its rent, hardware price, power and memory."""
    text = (REPO / "docs" / "analyzer.md").read_text(encoding="utf-8")
    section = text.split("## GPU model catalogue", 1)[1].split("\n## ", 1)[0]
    for key, spec in catalogue().items():
        row = next((line for line in section.splitlines() if line.startswith(f"| `{key}` |")), None)
        assert row is not None, key
        assert f"{spec.instance_usd_per_hour:g}" in row, (key, row)
        if spec.hardware_usd_per_gpu is not None:
            assert f"{spec.hardware_usd_per_gpu:,.0f}" in row, (key, row)
        assert f"{spec.busy_watts_per_gpu:g}" in row, (key, row)
        last = row.rstrip(" |").rsplit("|", 1)[1].strip()  # the throughput column
        assert last == (f"{spec.dense_fp16_tflops:g}" if spec.dense_fp16_tflops else "— (none traceable)"), (key, row)


def _cfg(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_config_overrides_any_figure_per_model_and_records_where_it_came_from(tmp_path: Path) -> None:
    p = _cfg(tmp_path, '[models."t4"]\ninstance_usd_per_hour = 0.35\ngpus_per_instance = 1\n'
                       'hardware_usd_per_gpu = 2500\n\n[models."h100-sxm-80gb"]\nbusy_watts_per_gpu = 650\n')
    cfg = load_config(p)
    t4 = cfg.models["t4"]
    assert (t4.instance_usd_per_hour, t4.gpus_per_instance, t4.hardware_usd_per_gpu) == (0.35, 1, 2500.0)
    assert t4.busy_watts_per_gpu == catalogue()["t4"].busy_watts_per_gpu  # untouched figures stay
    assert t4.sources["hardware_usd_per_gpu"].text == f"set in {p}"
    assert cfg.sources["models.t4.instance_usd_per_hour"] == str(p)
    assert cfg.models["h100-sxm-80gb"].busy_watts_per_gpu == 650.0
    assert load_config().models == catalogue()  # no file: the catalogue as shipped


@pytest.mark.parametrize(("toml", "needles"), [
    ('[models."t44"]\ninstance_usd_per_hour = 1', ['models."t44"', "not a model in the catalogue",
                                                   "known: a10, a100-40gb", "t4", "v100"]),
    ('[models."t4"]\nprice = 1', ['unknown key models."t4".price', "known: instance_usd_per_hour"]),
    ('[models."t4"]\ninstance_usd_per_hour = "cheap"', ['models."t4".instance_usd_per_hour must be a number']),
    ('[models."t4"]\ngpus_per_instance = 0', ['models."t4".gpus_per_instance must be an integer >= 1']),
    ('[models."t4"]\nhardware_usd_per_gpu = -1', ['models."t4".hardware_usd_per_gpu must be a number >= 0']),
    ('[models."t4"]\nhardware_usd_per_gpu = 25', ['models."t4": hardware_usd_per_gpu = 25 is outside its '
                                                  'plausible range', "allow_implausible"]),
    ('[models."t4"]\ninstance_usd_per_hour = 526', ['models."t4": instance_usd_per_hour ÷ gpus_per_instance = 526']),
    ("models = 3", ["models must be tables"]),
    ('[models]\nt4 = 3', ['models."t4" must be a table']),
])
def test_bad_model_tables_are_one_clear_error(tmp_path: Path, toml: str, needles: list[str]) -> None:
    with pytest.raises(GpuauditError) as e:
        load_config(_cfg(tmp_path, toml))
    msg = str(e.value)
    assert msg.startswith("config error: ") and "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_implausible_model_price_can_be_allowed(tmp_path: Path) -> None:
    cfg = load_config(_cfg(tmp_path, 'allow_implausible = ["on_prem.hardware_usd_per_gpu"]\n'
                                     '[models."t4"]\nhardware_usd_per_gpu = 25\n'))
    assert cfg.models["t4"].hardware_usd_per_gpu == 25.0


def test_toml_lines_for_unknown_models_load_as_they_are(tmp_path: Path) -> None:
    """The lines offered for a model the catalogue does not know are a valid config that prices it."""
    cfg = load_config()
    seen = ["NVIDIA H100 80GB HBM3", ("NVIDIA H100 NVL", 95830 * 2**20), "Tesla T4", "NVIDIA H100 NVL",
            'NVIDIA "Quoted"\nName']
    lines = model_toml_lines(seen, cfg)
    text = "\n".join(lines)
    assert text.count("[models.") == 2 and '[models."h100-nvl"]' in text and '[models."quoted-name"]' in text
    assert "t4" not in text.split("[models.")[1]  # known models need no lines
    assert f"memory_bytes = {95830 * 2**20}" in text
    configured = load_config(_cfg(tmp_path, text + "\n"))
    nvl = configured.models["h100-nvl"]
    assert nvl.instance_usd_per_hour == cfg.cloud.instance_usd_per_hour
    assert nvl.hardware_usd_per_gpu == cfg.on_prem.hardware_usd_per_gpu
    assert all(getattr(nvl, f) is not None for f in NEW_MODEL_FIGURES)
    assert model_toml_lines(seen, configured) == []  # once configured, nothing more to add
    assert model_toml_lines(["Tesla T4", "NVIDIA L4"], cfg) == []


@pytest.fixture(scope="module")
def root(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("models")
    a = gpu_rows("n1", "GPU-a", 120, sm=0.5, procs=1)
    return write(root, a, proc_rows("n1", "GPU-a", ends(a)))


@pytest.mark.parametrize(("toml", "needles"), [
    ('[models."t44"]\nhardware_usd_per_gpu = 2500', ['models."t44"', "not a model in the catalogue", "known: "]),
    ('[models."t4"]\nbogus = 1', ['unknown key models."t4".bogus']),
])
def test_analyze_refuses_a_bad_model_table_in_one_line(root, tmp_path: Path, toml: str,  # type: ignore[no-untyped-def]
                                                       needles: list[str]) -> None:
    r = run_cli("analyze", "--data", str(root), "--config", str(_cfg(tmp_path, toml)))
    one_error_line(r, "config error: ", *needles)


def test_analyze_accepts_a_model_override(root, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = run_cli("analyze", "--data", str(root), "--config",
                str(_cfg(tmp_path, '[models."t4"]\ninstance_usd_per_hour = 0.35\n')), "--json")
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two H100s (one also reports a MIG slice), three T4s, one H100 NVL the catalogue does not know."""
    root = tmp_path_factory.mktemp("mixed")
    rows = []
    h100 = "NVIDIA H100 80GB HBM3"
    for uuid, name, mem in (("GPU-h1", h100, 80 * 2**30), ("GPU-h2", h100, 80 * 2**30),
                            ("GPU-t1", "Tesla T4", 16 * 2**30), ("GPU-t2", "Tesla T4", 16 * 2**30),
                            ("GPU-t3", "Tesla T4", 16 * 2**30), ("GPU-n1", "NVIDIA H100 NVL", 94 * 2**30)):
        for r in gpu_rows("n1", uuid, 120, sm=0.5, procs=1):
            rows.append({**r, "gpu_name": name, "mem_total_bytes": mem})
    for r in gpu_rows("n1", "GPU-h2", 120, sm=0.2, procs=1, mig_instance=1):
        rows.append({**r, "gpu_name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "gpu_fraction": 1 / 7})
    return write(root, rows, proc_rows("n1", "GPU-h1", ends(rows[:120])))


def test_analyze_lists_the_models_found(mixed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 25: `analyze` lists name as reported -> key, GPUs, where the price came from."""
    import json

    cfg = _cfg(tmp_path, '[models."t4"]\nhardware_usd_per_gpu = 2500\n')
    r = run_cli("analyze", "--data", str(mixed), "--config", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    models = {m["model"]: m for m in d["models"]}
    assert set(models) == {"t4", "h100-sxm-80gb", "h100-nvl"}
    assert models["t4"]["gpus"] == 3 and models["t4"]["known"] and not models["t4"]["assumed"]
    assert models["t4"]["usd_per_gpu_hour"] == pytest.approx(0.526)
    assert models["t4"]["hardware_usd_per_gpu"] == 2500 and models["t4"]["hardware_source"] == f"set in {cfg}"
    assert "g4dn.xlarge" in models["t4"]["price_source"] and "2026-04-08" in models["t4"]["price_source"]
    h100 = models["h100-sxm-80gb"]
    assert h100["gpus"] == 2  # the MIG slice counts with its GPU
    assert set(h100["gpu_names"]) == {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"}
    nvl = models["h100-nvl"]
    assert not nvl["known"] and nvl["assumed"] and nvl["price_source"].startswith("assumed: fleet default")
    assert '[models."h100-nvl"]' in nvl["toml"]
    assert load_config(_cfg(tmp_path, nvl["toml"] + "\n", "nvl.toml")).models["h100-nvl"].memory_bytes == 94 * 2**30
    assert any('GPU model "h100-nvl"' in w and "not in the catalogue" in w for w in d["warnings"])
    text = run_cli("analyze", "--data", str(mixed), "--config", str(cfg))
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if x.startswith("model t4"))
    assert "3 GPUs" in line and "Tesla T4" in line and "$0.53/GPU-h" in line and "hardware $2,500" in line
