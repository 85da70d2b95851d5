"""The analyzer's settings: decision thresholds and the cost model, as typed dataclasses read from TOML.

Defaults live in presets/default.toml (each with its source in a comment); presets/article.toml
overrides them to reproduce the reference article. A user file (`--config FILE`) overrides either; it may
name its base with a top-level `preset = "article"`. Unknown keys, wrong types and out-of-range values
are a GpuauditError naming the key, e.g.
`config error: cloud.spot_multiplier must be a number >= 0, got "abc"`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, get_type_hints

from gpuaudit.catalog import FIGURES, ModelSpec, Source, catalogue, identify
from gpuaudit.errors import GpuauditError
from gpuaudit.util.smallfile import CONFIG_MAX_BYTES, read_small_text

PRESETS = ("default", "article")


def _num(lo: float | None = 0.0, hi: float | None = None, *, above: bool = False) -> Any:
    return field(metadata={"min": lo, "max": hi, "above": above})


def _choice(*options: str) -> Any:
    return field(metadata={"choices": options})


@dataclass(frozen=True)
class DecisionConfig:
    cloud_below: float = _num(0.0, 1.0)
    on_prem_above: float = _num(0.0, 1.0)
    provisional_below_days: float = _num(0.0, 36500.0)
    reevaluate_after_months: int = _num(0, 1200)
    min_trial_hours: float = _num(0.0, 876000.0)
    # a plan cheaper than staying by less than this share of staying's total is a tie: keep what you have
    tie_fraction: float = _num(0.0, 0.5)
    # the share of demand that is latency-sensitive: it runs on owned GPUs, never bursts (1: all of it)
    latency_sensitive_share: float = _num(0.0, 1.0)


_GROWTH_MAX = 1e9  # demand multiplied more over the horizon is a typo (and sizes a fleet of 1e16 GPUs)
_MONEY_MAX = 1e12  # a larger price is a typo, and would overflow the charts and sums


def _money(hi: float = _MONEY_MAX) -> Any:
    return _num(0.0, hi)


@dataclass(frozen=True)
class CloudConfig:
    instance_usd_per_hour: float = _money()
    gpus_per_instance: int = _num(1, 1024)
    billing_granularity: str = _choice("gpu", "instance")
    spot_multiplier: float = _num(0.0, 100.0)
    reserved_multiplier: float = _num(0.0, 100.0)
    capacity_block_multiplier: float = _num(0.0, 100.0)
    spot_share: float = _num(0.0, 1.0)
    reserved_share: float = _num(0.0, 1.0)
    capacity_block_share: float = _num(0.0, 1.0)
    spot_interruptions_per_hour: float = _num(0.0, 3600.0)
    spot_lost_hours_per_interruption: float = _num(0.0, 24.0)
    egress_usd_per_gb: float = _money()
    egress_gb_per_week: float = _num(0.0, 1e12)
    managed_services_usd_per_month: float = _money()
    managed_services_usd_once: float = _money()


@dataclass(frozen=True)
class OnPremConfig:
    hardware_usd_per_gpu: float = _money()
    amortization_years: float = _num(0.0, 100.0, above=True)
    capex_timing: str = _choice("upfront", "spread")
    salvage_fraction: float = _num(0.0, 1.0)
    networking_usd: float = _money()
    networking_usd_per_gpu: float = _money()
    networking_amortization_years: float = _num(0.0, 100.0)
    staff_usd_per_month: float = _money()
    staff_usd_per_node_per_month: float = _money()
    space_usd_per_node_per_month: float = _money()
    space_usd_per_kw_per_month: float = _money()  # > 0: space by the nodes' busy board power, not per node
    gpus_per_node: int = _num(1, 1024)
    maintenance_fraction_per_year: float = _num(0.0, 10.0)
    power_usd_per_kwh: float = _num(0.0, 1e6)
    pue: float = _num(1.0, 10.0)
    power_source: str = _choice("measured", "configured")
    fallback_watts_per_gpu: float = _num(0.0, 1e6)
    owned_gpus: int = _num(-1, 10_000_000)
    owned_age_years: float = _num(0.0, 100.0)


@dataclass(frozen=True)
class AnalysisConfig:
    horizon_months: int = _num(1, 240)  # 20 years: past that no price or growth guess means anything
    discount_rate_per_year: float = _num(0.0, 1.0)
    fleet_gpus: int = _num(0, 10_000_000)
    bootstrap_resamples: int = _num(0, 1_000_000)
    bootstrap_seed: int = _num(0, None)
    bootstrap_min_days: int = _num(2, 3650)
    confidence_level: float = _num(0.0, 1.0, above=True)
    sensitivity_fraction: float = _num(0.0, 0.99)
    growth_rates: tuple[float, ...] = _num(-0.99, 10.0)  # a fraction a year: 10 = 1000 %
    stopped_reporting_after_hours: float = _num(0.0, 1e6)
    consolidation_target: float = _num(0.0, 1.0, above=True)  # SM-weighted utilization to pack work to
    # the right-size lever: SM activity × throughput ratio a smaller model may run at
    right_size_headroom: float = _num(0.0, 1.0, above=True)


@dataclass(frozen=True)
class Config:
    """All settings. `preset` names the base the values started from; `sources` maps each dotted key to
    where its value came from (preset file or user file) for the result's assumptions list."""

    decision: DecisionConfig
    cloud: CloudConfig
    on_prem: OnPremConfig
    analysis: AnalysisConfig
    preset: str = "default"
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    # the GPU model catalogue (gpuaudit.catalog) with the file's [models."<key>"] overrides applied
    models: dict[str, ModelSpec] = field(default_factory=catalogue)
    # A pool's config only (analysis/pools.py): its model's (idle W, busy W, where they came from), both known.
    # Where no power was measured the power fallback then follows load (costs.power_model) instead of the flat
    # on_prem.fallback_watts_per_gpu; never read from a file.
    load_power: tuple[float, float, str] | None = None

    def replace(self, section: str, **values: Any) -> Config:
        """A copy with some values of one section changed (used by the sensitivity analysis)."""
        new = dataclasses.replace(getattr(self, section), **values)
        return dataclasses.replace(self, **{section: new})


