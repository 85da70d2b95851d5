"""Model identity (names as GPUs report them -> stable keys) and the catalogue read from models.toml."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files
from typing import Any

# The figures each model carries, in the names the config's [cloud] / [on_prem] use where they have one.
# dense_fp16_tflops is no price: it is the right-size lever's relative throughput (analysis/rightsize.py).
FIGURES = ("instance_usd_per_hour", "gpus_per_instance", "hardware_usd_per_gpu", "idle_watts_per_gpu",
           "busy_watts_per_gpu", "gpus_per_node", "memory_bytes", "dense_fp16_tflops")
_INT_FIGURES = frozenset({"gpus_per_instance", "gpus_per_node", "memory_bytes"})
GIB = 1024**3


@dataclass(frozen=True)
class Source:
    """Where one figure was read: what it says, the address, and the date it was true on (YYYY[-MM[-DD]])."""

    text: str
    url: str
    date: str


@dataclass(frozen=True)
class ModelSpec:
    """One GPU model. A figure is None where no traceable source gave one: the fleet default then applies
    (and the price is flagged as assumed). `sources` maps each figure present to its Source; a figure set by
    a config file has the file's name as its source text."""

    key: str
    name: str
    instance: str
    instance_usd_per_hour: float | None
    gpus_per_instance: int | None
    hardware_usd_per_gpu: float | None
    idle_watts_per_gpu: float | None
    busy_watts_per_gpu: float | None
    gpus_per_node: int | None
    memory_bytes: int | None
    dense_fp16_tflops: float | None  # dense FP16 / BF16 tensor TFLOPS, no sparsity (the datasheet's)
    sources: dict[str, Source] = field(default_factory=dict, hash=False)

    @property
    def usd_per_gpu_hour(self) -> float | None:
        """On-demand list price of one GPU-hour (instance price ÷ GPUs in it)."""
        if self.instance_usd_per_hour is None or not self.gpus_per_instance:
            return None
        return self.instance_usd_per_hour / self.gpus_per_instance

    def missing(self) -> tuple[str, ...]:
        """The figures the catalogue has no source for (priced at the fleet defaults)."""
        return tuple(f for f in FIGURES if getattr(self, f) is None)

    def replace(self, **values: Any) -> ModelSpec:
        return dataclasses.replace(self, **values)


@lru_cache(maxsize=1)
def _load() -> dict[str, ModelSpec]:
    raw = tomllib.loads((files("gpuaudit.catalog") / "models.toml").read_text(encoding="utf-8"))
    out: dict[str, ModelSpec] = {}
    for key, table in raw.items():
        sources = {f: Source(text=s["text"], url=s["url"], date=s["date"]) for f, s in table.get("sources", {}).items()}
        values: dict[str, Any] = {}
        for f in FIGURES:
            v = table.get(f)
            values[f] = None if v is None else (int(v) if f in _INT_FIGURES else float(v))
            if v is not None and f not in sources:
                raise RuntimeError(f"models.toml: {key}.{f} has no source")  # a shipped-file bug: tests catch it
        out[key] = ModelSpec(key=key, name=table["name"], instance=table.get("instance", ""), sources=sources,
                             **values)
    return out


def catalogue() -> dict[str, ModelSpec]:
    """Every model the catalogue knows, by key (a fresh dict: the specs themselves are immutable)."""
    return dict(_load())


_MEM = re.compile(r"^(\d+)g(?:b)?$")
_DROP = frozenset({"nvidia", "tesla", ""})


def _tokens(name: str) -> list[str]:
    s = name.strip().lower()
    if s.startswith("gpu:"):  # a Slurm gres string: gpu:<type>[:<count>]
        s = s.split(":")[1]
    s = re.split(r"\bmig\b", s, maxsplit=1)[0]  # "NVIDIA H100 80GB HBM3 MIG 1g.10gb": the slice's parent
    return [t for t in re.split(r"[^a-z0-9]+", s) if t not in _DROP]


def _memory_gib(tokens: list[str], memory_bytes: int | None) -> float | None:
    for t in tokens:
        m = _MEM.match(t)
        if m:
            return float(m.group(1))
    return memory_bytes / GIB if memory_bytes else None


def _rule(tokens: list[str], memory_bytes: int | None) -> str | None:
    t = set(tokens)

    def has(prefix: str) -> bool:  # "h100" or a token glued to its variant ("h100pcie"), never "h1000"
        return any(tok == prefix or (tok.startswith(prefix) and not tok[len(prefix):].isdigit()) for tok in tokens)
    pcie = "pcie" in t or any(tok.endswith("pcie") for tok in tokens)
    if has("h200"):
        return None if "nvl" in t else "h200"
    if has("h100"):
        if "nvl" in t:
            return None  # H100 NVL (94 GB): not in the catalogue
        return "h100-pcie-80gb" if pcie else "h100-sxm-80gb"
    if has("a100"):
        mem = _memory_gib(tokens, memory_bytes)
        if mem is not None and mem > 60:
            return "a100-pcie-80gb" if pcie else "a100-sxm-80gb"
        return "a100-40gb"  # the A100's first and default size; a bare Slurm "a100" without memory is this
    if "l40s" in t:
        return "l40s"
    if "l4" in t:
        return "l4"
    if "a10g" in t:
        return "a10g"
    if "a10" in t:
        return "a10"
    if "t4" in t:
        return "t4"
    if "v100" in t or "v100s" in t or any(tok.startswith("v100") for tok in tokens):
        return "v100"
    return None


_SLUG_MAX_CHARS = 40


def slug(name: str) -> str:
    """A key for a name the catalogue does not know: lower case, words joined by '-', no 'nvidia' / 'tesla',
    at most SLUG_MAX_CHARS characters; 'unknown' when nothing is left."""
    s = "-".join(_tokens(name))[:_SLUG_MAX_CHARS].strip("-")
    return s or "unknown"


def identify(name: str | None, memory_bytes: int | None = None) -> tuple[str, bool]:
    """(key, known): the catalogue key of a reported GPU name, or a suggested key (slug) and False.
    `memory_bytes` (NVML's total memory) tells an A100 80GB from a 40GB where the name does not."""
    if not name or not name.strip():
        return "unknown", False
    key = _rule(_tokens(name), memory_bytes)
    if key is not None and key in _load():
        return key, True
    return slug(name), False


def model_key(name: str | None, memory_bytes: int | None = None) -> str:
    """The stable key of a reported GPU name (catalogue key, or a suggested one for an unknown model)."""
    return identify(name, memory_bytes)[0]
