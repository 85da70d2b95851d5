"""A push's state, kept per (dataset, target) in `<data>/.push/<target id>/`: the manifest of what the target
confirmed (`manifest.jsonl`: name, size, mtime, MD5), the lock that lets one push of the dataset to that target
run at a time, and who owns what is created there.

The manifest is never trusted alone: push checks each confirmed file against what the target lists, and sends
again what the target lost. The state directory belongs to the dataset's owner: a push run as root gives what
it creates there to the owner of the data directory, so that the agent's uploader (its user) can go on using
it."""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import os
import pwd
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from gpuaudit.errors import GpuauditError
from gpuaudit.util import atomic, jsonio, locks, paths

STATE_DIR = ".push"
_LOCK_POLL_S = 0.5


class PushBusy(GpuauditError):
    """Another push of the same dataset to the same target holds the lock."""


class _Located(Protocol):
    url: str


class Manifest:
    """What the target confirmed: an append-only JSON-lines log (the last line of a name wins), rewritten
    without the entries of files gone locally once it holds more dead lines than live ones."""

    def __init__(self, state: Path, owner: tuple[int, int] | None = None) -> None:
        self.path = state / "manifest.jsonl"
        self.owner = owner
        self.entries: dict[str, dict[str, Any]] = {}
        self.lines = 0
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = jsonio.loads(line)
                    self.entries[entry["f"]] = entry
                    self.lines += 1
                except (ValueError, KeyError, TypeError):  # a torn last line after a crash: re-checked remotely
                    continue
        self._out: IO[str] | None = None

    def matches(self, rel: str, size: int, mtime_ns: int) -> bool:
        e = self.entries.get(rel)
        return e is not None and e.get("s") == size and e.get("m") == mtime_ns

    def record(self, rel: str, **fields: Any) -> None:
        entry = {**self.entries.get(rel, {}), "f": rel, **fields}
        self.entries[rel] = entry
        if self._out is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out = self.path.open("a", encoding="utf-8")
            give(self.path, self.owner)
        self._out.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._out.flush()
        self.lines += 1

    def close(self, live: set[str]) -> None:
        if self._out is not None:
            os.fsync(self._out.fileno())
            self._out.close()
            self._out = None
        for rel in [r for r in self.entries if r not in live]:
            del self.entries[rel]
        if self.lines > 2 * len(self.entries) + 100:
            text = "".join(json.dumps(entry, separators=(",", ":")) + "\n" for entry in self.entries.values())
            atomic.write_atomic(self.path, text, before_replace=lambda tmp: give(tmp, self.owner))
            self.lines = len(self.entries)


def state_dir(root: Path, target: _Located) -> Path:
    """The state directory of pushes of `root` to `target` (its manifest, its lock)."""
    key = target.url if paths.as_url(target.url) else str(Path(target.url).resolve())
    return root / STATE_DIR / hashlib.sha1(key.encode()).hexdigest()[:12]


def owner_of(root: Path) -> tuple[int, int] | None:
    """(uid, gid) to give the state files to: the data directory's owner, when this push runs as root and
    the data is another user's (the agent's). Else None: files are created as this user's, as usual."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    st = root.stat()
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else None


def give(path: Path, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        os.chown(path, *owner)


@contextlib.contextmanager
def locked(state: Path, url: str, owner: tuple[int, int] | None, wait_s: float,
           sleep: Callable[[float], None], clock: Callable[[], float]) -> Iterator[None]:
    """Hold the state directory's lock for one push (waiting up to `wait_s`), else PushBusy; the directory and
    what is made in it go to `owner`."""
    made = [d for d in (state.parent, state) if not d.exists()]
    state.mkdir(parents=True, exist_ok=True)
    for d in made:
        give(d, owner)
    (state / "target").write_text(url + "\n", encoding="utf-8")  # which target this folder is about
    give(state / "target", owner)
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        give(state / "lock", owner)
        if not locks.take(fd, wait_s=wait_s, poll_s=_LOCK_POLL_S, sleep=sleep, clock=clock):
            raise PushBusy(f"another `gpuaudit push` to {url} from this dataset is running; it ships "
                           "these files (a file it missed goes with the next push)")
        yield
    finally:
        os.close(fd)


def state_error(root: Path, state: Path, e: OSError) -> GpuauditError:
    """A state directory this user cannot write (e.g. left by a push run as root by an older gpuaudit)."""
    st = root.stat()
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return GpuauditError(
        f"push state {e.filename or state} is not writable by this user ({e.strerror}): give it to the dataset's "
        f"owner (chown -R {user}:{group} {root / STATE_DIR}) or run push as that user, then run it again")

