"""Data strings in written output (report.md, report.html, JSON): control and format characters made visible
or escaped, never raw. An ESC sequence, BEL, a bidi override (U+202E) or a line separator in a host, user or
GPU name must not recolor a terminal that `cat`s the file, reorder what a reader sees, or break a line.
The character classes are textsafe's (`printable`); this adds the two forms the files need: keeping the
layout whitespace a renderer turns into spaces, and JSON's own escapes."""

from __future__ import annotations

from typing import Any

from gpuaudit.util.jsonio import dumps
from gpuaudit.util.textsafe import printable


def visible(text: str, keep: str = "") -> str:
    """`printable(text)`, but the characters in `keep` (e.g. "\\n\\t" in HTML, where they lay out as spaces)
    stay as they are."""
    if text.isprintable():  # the common case, checked in C
        return text
    if not keep:
        return printable(text)
    out: list[str] = []
    part: list[str] = []
    for ch in text:
        if ch in keep:
            out.append(printable("".join(part)))
            out.append(ch)
            part = []
        else:
            part.append(ch)
    out.append(printable("".join(part)))
    return "".join(out)


def _json_escape(ch: str) -> str:
    o = ord(ch)
    if o < 0x10000:
        return f"\\u{o:04x}"
    o -= 0x10000  # outside the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


def json_escaped(text: str) -> str:
    """Serialized JSON with every unsafe character written as a JSON escape (`\\u202e`). JSON's structure is
    ASCII and the encoder already escapes C0 controls, so any other unsafe character is inside a string, where
    the escape decodes to the same text: the document stays valid and round-trips exactly. Readable non-ASCII
    text (é, —, 日本) stays as it is."""
    if text.isascii() and "\x7f" not in text:  # the common case, checked in C
        return text
    # Distinct characters only (a set built in C): a large report has few distinct non-ASCII characters.
    unsafe = {ch for ch in set(text) if ord(ch) >= 0x7F and printable(ch) != ch}
    if not unsafe:
        return text
    return text.translate({ord(ch): _json_escape(ch) for ch in unsafe})


def json_text(obj: Any, **kwargs: Any) -> str:
    """jsonout.dumps (never NaN / Infinity) with non-ASCII text kept readable and unsafe characters escaped."""
    return json_escaped(dumps(obj, ensure_ascii=False, **kwargs))

