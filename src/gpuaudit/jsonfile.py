"""Reading JSON that anyone could have written (sidecars, status files, compaction records, state lines):
whatever is in it, the caller gets the document or a ValueError, never another exception. Python's parser
recurses per nesting level, so `[[[[...]]]]` a few thousand deep raises RecursionError, which a caller's
`except ValueError` would not catch: it is turned into a ValueError here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