@dataclass(frozen=True)
class Reading:
    """The settings stage 2's reading of the rollups depends on (the trial, the data quality): none is a price.
    The functions that read the rollups take this, never a Config, so stage 2's price-free results
    (analysis/facts.py) are keyed by every setting they depend on and by no other."""

    min_trial_hours: float
    provisional_below_days: float
    reevaluate_after_months: int
    stopped_reporting_after_hours: float
    fleet_gpus: int


def reading(cfg: Config) -> Reading:
    d, a = cfg.decision, cfg.analysis
    return Reading(d.min_trial_hours, d.provisional_below_days, d.reevaluate_after_months,
                   a.stopped_reporting_after_hours, a.fleet_gpus)


# Units of the settings whose key does not end in one (see unit_of).
_UNITS = {
    "cloud_below": "fraction", "on_prem_above": "fraction", "consolidation_target": "fraction",
    "confidence_level": "fraction", "sensitivity_fraction": "fraction", "growth_rates": "fraction/year",
    "gpus_per_instance": "GPUs", "pue": "×", "bootstrap_resamples": "count", "gpus_per_node": "GPUs",
    "owned_gpus": "GPUs", "fleet_gpus": "GPUs", "salvage_fraction": "fraction",
    "discount_rate_per_year": "fraction/year", "owned_age_years": "years", "memory_bytes": "bytes",
    "dense_fp16_tflops": "TFLOPS", "right_size_headroom": "fraction",
}


