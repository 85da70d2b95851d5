"""What a server's answer cannot mean, refused (never clipped) before anything is written."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import polars as pl

from gpuaudit.errors import GpuauditError
from gpuaudit.importer.prometheus.identity import (
    SMALLINT_MAX,
)
from gpuaudit.importer.prometheus.mapping import Mapping
from gpuaudit.importer.prometheus.rows import COUNT, FRACTIONS

# A stored fraction may exceed 1 (or go below 0) by this much, float rounding in the server's averages
# (100.0001 %), and is then clipped; anything further out is an error.
_ROUNDING = 1e-5
_FLOAT32_MAX = 3.4028234663852886e38  # power_w and energy_j are FLOAT columns
# Field -> (lowest, highest, what it is) in the stored unit: what the columns can hold and a GPU can report.
# Memory stops at 2^61 bytes so that used + free (mem_total_bytes) still fits a BIGINT.
_LIMITS = {
    "power_w": (0.0, _FLOAT32_MAX, "power", "W"),
    "energy_j": (0.0, _FLOAT32_MAX, "energy", "J"),
    "fb_used": (0.0, 2.0**61, "framebuffer memory used", "bytes"),
    "fb_free": (0.0, 2.0**61, "framebuffer memory free", "bytes"),
    "mem_total": (0.0, 2.0**61, "framebuffer memory total", "bytes"),
    "temp_c": (-273.15, float(SMALLINT_MAX), "temperature", "°C"),
}


def check_points(points: pl.DataFrame, raw: list[tuple[str, str, dict[str, str]]], mapping: Mapping,
                  first: datetime, last: datetime, url: str) -> None:
    """Refuse (never clip) what the server cannot mean: a timestamp outside the queried window (a range
    query answers on its grid only), a utilization above 100 % or below 0, a negative power, energy or memory,
    a temperature below absolute zero, or a value too large for its column (_LIMITS). The error names the
    metric, the series' labels and the first bad timestamp."""
    counts = [i for i, (fld, name, _) in enumerate(raw) if fld == COUNT]
    if counts:
        points = points.filter(~pl.col("sid").is_in(counts))
    lo_t, hi_t = first.timestamp() - 1, last.timestamp() + 1
    bad = points.filter(~pl.col("ts").is_finite() | ~pl.col("ts").is_between(lo_t, hi_t))
    if bad.height:
        sid, ts, _ = bad.row(0)
        fld, name, labels = raw[sid]
        raise GpuauditError(
            f"malformed response from {url}: {series_text(name, labels)} has a sample at {_when(ts)}, outside "
            f"the queried window {first:%Y-%m-%dT%H:%M:%SZ} .. {last:%Y-%m-%dT%H:%M:%SZ}; nothing imported")
    lows, highs = [], []
    for fld, _, _ in raw:
        if fld == COUNT:  # samples per step: left out above
            lows.append(-math.inf)
            highs.append(math.inf)
            continue
        factor = mapping.factor(fld)
        if fld in FRACTIONS:
            lows.append(-_ROUNDING / factor)
            highs.append((1 + _ROUNDING) / factor)
        else:
            lo, hi, _, _ = _LIMITS.get(fld, (-math.inf, math.inf, "", ""))
            lows.append(lo / factor)
            highs.append(hi / factor)
    bounds = pl.DataFrame({"sid": range(len(raw)), "lo": lows, "hi": highs},
                          schema={"sid": pl.Int64, "lo": pl.Float64, "hi": pl.Float64})
    bad = (points.filter(pl.col("value").is_finite()).join(bounds, on="sid")
           .filter((pl.col("value") < pl.col("lo")) | (pl.col("value") > pl.col("hi"))).sort("ts"))
    if not bad.height:
        return
    sid, ts, value, _, _ = bad.row(0)
    fld, name, labels = raw[sid]
    if fld in FRACTIONS:
        percent = mapping.metrics[fld].unit.lower() == "percent"
        why = ("negative utilization" if value < 0 else
               "utilization above 100 %" if percent else
               "utilization above 1 (the metric is mapped as a 0-1 fraction; for percent give "
               f"--metric {fld}={name}:percent)")
    else:
        lo, hi, what, unit = _LIMITS[fld]
        why = (f"{what} too large to store (above {hi:g} {unit})" if value > 0 else
               f"{what} below absolute zero" if lo < 0 else f"negative {what}")
    raise GpuauditError(f"bad value from {url}: {series_text(name, labels)} = {value:g} at {_when(ts)}: {why}; "
                        "nothing imported")


def series_text(name: str, labels: dict[str, str]) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{text[:300]}{'...' if len(text) > 300 else ''}}}"


def _when(ts: float) -> str:
    try:
        return f"{datetime.fromtimestamp(ts, UTC):%Y-%m-%dT%H:%M:%SZ}"
    except (ValueError, OverflowError, OSError):
        return f"timestamp {ts:g}"
