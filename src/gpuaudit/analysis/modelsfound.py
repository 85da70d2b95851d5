"""The GPU models found in the data: each reported name -> catalogue key, its GPUs, and where its
prices come from (gpuaudit.catalog, the config's [models."<key>"], or the fleet defaults, assumed)."""

from __future__ import annotations

import json

from gpuaudit.analysis.columns import PerGpuColumns
from gpuaudit.analysis.config import Config, model_toml_lines
from gpuaudit.analysis.figure import Table
from gpuaudit.analysis.pools import Pricing
from gpuaudit.analysis.result import ModelFound
from gpuaudit.catalog import ModelSpec, identify


def _source(spec: ModelSpec, figure: str) -> str:
    src = spec.sources.get(figure)
    if src is None:
        return ""
    if not src.url:  # set in a config file
        return src.text
    return (f"{spec.instance}: " if figure == "instance_usd_per_hour" else "") + f"{src.text} ({src.date})"


def _pool_source(pricing: Pricing | None, key: str) -> dict[str, str]:
    if pricing is None:
        return {}
    return next((src for sp, src in zip(pricing.specs, pricing.source, strict=True) if sp.key == key), {})


def _fleet_text(cfg: Config, dotted: str, why: str = "") -> str:
    """A fleet setting as a price's source: stated (a file, an option, a preset) or the default, assumed."""
    origin = cfg.sources.get(dotted, "default")
    if origin != "default":
        return f"the fleet's {dotted} ({origin if origin.startswith('--') else 'set in ' + origin})"
    return f"assumed: fleet default {dotted}{why}"


def models_found(per_gpu: Table, cfg: Config, pricing: Pricing | None = None) -> tuple[ModelFound, ...]:
    """One ModelFound per model key seen in the per-GPU breakdown, most GPUs first. With `pricing`, a figure the
    fleet's own stated setting priced (a fleet of one model) is shown as that setting."""
    per_gpu.require(PerGpuColumns.HOST, PerGpuColumns.GPU, PerGpuColumns.GPU_NAME, PerGpuColumns.MEM_TOTAL_BYTES)
    names: dict[str, dict[str, None]] = {}  # key -> reported names, in order seen
    gpus: dict[str, set[tuple[str, str]]] = {}
    memory: dict[str, int] = {}
    known: dict[str, bool] = {}
    first_name: dict[str, tuple[str, int | None]] = {}
    for row in per_gpu.rows:
        name = str(row.get(PerGpuColumns.GPU_NAME) or "")
        mem = row.get(PerGpuColumns.MEM_TOTAL_BYTES)
        key, is_known = identify(name, int(mem) if mem else None)
        names.setdefault(key, {})[name or "(no name reported)"] = None
        gpus.setdefault(key, set()).add((str(row[PerGpuColumns.HOST]), str(row[PerGpuColumns.GPU]).split("/mig")[0]))
        if mem:
            memory[key] = max(memory.get(key, 0), int(mem))
        known[key] = is_known
        first_name.setdefault(key, (name, int(mem) if mem else None))
    fleet_hour = cfg.cloud.instance_usd_per_hour / cfg.cloud.gpus_per_instance
    out: list[ModelFound] = []
    for key in sorted(gpus, key=lambda k: (-len(gpus[k]), k)):
        spec = cfg.models.get(key)
        hour = spec.usd_per_gpu_hour if spec is not None else None
        hardware = spec.hardware_usd_per_gpu if spec is not None else None
        assumed = hour is None or hardware is None
        src = _pool_source(pricing, key)
        if src.get("instance_usd_per_hour") == "fleet" and spec is not None:
            hour = None
            spec = spec.replace(sources={k: v for k, v in spec.sources.items() if k != "instance_usd_per_hour"})
        if src.get("hardware_usd_per_gpu") == "fleet" and spec is not None:
            hardware = None
        if src:  # priced: assumed where a figure fell back to an unstated fleet default
            assumed = "assumed" in (src["instance_usd_per_hour"], src["hardware_usd_per_gpu"])
        out.append(ModelFound(
            model=key,
            gpu_names=tuple(names[key]),
            known=known[key],
            gpus=len(gpus[key]),
            instance=spec.instance if spec is not None else "",
            usd_per_gpu_hour=fleet_hour if hour is None else hour,
            price_source=(_fleet_text(cfg, "cloud.instance_usd_per_hour") + " ÷ cloud.gpus_per_instance"
                          if hour is None or spec is None else _source(spec, "instance_usd_per_hour")),
            hardware_usd_per_gpu=cfg.on_prem.hardware_usd_per_gpu if hardware is None else hardware,
            hardware_source=(_fleet_text(cfg, "on_prem.hardware_usd_per_gpu", " (no traceable price for this model)")
                             if hardware is None or spec is None else _source(spec, "hardware_usd_per_gpu")),
            assumed=assumed,
            toml="\n".join(model_toml_lines([first_name[key]], cfg)) if spec is None else "",
        ))
    return tuple(out)


def warnings_for(models: tuple[ModelFound, ...]) -> list[str]:
    """One warning per model the catalogue does not know, and one for known models without a purchase price."""
    out = [f"GPU model {json.dumps(m.model)} (reported as {', '.join(json.dumps(n) for n in m.gpu_names)}, "
           f"{m.gpus} GPUs) is not in the catalogue: its prices are the fleet defaults, assumed; add a "
           f'[models.{json.dumps(m.model)}] table to --config (the lines: analyze --json, models[].toml)'
           for m in models if not m.known and m.toml]
    no_hw = [m.model for m in models if m.known and m.hardware_source.startswith("assumed")]
    if no_hw:
        out.append(f"no traceable purchase price for {', '.join(no_hw)}: owning them is priced at the fleet "
                   "default on_prem.hardware_usd_per_gpu (assumed); set hardware_usd_per_gpu under "
                   f"[models.{json.dumps(no_hw[0])}]")
    return out