def unit_of(key: str) -> str:
    """The unit a setting is given in (the result's assumptions list): named, or read off the key's suffix."""
    if key in _UNITS:
        return _UNITS[key]
    for suffix, unit in (("_usd_per_hour", "USD/h"), ("_usd_per_node_per_month", "USD/node/month"),
                         ("_usd_per_kw_per_month", "USD/kW/month"),
                         ("_usd_per_gpu", "USD/GPU"), ("_usd_per_month", "USD/month"),
                         ("_usd_per_gb", "USD/GB"), ("_usd_per_kwh", "USD/kWh"), ("_usd_once", "USD"),
                         ("_usd", "USD"), ("_per_week", "GB/week"), ("_watts_per_gpu", "W"), ("_months", "months"),
                         ("_days", "days"), ("_hours", "hours"), ("_years", "years"), ("_per_hour", "1/h"),
                         ("_share", "fraction"), ("_multiplier", "×"), ("_fraction_per_year", "fraction/year")):
        if key.endswith(suffix):
            return unit
    return ""


# Where a price or multiplier can plausibly lie, and what its unit means. A value outside is refused (a percent
# written as a multiplier, cents written as dollars flip the recommendation) unless the file lists the key in a
# top-level `allow_implausible = [...]`. (low, high, what the number is).
PLAUSIBLE: dict[str, tuple[float, float, str]] = {
    "cloud.list_usd_per_gpu_hour": (0.05, 50.0, "cloud.instance_usd_per_hour ÷ cloud.gpus_per_instance, $ per "
                                    "GPU-hour on demand (an H100 lists at $2-12)"),
    "cloud.spot_multiplier": (0.05, 1.0, "a fraction of the on-demand price: 0.45 = 45 % of it"),
    "cloud.reserved_multiplier": (0.1, 1.0, "a fraction of the on-demand price: 0.62 = 38 % off"),
    "cloud.capacity_block_multiplier": (0.1, 1.5, "a fraction of the on-demand price"),
    "cloud.spot_interruptions_per_hour": (0.0, 5.0, "interruptions per GPU-hour"),
    "cloud.spot_lost_hours_per_interruption": (0.0, 4.0, "hours of work redone per interruption"),
    "cloud.egress_usd_per_gb": (0.0, 0.5, "$ per GB (clouds charge $0.02-0.12)"),
    "cloud.managed_services_usd_per_month": (0.0, 1e7, "$ per month"),
    "on_prem.hardware_usd_per_gpu": (1000.0, 500_000.0, "$ per GPU with its share of node and fabric"),
    "on_prem.power_usd_per_kwh": (0.01, 1.0, "$ per kWh, not cents (0.12 = 12 ¢)"),
    "on_prem.pue": (1.0, 3.0, "facility power ÷ IT power"),
    "on_prem.maintenance_fraction_per_year": (0.0, 0.5, "a fraction of the hardware price per year: 0.02 = 2 %"),
    "on_prem.staff_usd_per_month": (0.0, 1e7, "$ per month"),
    "on_prem.staff_usd_per_node_per_month": (0.0, 50_000.0, "$ per node per month"),
    "on_prem.space_usd_per_node_per_month": (0.0, 50_000.0, "$ per node per month"),
    "on_prem.space_usd_per_kw_per_month": (0.0, 1000.0, "$ per kW of the nodes' busy board power per month "
                                           "(colocation lists $100-300)"),
    "on_prem.networking_usd_per_gpu": (0.0, 100_000.0, "$ per new GPU"),
    "on_prem.fallback_watts_per_gpu": (10.0, 5000.0, "W per GPU (an H100 SXM board: 700 W)"),
    "on_prem.amortization_years": (0.5, 15.0, "years"),
    "analysis.discount_rate_per_year": (0.0, 0.5, "a fraction a year: 0.08 = 8 %"),
}

# Settings that choose another basis when set and are off at 0: the assumptions list them only when set (a row
# for a basis not in use says nothing about the figures).
OFF_AT_ZERO = frozenset({"on_prem.space_usd_per_kw_per_month"})

