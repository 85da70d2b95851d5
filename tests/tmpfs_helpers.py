"""A full disk for tests: a tiny tmpfs in a private mount namespace (`unshare -rm`), no root needed where
user namespaces are allowed, nothing mounted outside the one command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest
from tests.helpers import REPO


def _can_mount_tmpfs() -> bool:
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    probe = subprocess.run([unshare, "-rm", "sh", "-c", 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d" '
                            '&& umount "$d"; rmdir "$d"'], capture_output=True, timeout=30)
    return probe.returncode == 0


def in_tiny_tmpfs(size_kb: int, code: str, *args: str) -> dict[str, Any]:
    """Run Python `code` (argv[1] = a directory on a fresh tmpfs of size_kb, then `args`) in a private mount
    namespace (`unshare -rm`: no root needed where user namespaces are allowed); it prints JSON, returned."""
    if not _can_mount_tmpfs():
        pytest.skip("needs `unshare -rm` and tmpfs (user namespaces) to simulate a full disk")
    script = (f"set -e; d=$(mktemp -d); mount -t tmpfs -o size={size_kb}k tmpfs \"$d\"; "
              'py=$0; code=$1; shift; rc=0; "$py" -c "$code" "$d" "$@" || rc=$?; umount "$d"; rmdir "$d"; exit $rc')
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script, sys.executable, code, *args], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)
