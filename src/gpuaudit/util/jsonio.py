"""The one JSON module. Writing: JSON that strict parsers accept, never the NaN / Infinity tokens Python's
encoder writes by default. Reading JSON that anyone could have written (sidecars, status files, compaction
records, state lines): whatever is in it, the caller gets the document or a ValueError, never another exception.
Python's parser recurses per nesting level, so `[[[[...]]]]` a few thousand deep raises RecursionError, which a
caller's `except ValueError` would not catch: it is turned into a ValueError here."""

from __future__ import annotations

import json
import math
from pathlib import Path
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


class MalformedJSON(ValueError):
    """Not a JSON document gpuaudit can read: bad syntax, bad encoding, or nested too deeply."""


def loads(text: str | bytes | bytearray) -> Any:
    """json.loads; any failure to parse (too deep nesting included) is a MalformedJSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise MalformedJSON("nested too deeply") from None
    except (ValueError, TypeError) as e:  # JSONDecodeError, UnicodeDecodeError (bytes), a non-text argument
        raise MalformedJSON(str(e)) from None


def read_json_file(path: Path | str) -> Any:
    """The JSON document in the file at `path`. Raises OSError when it cannot be read, MalformedJSON (a
    ValueError) when it is not UTF-8 JSON."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedJSON(f"not UTF-8 (byte {data[e.start]:#04x} at offset {e.start})") from None
    return loads(text)