# Keys an older release read, with why they went: a clear error, not "unknown key".
_REMOVED = {
    "analysis.hybrid_demand": "every plan is priced on held demand, what the cloud bills; packed (SM-weighted) "
                              "demand is what the 'if behaviour changes' scenarios show",
    "cloud.right_size_target_efficiency": "the 'if behaviour changes' plans and the consolidation lever pack the "
                                          "work to one target: set analysis.consolidation_target",
}

SECTIONS: dict[str, type] = {
    "decision": DecisionConfig,
    "cloud": CloudConfig,
    "on_prem": OnPremConfig,
    "analysis": AnalysisConfig,
}


def bounds(section: str, key: str) -> tuple[float, float]:
    """The range a numeric setting must lie in (what load_config enforces), as (lowest, highest); an exclusive
    lower bound ("above") is the next float up."""
    meta = next(f.metadata for f in dataclasses.fields(SECTIONS[section]) if f.name == key)
    lo, hi = meta.get("min"), meta.get("max")
    low = -math.inf if lo is None else (math.nextafter(lo, math.inf) if meta.get("above") else float(lo))
    return low, math.inf if hi is None else float(hi)


def _preset_text(name: str) -> str:
    if name not in PRESETS:
        raise GpuauditError(f"config error: preset must be one of {', '.join(PRESETS)}, got {json.dumps(name)}")
    return (files("gpuaudit.analysis") / "presets" / f"{name}.toml").read_text(encoding="utf-8")


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))  # the byte-order mark some editors write
    except tomllib.TOMLDecodeError as e:
        raise GpuauditError(f"config error: {where} is not valid TOML: {e}") from e
    except RecursionError as e:  # tomllib recurses per nesting level: a hostile file, not a config
        raise GpuauditError(f"config error: {where} nests too deeply to be a gpuaudit config") from e


def preset_comments(name: str) -> dict[str, str]:
    """Each key's source comment from a preset file (the comment block above it, or on its line)."""
    out: dict[str, str] = {}
    section = ""
    pending: list[str] = []
    after_key = False  # a comment after a key starts a new block; keys right below a block share it
    for raw in _preset_text(name).splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section, pending, after_key = line[1:-1], [], False
        elif line.startswith("#"):
            if after_key:
                pending, after_key = [], False
            pending.append(line.lstrip("# "))
        elif "=" in line:
            key, _, rest = line.partition("=")
            inline = rest.split("#", 1)[1].strip() if "#" in rest else ""
            out[f"{section}.{key.strip()}"] = inline or " ".join(pending)
            after_key = True
        else:
            pending, after_key = [], False
    return out


def load_config(path: Path | str | None = None, preset: str | None = None) -> Config:
    """Defaults, then the preset (`preset` argument, else the file's top-level `preset`), then the file."""
    user: dict[str, Any] = {}
    where = "defaults"
    if path is not None:
        p = Path(path)
        where = str(p)
        try:  # a regular file of a config's size: never /dev/zero read to the end of memory
            text = read_small_text(p, "--config", CONFIG_MAX_BYTES)
        except GpuauditError as e:
            raise GpuauditError(f"config error: {e}") from None
        user = _parse(text, where)
    allow = user.pop("allow_implausible", [])
    if not isinstance(allow, list) or not all(isinstance(k, str) for k in allow):
        raise GpuauditError(f"config error: allow_implausible must be a list of keys, got {_show(allow)}")
    unknown = sorted(set(allow) - set(PLAUSIBLE))
    if unknown:
        raise GpuauditError(f"config error: allow_implausible names {', '.join(unknown)}, which has no plausible "
                            f"range; keys with one: {', '.join(PLAUSIBLE)}")
    file_preset = user.pop("preset", None)
    if file_preset is not None and not isinstance(file_preset, str):
        raise GpuauditError(f"config error: preset must be a string, got {_show(file_preset)}")
    name = preset or file_preset or "default"
    merged: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    sources: dict[str, str] = {}
    layers = [("default", _parse(_preset_text("default"), "default preset"))]
    if name != "default":
        layers.append((name, _parse(_preset_text(name), f"{name} preset")))
    if user:
        layers.append((where, user))
    model_values: dict[str, dict[str, tuple[Any, str]]] = {}
    for label, layer in layers:
        _collect_models(layer.pop("models", None), label, model_values)
    for label, layer in layers:
        for section, values in layer.items():
            if section not in SECTIONS:
                raise GpuauditError(
                    f"config error: unknown section [{_cut(section)}] in {label}; known: {', '.join(SECTIONS)}"
                )
            if not isinstance(values, dict):
                raise GpuauditError(f"config error: {section} must be a table ([{section}]), got {_show(values)}")
            known = {f.name for f in dataclasses.fields(SECTIONS[section])}
            for key, value in values.items():
                if f"{section}.{key}" in _REMOVED:
                    raise GpuauditError(f"config error: {section}.{key} in {label} was removed: "
                                        f"{_REMOVED[f'{section}.{key}']}; delete the line")
                if key not in known:
                    raise GpuauditError(
                        f"config error: unknown key {section}.{_cut(key)} in {label}; known: {', '.join(sorted(known))}"
                    )
                merged[section][key] = value
                sources[f"{section}.{key}"] = label
    built = {s: _build(SECTIONS[s], s, merged[s]) for s in SECTIONS}
    models = _build_models(model_values, sources)
    cfg = Config(**built, preset=name, sources=sources, models=models)
    check(cfg)
    _check_plausible(cfg, frozenset(allow))
    return cfg


