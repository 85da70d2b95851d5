"""JSON that strict parsers accept: never the NaN / Infinity tokens Python's encoder writes by default."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(obj: Any) -> Any:
    """`obj` with every non-finite float (NaN, ±inf; also numpy floats) replaced by None, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if type(obj).__module__ == "numpy" and hasattr(obj, "item"):  # numpy scalars that are not float subclasses
        return finite(obj.item())
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps with non-finite floats as null. The common case (nothing to replace) costs one encoder
    pass; only a document that holds NaN or infinity is walked and encoded again."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:  # "Out of range float values are not JSON compliant"
        return json.dumps(finite(obj), allow_nan=False, **kwargs)
