"""Atomic publication, the one owner: write to a staging name, fsync, rename into place, fsync the directory.
A reader or a crash sees the whole file or none of it."""

from __future__ import annotations

import os
from pathlib import Path


def fsync(path: Path) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(staged: Path, final: Path) -> None:
    """fsync the staged file, rename it into place, fsync the directory: the file appears whole or not at all."""
    fsync(staged)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, final)
    fsync(final.parent)
