"""The one text-safety module. Text that comes from data (host and user names, job ids, pod and GPU names,
commands, server answers) shown on a terminal or written to a file a terminal may `cat` (report.md,
report.html): control and format characters are escaped, so a value cannot recolor the screen, move the
cursor, overwrite a line (\\r, \\b), hide text (NUL), reorder it (bidi overrides such as U+202E) or break a
line (U+2028). JSON's own escapes for the same classes are util.jsonio.json_text's."""

from __future__ import annotations

import unicodedata

# C0/C1 controls and DEL (Cc), format characters incl. bidi controls and zero-width ones (Cf), line and
# paragraph separators (Zl, Zp), and lone surrogates (Cs, from undecodable bytes).
_UNSAFE = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def _escape(ch: str) -> str:
    o = ord(ch)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def printable(value: object) -> str:
    """`str(value)` with every control / format character written as a visible escape (`\\x1b`, `\\r`
    -> `\\x0d`, `\\u202e`); other text, including non-ASCII letters and emoji, is unchanged."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # the common case: nothing to escape (the check is fast, in C)
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _UNSAFE else c for c in text)


def visible(text: str, keep: str = "") -> str:
    """`printable(text)`, but the characters in `keep` (e.g. "\\n\\t" in HTML, where they lay out as spaces)
    stay as they are: data strings in written output (report.md, report.html)."""
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
