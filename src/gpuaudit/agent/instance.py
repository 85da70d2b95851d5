"""One agent per (data directory, host), and whether a recorded agent process is still alive.

- Lock: `<root>/.agent-<host>.lock`, held with flock(LOCK_EX) for the agent's life; the kernel drops it
  when the process dies, however it dies, so there is nothing stale to clean up. Agents of different
  hosts sharing one directory (a shared filesystem) take different locks. The file holds the holder's
  pid and node name, for the error a second agent prints.
- Identity: the status file records the pid, the process's start time in clock ticks since boot
  (/proc/<pid>/stat field 22) and the kernel's boot id, so `agent status` can tell the agent from a
  later process that reused its pid, and a status file left behind by a reboot.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuaudit.agent.log import event
from gpuaudit.errors import GpuauditError
from gpuaudit.util import locks

_LOCK_WAIT_S = 0.4  # a lock held for an instant (someone probing it) is retried this long before giving up
_LOCK_RETRY_S = 0.1

_HELD: set[int] = set()  # lock fds of this process: a forked child closes its copies (see below)


def _close_in_child() -> None:
    # The flusher forks short-lived writers; their copies of the lock fd would keep the lock after the agent
    # died (a SIGKILL mid-flush), so a restart would find it held. Closing a copy never unlocks the parent's.
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def host_key(host: str) -> str:
    """`host` as a file-name component, one per host (injective): percent-encoded, so "n 1" (n%201) and "n_1"
    never share a lock or a status file; "%" alone for an empty name (percent-encoding never gives it). A long
    name keeps a legal length and stays unique through its hash."""
    name = quote(host, safe="-_.~") or "%"
    if len(name) > 200:
        name = name[:150] + "-" + hashlib.sha256(host.encode()).hexdigest()[:16]
    return name


def lock_path(root: Path, host: str) -> Path:
    return Path(root) / f".agent-{host_key(host)}.lock"


class AgentLock:
    """The exclusive lock of one (root, host). `acquire` raises GpuauditError when another live agent holds it,
    and returns False (logged) when the directory cannot hold a lock at all (unwritable, no lock support):
    the agent then runs anyway, because sampling must go on while the disk is broken."""

    def __init__(self, root: Path, host: str) -> None:
        self.root, self.host = Path(root), host
        self.path = lock_path(self.root, host)
        self.fd: int | None = None

    def acquire(self) -> bool:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            event("lock_unavailable", logging.WARNING, path=self.path, error=e.strerror or e)
            return False
        try:
            ok = locks.take(fd, wait_s=_LOCK_WAIT_S, poll_s=_LOCK_RETRY_S)
        except OSError as e:  # e.g. ENOLCK: a filesystem without lock support
            os.close(fd)
            event("lock_unavailable", logging.WARNING, path=self.path, error=e.strerror or e)
            return False
        if not ok:
            holder = _read_holder(fd)
            os.close(fd)
            raise GpuauditError(
                f"another agent for host {self.host!r} is already running on {self.root} "
                f"({holder or 'holder unknown'}; lock {self.path}): stop it first, or give this one "
                "another --host or --data")
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self.fd = fd
        _HELD.add(fd)
        return True

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would let two agents lock two different files)."""
        if self.fd is not None:
            _HELD.discard(self.fd)
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


def _read_holder(fd: int) -> str:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return os.pread(fd, 200, 0).decode("utf-8").strip()
    return ""


# --------------------------------------------------------------------------------------------- liveness


def boot_id() -> str | None:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    return None


def _start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # Field 2 (comm) may hold spaces and parentheses: split after its closing one.
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def identity() -> dict[str, Any]:
    """What the status file records about this process."""
    pid = os.getpid()
    return {"pid": pid, "pid_start_ticks": _start_ticks(pid), "boot_id": boot_id(), "node": socket.gethostname()}


def liveness(agent: dict[str, Any]) -> tuple[bool | None, str]:
    """(running?, why) for the agent that wrote the status `agent`: True, False, or None when this machine
    cannot tell (the status was written on another node of a shared directory)."""
    pid, ticks, boot = agent.get("pid"), agent.get("pid_start_ticks"), agent.get("boot_id")
    if agent.get("stopped"):
        return False, f"stopped at {agent['stopped']}"
    if not isinstance(pid, int) or ticks is None or boot is None:
        return None, "the status file does not say (written by an older gpuaudit)"
    if boot == boot_id():
        if _start_ticks(pid) == ticks:
            return True, f"pid {pid}"
        return False, f"pid {pid} is gone"
    if agent.get("node") == socket.gethostname():
        return False, "this machine restarted since"
    return None, f"it ran on node {agent.get('node')!r}: run `gpuaudit agent status` there"
