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

try:  # the `full` install's encoder (C): a fleet's result document is tens of MB; the agent's base install has none
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by the agent-only install
    _orjson = None  # type: ignore[assignment]


def _rich_default(obj: Any) -> Any:
    """What orjson hands back of a rich document: dataclasses, in their JSON_FIELDS order as plain() has them."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = getattr(type(obj), "JSON_FIELDS", None) or [f.name for f in dataclasses.fields(obj)]
        return {name: getattr(obj, name) for name in names}
    raise TypeError(type(obj).__name__)


def plain(obj: Any, *, rich: bool = False, maps: bool = False, default: Callable[[Any], Any] | None = None) -> Any:
    """`obj` with every non-finite float (NaN, ±inf; numpy floats too) as None, tuples as lists and numpy
    scalars as Python values, recursively. `rich` (a result document): also enums as their values, dataclasses
    as dicts (field order, or the class's JSON_FIELDS), datetimes as ISO 8601 UTC ("Z"), dates as ISO, dict keys
    as strings. `maps` (query results): a list of (key, value) pairs, DuckDB's MAP, as an object, a key that is
    not a string JSON-encoded (with `default` for what JSON lacks)."""
    if rich and not maps and _orjson is not None and (
            isinstance(obj, dict | list | tuple) or (dataclasses.is_dataclass(obj) and not isinstance(obj, type))):
        # The same walk in C, ~10x faster: through JSON and back (floats round-trip exactly; NaN and infinity
        # become null). Anything it does not take as plain() does (a key that is not a string, an integer
        # beyond 64 bits, an object of no JSON type) falls back to the walk below.
        try:
            return _orjson.loads(_orjson.dumps(obj, default=_rich_default, option=_RICH))
        except TypeError:
            pass
    return _walk(obj, rich=rich, maps=maps, default=default)


def _walk(obj: Any, *, rich: bool, maps: bool, default: Callable[[Any], Any] | None) -> Any:
    def again(v: Any) -> Any:
        return _walk(v, rich=rich, maps=maps, default=default)

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


# Datetimes in C too (a fleet's tables hold hundreds of thousands): naive ones read as UTC and UTC written "Z",
# as plain() writes them; gpuaudit's datetimes are all UTC (its storage rule), the one case where both agree.
_RICH = (0 if _orjson is None else _orjson.OPT_PASSTHROUGH_DATACLASS | _orjson.OPT_NAIVE_UTC | _orjson.OPT_UTC_Z
         | _orjson.OPT_SERIALIZE_NUMPY)


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


_ASCII_BELOW_DEL = bytes(range(0x7F))


def json_escaped(text: str) -> str:
    """Serialized JSON with every unsafe character (util.textsafe's classes) written as a JSON escape
    (`\\u202e`). JSON's structure is ASCII and the encoder already escapes C0 controls, so any other unsafe
    character is inside a string, where the escape decodes to the same text: the document stays valid and
    round-trips exactly. Readable non-ASCII text (é, —, 日本) stays as it is."""
    if text.isascii() and "\x7f" not in text:  # the common case, checked in C
        return text
    # Distinct characters only: a large report has few distinct non-ASCII characters, found by dropping every
    # ASCII byte in C (a set of the whole text costs half a second per 45 MB; this a tenth of it).
    rest = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_BELOW_DEL).decode("utf-8", "surrogatepass")
    unsafe = {ch for ch in set(rest) if ord(ch) >= 0x7F and printable(ch) != ch}
    if not unsafe:
        return text
    return text.translate({ord(ch): _json_escape(ch) for ch in unsafe})


def json_text(obj: Any, **kwargs: Any) -> str:
    """`dumps` (never NaN / Infinity) with non-ASCII text kept readable and unsafe characters escaped: JSON
    for people and files (report.json, `analyze --json`)."""
    if _orjson is not None and kwargs == {"indent": 2}:  # a document for files and people: report.json, --json
        try:  # orjson: the same document (NaN and infinity as null; floats in their shortest exact form), 10x faster
            return json_escaped(_orjson.dumps(obj, option=_orjson.OPT_INDENT_2).decode("utf-8"))
        except TypeError:  # what orjson will not take (a key that is not a string): the stdlib's encoder
            pass
    return json_escaped(dumps(obj, ensure_ascii=False, **kwargs))


def document_bytes(obj: Any, *, indent: bool) -> bytes:
    """A result document (dataclasses, enums, UTC datetimes: what `plain(rich=True)` takes) as UTF-8 JSON, the
    text `json_text` writes of `plain(obj, rich=True)`, indented for people or compact for files, in one pass:
    a fleet's result (45 MB, 116,000 job and pod rows) is never built as Python dicts only to be encoded again,
    nor decoded to be encoded back. What orjson will not take (a key that is not a string, an integer beyond
    64 bits) goes the walker's way."""
    if _orjson is not None:
        try:
            raw = _orjson.dumps(obj, default=_rich_default, option=_RICH | (_orjson.OPT_INDENT_2 if indent else 0))
        except TypeError:
            pass
        else:
            if raw.isascii() and b"\x7f" not in raw:  # the common case, checked in C: nothing to escape
                return raw
            return json_escaped(raw.decode("utf-8")).encode("utf-8")
    kwargs: dict[str, Any] = {"indent": 2} if indent else {"separators": (",", ":")}
    return json_text(plain(obj, rich=True), **kwargs).encode("utf-8")


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
