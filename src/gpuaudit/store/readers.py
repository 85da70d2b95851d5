"""How readers and writers of one dataset directory agree, so that a reader sees every row exactly once at
every moment of a compaction, an import or a push's prune. The one owner of these rules.

A reader lists the files (its snapshot) and reads them later (DuckDB binds the list when a view is created;
queries run after). Two things could break that snapshot, and each has its guard:

- A listing taken while files appear and disappear (readdir is no snapshot). Writers change what a listing
  shows only under an exclusive flock on <root>/.publish.lock, held for the moment of publishing; a reader
  lists under the shared lock (`listing`). A partition's names are also listed until two listings agree
  (`stable_names`), for a writer that does not take the lock (another machine writing over NFS).
- Files of the snapshot deleted before the reader read them (a compaction's or an import's replaced inputs, a
  push's prune on a collection directory). A reader holds a shared flock on <root>/.read.lock for as long as
  its dataset is open (`hold`); a writer deletes replaced files only while it can take that lock exclusively
  without waiting (`unread`): then no open reader can have listed them. Otherwise the files stay, hidden from
  every later listing by their compaction record (journal.py), and the next compaction removes them
  (compact.finish_journals). Where no lock can protect the reader (an s3:// dataset, a lock file created after
  the reader opened, a reader kept open past the writer), the reader notices the vanished file, lists again
  and reruns its query (reader.Dataset), and never calls such a file damaged.

The locks are advisory flocks the kernel releases when their holder exits, however it exits; a reader only
opens lock files that exist (it never writes into a dataset): writers create them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from gpuaudit.util import locks

log = logging.getLogger("gpuaudit.store")

_READ_LOCK = ".read.lock"  # shared by open readers; exclusive (never waited for) by a writer about to delete
_PUBLISH_LOCK = ".publish.lock"  # shared by a reader while it lists; exclusive by a writer while it publishes
LOCK_FILES = (_READ_LOCK, _PUBLISH_LOCK)
_STABLE_TRIES = 20  # listings of one partition before its last one is taken as it is


def prepare(root: Path) -> None:
    """Create the lock files before a writer first changes `root`: a reader that opens after this holds them."""
    for name in LOCK_FILES:
        locks.close(locks.open_file(Path(root) / name))


def hold(root: Path) -> int | None:
    """A reader's shared lock on `root` while it is open (release with `release`); None where there is none to
    take (no writer has created it yet, or the root is not a local directory)."""
    fd = locks.open_file(Path(root) / _READ_LOCK, create=False)
    if fd is None:
        return None
    try:
        locks.take(fd, shared=True, wait_s=locks.WAIT)  # waits only for a writer's few unlinks
    except OSError:
        locks.close(fd)
        return None
    return fd


release = locks.close


@contextlib.contextmanager
def unread(root: Path) -> Iterator[bool]:
    """For a writer about to delete files a compaction record replaced: True when no reader holds `root` open
    (readers then wait for the block to end before they list), False when one does, or the lock cannot be
    created (a read-only root: nobody can be told apart): keep the files."""
    with locks.held(Path(root) / _READ_LOCK, wait_s=0.0) as free:
        yield free


@contextlib.contextmanager
def publishing(root: Path) -> Iterator[None]:
    """A writer's exclusive lock for the moment files appear or disappear in `root` (short: renames and links)."""
    with locks.held(Path(root) / _PUBLISH_LOCK):
        yield


@contextlib.contextmanager
def listing(root: Path) -> Iterator[None]:
    """A reader's shared lock while it lists `root`: no writer publishes meanwhile (where the lock exists)."""
    with locks.held(Path(root) / _PUBLISH_LOCK, shared=True, create=False):
        yield


def stable_names(part_dir: Path) -> list[str]:
    """The names in `part_dir`, listed until two listings agree: a listing that raced a writer differs from the
    next one (names are never reused), one that did not is the directory as it was."""
    names = sorted(os.listdir(part_dir))
    for _ in range(_STABLE_TRIES):
        again = sorted(os.listdir(part_dir))
        if again == names:
            return names
        names = again
    log.debug("listing of %s kept changing; taking the last one", part_dir)
    return names
