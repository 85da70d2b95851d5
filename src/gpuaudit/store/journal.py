"""The compaction record, its one owner: `{"new": merged file, "old": [the files it replaces]}` in a partition's
`.compact-*.json`. Written by compaction and by an import that replaces files; read by every reader (local and
s3://) and by `push`, which ships records so that a target hides what they replace. Reading validates a record;
`superseded` is the one rule for which files a set of records hides."""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpuaudit.util import jsonio
from gpuaudit.util.atomic import publish

if TYPE_CHECKING:
    pass

log = logging.getLogger("gpuaudit.store")
K = TypeVar("K", bound=Hashable)


JOURNAL_PREFIX = ".compact-"
def superseded(names: Iterable[str], records: Iterable[Any], where: object = None) -> set[str]:
    """The names a partition's compaction records hide. A record {"new": merged, "old": [inputs]} applies when
    its merged file is present, or is itself hidden by a record that applies (it was compacted again); one
    whose merged file never landed (a crash before publishing it) hides nothing. The same rule serves a node's
    disk (a crash mid-compaction) and a collection target, where the inputs may have been pushed before the
    merged file: records are kept and pushed, so no row is ever counted twice (see push.py). Records that
    replace each other in a cycle (no compaction writes them: hand-made or foreign) hide nothing, with a
    warning naming `where` (the partition)."""
    present = set(names)
    valid = [r for r in records if _is_record(r)]
    cyclic = in_cycles(valid)
    if cyclic:
        _warn_cycle(where, [valid[i]["new"] for i in sorted(cyclic)])
    edges = [(r["new"], {o for o in r["old"] if isinstance(o, str) and o != r["new"]})
             for i, r in enumerate(valid) if i not in cyclic]
    hidden: set[str] = set()
    grew = True
    while grew:  # a chain of compactions is a few records long
        grew = False
        for new, old in edges:
            if (new in present or new in hidden) and not old <= hidden:
                hidden |= old
                grew = True
    return hidden


def _is_record(r: Any) -> bool:
    return isinstance(r, dict) and isinstance(r.get("new"), str) and isinstance(r.get("old"), list)


def in_cycles(records: Sequence[Mapping[str, Any]]) -> set[int]:
    """Indices of the records on a cycle of "replaces": A's merged file among B's inputs and B's among A's
    (or a longer ring). Real compactions form chains, each merged file newer than its inputs; a cycle would
    have each record hide the other's file, so both files, and all their rows, would vanish."""
    takers: dict[str, list[int]] = {}  # file name -> the records that list it among their inputs
    for i, r in enumerate(records):
        for o in r["old"]:
            if isinstance(o, str):
                takers.setdefault(o, []).append(i)
    out: set[int] = set()
    for start in range(len(records)):
        stack, seen = list(takers.get(records[start]["new"], ())), set()
        while stack:  # the records that (transitively) replace start's merged file
            i = stack.pop()
            if i == start:
                out.add(start)
                break
            if i not in seen:
                seen.add(i)
                stack.extend(takers.get(records[i]["new"], ()))
    return out


def _warn_cycle(where: object, news: Sequence[str]) -> None:
    log.warning("ignoring compaction journals in %s that replace each other in a cycle (merged files %s); they "
                "hide and delete nothing: look at them, then remove them", where or "a partition", ", ".join(news))


def acting_records(records: Mapping[K, Any], where: object = None) -> dict[K, Any]:
    """`records` (name -> parsed record) without those on a cycle (see in_cycles): the ones a caller may delete
    files on the basis of."""
    names = [n for n, r in records.items() if _is_record(r)]
    cyclic = in_cycles([records[n] for n in names])
    if cyclic:
        _warn_cycle(where, [records[names[i]]["new"] for i in sorted(cyclic)])
    return {n: records[n] for i, n in enumerate(names) if i not in cyclic}


def has_supersedable(names: Iterable[str]) -> bool:
    """Whether records could hide any of `names`: only with two data files or more. A lone file is either a
    record's merged file (which no record of it lists) or not superseded. This keeps reads fast: a compacted
    day keeps its record (listing up to a day of flushes), and parsing thousands of them on every open cost
    seconds."""
    return sum(n.endswith(".parquet") for n in names) >= 2


def hidden_names(part_dir: Path, names: Iterable[str]) -> set[str]:
    """Names hidden by the compaction records in `part_dir` (see superseded)."""
    names = list(names)
    if not has_supersedable(names):
        return set()
    records = []
    for name in names:
        if not (name.startswith(JOURNAL_PREFIX) and name.endswith(".json")):
            continue
        record = load_journal(part_dir / name)
        if record is not None:
            records.append(record)
    return superseded(names, records, part_dir) if records else set()


def load_journal(path: Path) -> dict[str, Any] | None:
    """A compaction journal {"new": merged file, "old": [the files it replaces]}, or None, with a warning naming
    it, when the file is not one (hand-edited, truncated, foreign): it then hides and deletes nothing."""
    problem: str | None
    try:
        entry = jsonio.read_json_file(path)
    except (OSError, ValueError) as e:
        problem = f"unreadable: {e}"
    else:
        problem = _journal_problem(entry)
    if problem:
        log.warning("ignoring malformed compaction journal %s (%s); it hides and deletes nothing: "
                    "look at it, then remove it", path, problem)
        return None
    return entry


def _journal_problem(entry: Any) -> str | None:
    if not (isinstance(entry, dict) and isinstance(entry.get("new"), str) and isinstance(entry.get("old"), list)):
        return 'expected {"new": "<file>.parquet", "old": ["<file>.parquet", ...]}'
    names = [entry["new"], *entry["old"]]
    # Names of files in the journal's own partition only: a path would let it hide or delete other files.
    if not all(isinstance(n, str) and n.endswith(".parquet") and n == os.path.basename(n) and "\\" not in n
               and "\0" not in n for n in names):
        return "names something other than a Parquet file of its partition"
    if entry["new"] in entry["old"]:
        return "lists its merged file among the files it replaces"
    return None


def is_record_name(name: str) -> bool:
    """Whether a partition's file name is a compaction record's."""
    return name.startswith(JOURNAL_PREFIX) and name.endswith(".json")


def record_name() -> str:
    """A fresh record file name for a partition."""
    return f"{JOURNAL_PREFIX}{uuid.uuid4().hex[:8]}.json"


def encode(new: str, old: Iterable[str]) -> str:
    """The record's text: what every reader and `push` parse back with `load_journal` / `parse`."""
    entry = {"new": new, "old": list(old)}
    problem = _journal_problem(entry)
    if problem:
        raise ValueError(f"not a compaction record: {problem}")
    return json.dumps(entry)


def write_record(staged: Path, final: Path, new: str, old: Iterable[str]) -> None:
    """Publish the record `final` (written first to `staged`, then fsynced and renamed into place)."""
    staged.write_text(encode(new, old), encoding="utf-8")
    publish(staged, final)
