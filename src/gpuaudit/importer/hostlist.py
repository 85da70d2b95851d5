"""Slurm host lists: `dgx-a100-[01-02,05]`, `gpu[1-3],cpu7`, `rack[1-2]-n[01-02]` -> host names.

The syntax (Slurm's hostlist.c): names separated by commas outside brackets; a bracket holds comma-separated
numbers and ranges `lo-hi`, zero-padded to the width of `lo` (`[08-10]` -> 08 09 10); several bracket groups in
one name expand as a product, left to right.
"""

from __future__ import annotations

import re

from gpuaudit.errors import GpuauditError

_MAX_HOSTS = 100_000  # more names from one list is a typo (`[1-99999999]`), not a cluster
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand(text: str) -> list[str]:
    """The host names of a Slurm host list, in order, duplicates kept out. GpuauditError on bad syntax."""
    out: list[str] = []
    seen: set[str] = set()
    for name in _split_top(text):
        for host in _expand_one(name, text):
            if host not in seen:
                seen.add(host)
                out.append(host)
            if len(out) > _MAX_HOSTS:
                raise GpuauditError(f"host list {text!r} expands to more than {_MAX_HOSTS:,} hosts")
    return out


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise GpuauditError(f"bad host list {text!r}: ']' without '['")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise GpuauditError(f"bad host list {text!r}: '[' without ']'")
    parts.append("".join(cur))
    names = [p.strip() for p in parts]
    if not names or any(not n for n in names):
        raise GpuauditError(f"bad host list {text!r}: an empty name")
    return names


def _expand_one(name: str, whole: str) -> list[str]:
    open_at = name.find("[")
    if open_at < 0:
        if "]" in name:
            raise GpuauditError(f"bad host list {whole!r}: ']' without '['")
        return [name]
    close_at = name.index("]", open_at)
    if "[" in name[open_at + 1:close_at]:
        raise GpuauditError(f"bad host list {whole!r}: nested brackets")
    prefix, body, rest = name[:open_at], name[open_at + 1:close_at], name[close_at + 1:]
    tails = _expand_one(rest, whole) if rest else [""]
    out = []
    for item in body.split(","):
        m = _RANGE.fullmatch(item.strip())
        if not m:
            raise GpuauditError(f"bad host list {whole!r}: {item!r} is not a number or a range lo-hi")
        lo_text, hi_text = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise GpuauditError(f"bad host list {whole!r}: range {item!r} runs backwards")
        if (hi - lo + 1) * len(tails) > _MAX_HOSTS:
            raise GpuauditError(f"host list {whole!r} expands to more than {_MAX_HOSTS:,} hosts")
        width = len(lo_text)
        out += [f"{prefix}{n:0{width}d}{tail}" for n in range(lo, hi + 1) for tail in tails]
    return out
