"""The right-size lever: work that uses a small share of a large GPU could run on a smaller, cheaper model.

For one pool, from its stage-1 GPU-hours: a held GPU-hour (whole GPUs; a MIG slice already shares one) moves to
a catalogue model that rents for less when its peak memory (max_mem_used_bytes) fits that model's memory and
its SM activity while held (real_held_s ÷ held_s) × (this model's dense FP16 TFLOPS ÷ that model's) is at most
analysis.right_size_headroom; of the models that fit, the cheapest. Each is priced at flexible cloud prices
(costs.cloud_prices: the list price × the configured mix), the pool's against the target's: a target in the
fleet at its pool's config (pools.Pricing.config), any other at the catalogue's instance price in the fleet's
config. A what-if, never counted as cheapest: it assumes the work runs as fast on the smaller model as the
throughput ratio says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.pools import Pricing
from gpuaudit.analysis.result import RightSize, RightSizeTarget


def assumption(headroom: float) -> str:
    return (
        f"if the work runs as fast on the smaller model: SM activity × throughput ratio (dense FP16 TFLOPS) "
        f"≤ {headroom:g}, peak memory fits"
    )


def _target_config(pr: Pricing, key: str) -> Config | None:
    """The config a model is rented at: its pool's where the fleet has it, else the fleet's config with the
    catalogue's instance price (None: the model has no price)."""
    for j, spec in enumerate(pr.specs):
        if spec.key == key:
            return pr.config(j)
    m = pr.base.models.get(key)
    if m is None or m.instance_usd_per_hour is None or not m.gpus_per_instance:
        return None
    return pr.base.replace(
        "cloud", instance_usd_per_hour=m.instance_usd_per_hour, gpus_per_instance=m.gpus_per_instance
    )


@dataclass(frozen=True)
class SizeInput:
    """What the lever reads of a pool's GPU-hours, per held whole-GPU hour: hours held, SM activity while held,
    peak memory (NaN: unknown). No price: kept with stage 2's other price-free results (facts.py)."""

    held_h: np.ndarray
    act: np.ndarray
    mem: np.ndarray


def size_input(gpu_hours: pl.DataFrame) -> SizeInput:
    g = gpu_hours.filter((pl.col("mig_instance") < 0) & (pl.col("held_s") > 0))
    held_h = g["held_s"].to_numpy().astype(float) / 3600.0
    act = g["real_held_s"].fill_null(0.0).to_numpy().astype(float) / np.maximum(
        g["held_s"].to_numpy().astype(float), 1e-12
    )
    mem = g["max_mem_used_bytes"].to_numpy().astype(float) if g.height else np.zeros(0)
    return SizeInput(held_h, act, mem)


def right_size(pr: Pricing, key: str, cfg: Config, inp: SizeInput) -> RightSize | None:
    """The lever for the pool of model `key` priced at `cfg`, from its GPU-hours (None: no throughput figure)."""
    own = pr.base.models.get(key)
    if own is None or not own.dense_fp16_tflops:
        return None
    headroom = pr.base.analysis.right_size_headroom
    price = costs.cloud_prices(cfg).flexible
    held_h, act, mem = inp.held_h, inp.act, inp.mem
    known = np.isfinite(mem)

    candidates: list[tuple[float, str, float, int, float]] = []  # (price, key, tflops, memory, ratio)
    for k, m in pr.base.models.items():
        if k == key or not m.dense_fp16_tflops or not m.memory_bytes:
            continue
        tc = _target_config(pr, k)
        if tc is None:
            continue
        p = costs.cloud_prices(tc).flexible
        if p < price:
            candidates.append((p, k, m.dense_fp16_tflops, m.memory_bytes, own.dense_fp16_tflops / m.dense_fp16_tflops))
    candidates.sort()

    free = known.copy()
    targets: list[RightSizeTarget] = []
    for p, k, tflops, memory, ratio in candidates:
        fits = free & (mem <= memory) & (act * ratio <= headroom + 1e-12)
        hours = float(held_h[fits].sum())
        free &= ~fits
        if hours <= 0:
            continue
        targets.append(
            RightSizeTarget(
                model=k,
                gpu_hours=hours,
                usd_per_gpu_hour=p,
                usd_today=hours * price,
                usd_on_target=hours * p,
                saving_usd=hours * (price - p),
                throughput_ratio=ratio,
                memory_bytes=memory,
                dense_fp16_tflops=tflops,
            )
        )
    movable = sum(t.gpu_hours for t in targets)
    on_targets = sum(t.usd_on_target for t in targets)
    return RightSize(
        model=key,
        dense_fp16_tflops=own.dense_fp16_tflops,
        headroom=headroom,
        held_gpu_hours=float(held_h.sum()),
        movable_gpu_hours=movable,
        usd_per_gpu_hour=price,
        usd_today=movable * price,
        usd_on_targets=on_targets,
        saving_usd=movable * price - on_targets,
        targets=tuple(targets),
        assumption=assumption(headroom),
    )
