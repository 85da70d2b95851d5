"""GPU model identity and the shipped price catalogue.

`model_key(name)` turns whatever a GPU reports as its name (NVML / nvidia-smi, dcgm-exporter's `modelName`,
a Slurm gres type, a MIG slice's name) into a stable key such as `h100-sxm-80gb` or `t4`; `identify(name)`
also says whether the key is in the catalogue. `catalogue()` reads models.toml (shipped in this package,
read with importlib.resources): per model its cloud instance, hardware price, board power, node size and
memory, each figure with its source and date. Cheap to import: no polars, no analysis modules.
"""

from __future__ import annotations

from gpuaudit.catalog.models import (
    FIGURES,
    ModelSpec,
    Source,
    catalogue,
    identify,
    model_key,
    slug,
)

__all__ = ["FIGURES", "ModelSpec", "Source", "catalogue", "identify", "model_key", "slug"]
