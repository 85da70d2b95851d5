"""The one JSON module. Writing: JSON that strict parsers accept, never the NaN / Infinity tokens Python's
encoder writes by default, and (json_text) never a raw control or bidi character. Turning values into plain
JSON-able ones: `plain`, the one walker. Reading JSON that anyone could have written (sidecars, status files,
compaction records, state lines): whatever is in it, the caller gets the document or a ValueError, never another
exception. Python's parser recurses per nesting level, so `[[[[...]]]]` a few thousand deep raises
RecursionError, which a caller's `except ValueError` would not catch: it is turned into a ValueError here."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuaudit.util.textsafe import printable


def plain(obj: Any, *, rich: bool = False, maps: bool = False, default: Callable[[Any], Any] | None = None) -> Any:
    """`obj` with every non-finite float (NaN, ±inf; numpy floats too) as None, tuples as lists and numpy
    scalars as Python values, recursively. `rich` (a result document): also enums as their values, dataclasses
    as dicts (field order, or the class's JSON_FIELDS), datetimes as ISO 8601 UTC ("Z"), dates as ISO, dict keys
    as strings. `maps` (query results): a list of (key, value) pairs, DuckDB's MAP, as an object, a key that is
    not a string JSON-encoded (with `default` for what JSON lacks)."""
    def again(v: Any) -> Any:
        return plain(v, rich=rich, maps=maps, default=default)

    if isinstance(obj, float):
        return (float(obj) if rich else obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {(str(k) if rich else k): again(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if maps and obj and all(isinstance(v, tuple) and len(v) == 2 for v in obj):
            return {(k if isinstance(k, str) else json.dumps(again(k), default=default)): again(v) for k, v in obj}
        return [again(v) for v in obj]
    if rich:
        if isinstance(obj, enum.Enum):
            return obj.value
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            names = getattr(type(obj), "JSON_FIELDS", None) or [f.name for f in dataclasses.fields(obj)]
            return {name: again(getattr(obj, name)) for name in names}
        if isinstance(obj, dt.datetime):
            if obj.tzinfo is None:
                obj = obj.replace(tzinfo=dt.UTC)
            return obj.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
        if isinstance(obj, dt.date):
            return obj.isoformat()
    if type(obj).__module__ == "numpy" and hasattr(obj, "item"):  # numpy scalars that are not float subclasses
        return again(obj.item())
    return obj


def finite(obj: Any) -> Any:
    """`obj` with every non-finite float replaced by None, recursively (plain's base case)."""
    return plain(obj)


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps with non-finite floats as null. The common case (nothing to replace) costs one encoder
    pass; only a document that holds NaN or infinity is walked and encoded again."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:  # "Out of range float values are not JSON compliant"
        return json.dumps(finite(obj), allow_nan=False, **kwargs)


def _json_escape(ch: str) -> str:
    o = ord(ch)
    if o < 0x10000:
        return f"\\u{o:04x}"
    o -= 0x10000  # outside the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


def json_escaped(text: str) -> str:
    """Serialized JSON with every unsafe character (util.textsafe's classes) written as a JSON escape
    (`\\u202e`). JSON's structure is ASCII and the encoder already escapes C0 controls, so any other unsafe
    character is inside a string, where the escape decodes to the same text: the document stays valid and
    round-trips exactly. Readable non-ASCII text (é, —, 日本) stays as it is."""
    if text.isascii() and "\x7f" not in text:  # the common case, checked in C
        return text
    # Distinct characters only (a set built in C): a large report has few distinct non-ASCII characters.
    unsafe = {ch for ch in set(text) if ord(ch) >= 0x7F and printable(ch) != ch}
    if not unsafe:
        return text
    return text.translate({ord(ch): _json_escape(ch) for ch in unsafe})


def json_text(obj: Any, **kwargs: Any) -> str:
    """`dumps` (never NaN / Infinity) with non-ASCII text kept readable and unsafe characters escaped: JSON
    for people and files (report.json, `analyze --json`)."""
    return json_escaped(dumps(obj, ensure_ascii=False, **kwargs))


class _MalformedJSON(ValueError):
    """Not a JSON document gpuaudit can read: bad syntax, bad encoding, or nested too deeply."""


def loads(text: str | bytes | bytearray) -> Any:
    """json.loads; any failure to parse (too deep nesting included) is a MalformedJSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise _MalformedJSON("nested too deeply") from None
    except (ValueError, TypeError) as e:  # JSONDecodeError, UnicodeDecodeError (bytes), a non-text argument
        raise _MalformedJSON(str(e)) from None


def read_json_file(path: Path | str) -> Any:
    """The JSON document in the file at `path`. Raises OSError when it cannot be read, MalformedJSON (a
    ValueError) when it is not UTF-8 JSON."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _MalformedJSON(f"not UTF-8 (byte {data[e.start]:#04x} at offset {e.start})") from None
    return loads(text)