def _model_meta(name: str) -> tuple[Any, Any]:
    """(type, bounds metadata) of a per-model figure: the [cloud] / [on_prem] setting of the same name where
    there is one, the fallback power's for the two board powers."""
    for cls in (CloudConfig, OnPremConfig):
        for f in dataclasses.fields(cls):
            if f.name == name:
                return get_type_hints(cls)[name], f.metadata
    if name in ("idle_watts_per_gpu", "busy_watts_per_gpu"):
        meta = next(f.metadata for f in dataclasses.fields(OnPremConfig) if f.name == "fallback_watts_per_gpu")
        return float, meta
    if name == "memory_bytes":
        return int, {"min": 1, "max": 1e15}  # a petabyte on one board is a typo
    if name == "dense_fp16_tflops":
        # a throughput, not a price: bounds only, no plausible range (a B200 is about 2,250)
        return float, {"min": 0.0, "above": True, "max": 1e5}
    raise KeyError(name)


# What a model of the operator's own must give (memory and throughput are optional: only the right-size lever
# reads them).
NEW_MODEL_FIGURES = tuple(f for f in FIGURES if f not in ("memory_bytes", "dense_fp16_tflops"))


def _collect_models(values: Any, label: str, out: dict[str, dict[str, tuple[Any, str]]]) -> None:
    """Check one layer's [models."<key>"] tables: a catalogue key with known figures, or a new model that gives
    every figure (the lines `model_toml_lines` prints); anything else is one error naming the key."""
    if values is None:
        return
    if not isinstance(values, dict):
        raise GpuauditError(f'config error: models must be tables ([models."t4"]), got {_show(values)}')
    known = catalogue()
    for key, table in values.items():
        shown = f"models.{_cut(json.dumps(key))}"
        if not isinstance(table, dict):
            raise GpuauditError(f"config error: {shown} must be a table ([{shown}]), got {_show(table)}")
        unknown = sorted(set(table) - set(FIGURES))
        if unknown:
            raise GpuauditError(f"config error: unknown key {shown}.{_cut(unknown[0])} in {label}; "
                                f"known: {', '.join(FIGURES)}")
        if key not in known and key not in out:
            missing = [f for f in NEW_MODEL_FIGURES if f not in table]
            if missing:
                raise GpuauditError(
                    f"config error: {shown} in {label} is not a model in the catalogue; known: "
                    f"{', '.join(sorted(known))} (a model of your own needs every figure; missing: "
                    f"{', '.join(missing)})")
        for f, v in table.items():
            hint, meta = _model_meta(f)
            out.setdefault(key, {})[f] = (_number(f"{shown}.{f}", hint, v, meta), label)


