"""The analyzer: real vs runtime-hour utilization, the decision tree, the cost model, hybrid sizing and
confidence. Stage 1 (stage1/rollup.py) is one pass of SQL over the dataset; everything else is pure functions on
small polars frames that build one `AnalysisResult` (result.py).

Importing this package is cheap; `analyze` loads polars/DuckDB when called. Nothing here imports typer
or pynvml.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuaudit.analysis.config import Config, load_config
    from gpuaudit.analysis.pipeline import analyze, analyze_rollups
    from gpuaudit.analysis.result import AnalysisResult

__all__ = ["AnalysisResult", "Config", "analyze", "analyze_rollups", "load_config"]


def __getattr__(name: str) -> Any:
    if name in ("analyze", "analyze_rollups"):
        from gpuaudit.analysis import pipeline as mod

        return getattr(mod, name)
    if name in ("Config", "load_config"):
        from gpuaudit.analysis import config

        return getattr(config, name)
    if name == "AnalysisResult":
        from gpuaudit.analysis.result import AnalysisResult

        return AnalysisResult
    raise AttributeError(name)