def _build_models(values: dict[str, dict[str, tuple[Any, str]]], sources: dict[str, str]) -> dict[str, ModelSpec]:
    models = catalogue()
    for key, figures in values.items():
        blank: dict[str, Any] = dict.fromkeys(FIGURES)
        base = models.get(key) or ModelSpec(key=key, name=key, instance="set in the config", **blank)
        changed = {f: v for f, (v, _) in figures.items()}
        spec_sources = {**base.sources, **{f: Source(text=f"set in {label}", url="", date="") for f, (_, label) in
                                           figures.items()}}
        models[key] = base.replace(**changed, sources=spec_sources)
        for f, (_, label) in figures.items():
            sources[f"models.{key}.{f}"] = label
    return models


def model_toml_lines(names: Iterable[str | tuple[str, int | None]], cfg: Config) -> list[str]:
    """For the GPUs seen (reported names, or (name, memory_bytes) pairs), the TOML an operator adds to price each
    model the catalogue does not know: one [models."<key>"] table with every figure, filled with the fleet
    defaults ([cloud] / [on_prem]) that price it now (memory where it was reported). load_config reads the
    lines as they are. Empty when every model is known or already configured."""
    defaults = {
        "instance_usd_per_hour": cfg.cloud.instance_usd_per_hour, "gpus_per_instance": cfg.cloud.gpus_per_instance,
        "hardware_usd_per_gpu": cfg.on_prem.hardware_usd_per_gpu,
        "idle_watts_per_gpu": cfg.on_prem.fallback_watts_per_gpu,
        "busy_watts_per_gpu": cfg.on_prem.fallback_watts_per_gpu, "gpus_per_node": cfg.on_prem.gpus_per_node,
    }
    lines: list[str] = []
    done: set[str] = set()
    for item in names:
        name, memory = item if isinstance(item, tuple) else (item, None)
        key, known = identify(name, memory)
        if known or key in done or key in cfg.models:
            continue
        done.add(key)
        if lines:
            lines.append("")
        lines.append(f"[models.{json.dumps(key)}]  # reported as {json.dumps(str(name))}: replace the fleet defaults")
        for f in NEW_MODEL_FIGURES:
            v = defaults[f]
            lines.append(f"{f} = {v:g}  # {unit_of(f)}" if isinstance(v, float) else f"{f} = {v}  # {unit_of(f)}")
        if memory:
            lines.append(f"memory_bytes = {int(memory)}  # {unit_of('memory_bytes')}, as reported")
    return lines


def _check_plausible(cfg: Config, allow: frozenset[str] = frozenset()) -> None:
    """Refuse a price or multiplier outside its plausible range (PLAUSIBLE), in one line with the key, the value
    and the range, unless the file allows it."""
    for key, (lo, hi, what) in PLAUSIBLE.items():
        if key in allow:
            continue
        if key == "cloud.list_usd_per_gpu_hour":
            value = cfg.cloud.instance_usd_per_hour / cfg.cloud.gpus_per_instance
            shown = f"cloud.instance_usd_per_hour ÷ cloud.gpus_per_instance = {value:g}"
        else:
            section, name = key.split(".")
            value = float(getattr(getattr(cfg, section), name))
            shown = f"{key} = {value:g}"
        if not lo <= value <= hi:
            raise GpuauditError(f"config error: {shown} is outside its plausible range {lo:g} to {hi:g} ({what}); "
                                f"if it is right, add allow_implausible = [\"{key}\"] at the top of the file")
    for key, (lo, hi, what) in PLAUSIBLE.items():  # the same ranges for each model's own prices
        if key in allow or key not in ("cloud.list_usd_per_gpu_hour", "on_prem.hardware_usd_per_gpu"):
            continue
        for mkey, spec in cfg.models.items():
            mvalue: float | None
            if key == "cloud.list_usd_per_gpu_hour":
                mvalue, shown = spec.usd_per_gpu_hour, "instance_usd_per_hour ÷ gpus_per_instance"
            else:
                mvalue, shown = spec.hardware_usd_per_gpu, "hardware_usd_per_gpu"
            if mvalue is not None and not lo <= mvalue <= hi:
                raise GpuauditError(
                    f"config error: models.{json.dumps(mkey)}: {shown} = {mvalue:g} is outside its plausible range "
                    f"{lo:g} to {hi:g} ({what}); if it is right, add allow_implausible = [\"{key}\"] at the top "
                    "of the file")


def _show(value: Any) -> str:
    try:
        return _cut(json.dumps(value))
    except TypeError:
        return _cut(repr(value))


_SHOWN_CHARS = 80  # of a key or value echoed in an error: a 200 KB key is still a one-line message


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}... ({len(text):,} characters)"


def _build(cls: type, section: str, values: dict[str, Any]) -> Any:
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = f"{section}.{f.name}"
        if f.name not in values:
            raise GpuauditError(f"config error: {key} is missing")
        kwargs[f.name] = _coerce(key, hints[f.name], values[f.name], f.metadata)
    return cls(**kwargs)


def _coerce(key: str, hint: Any, value: Any, meta: Any) -> Any:
    if hint is str:
        choices = meta.get("choices", ())
        if not isinstance(value, str) or (choices and value not in choices):
            raise GpuauditError(f"config error: {key} must be one of {', '.join(choices)}, got {_show(value)}")
        return value
    if hint == tuple[float, ...]:
        if not isinstance(value, list):
            raise GpuauditError(f"config error: {key} must be a list of numbers, got {_show(value)}")
        return tuple(_number(key, float, v, meta) for v in value)
    return _number(key, hint, value, meta)


def _number(key: str, hint: Any, value: Any, meta: Any) -> float | int:
    lo, hi, above = meta.get("min"), meta.get("max"), meta.get("above", False)
    kind = "an integer" if hint is int else "a number"
    bounds = []
    if lo is not None:
        bounds.append(f"{'>' if above else '>='} {lo:g}")
    if hi is not None:
        bounds.append(f"<= {hi:g}")
    expect = f"{key} must be {kind}" + (f" {' and '.join(bounds)}" if bounds else "")
    ok_type = isinstance(value, int) if hint is int else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type or (isinstance(value, float) and not math.isfinite(value)):
        raise GpuauditError(f"config error: {expect}, got {_show(value)}")
    if (lo is not None and (value < lo or (above and value == lo))) or (hi is not None and value > hi):
        raise GpuauditError(f"config error: {expect}, got {_show(value)}")
    return int(value) if hint is int else float(value)


def check(cfg: Config) -> None:
    """Rules that span keys."""
    c = cfg.cloud
    if c.spot_share + c.reserved_share + c.capacity_block_share > 1.0 + 1e-9:
        raise GpuauditError(
            "config error: cloud.spot_share + cloud.reserved_share + cloud.capacity_block_share must be <= 1 "
            f"(the rest is on-demand), got {c.spot_share:g} + {c.reserved_share:g} + {c.capacity_block_share:g}"
        )
    a = cfg.analysis
    for g in a.growth_rates:
        # (1 + g) ** years, compared in logs so that no power overflows
        if g > 0 and a.horizon_months / 12.0 * math.log1p(g) > math.log(_GROWTH_MAX):
            factor = math.exp(min(a.horizon_months / 12.0 * math.log1p(g), 700.0))
            raise GpuauditError(
                f"config error: analysis.growth_rates: {g:g} a year over analysis.horizon_months = "
                f"{a.horizon_months} multiplies demand {factor:.3g}-fold, more than {_GROWTH_MAX:g}; growth is a "
                "fraction a year (0.25 = 25 %)"
            )
    if cfg.decision.cloud_below > cfg.decision.on_prem_above:
        raise GpuauditError(
            "config error: decision.cloud_below must be <= decision.on_prem_above, "
            f"got {cfg.decision.cloud_below:g} > {cfg.decision.on_prem_above:g}"
        )
