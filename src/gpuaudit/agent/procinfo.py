"""Who a GPU process belongs to: user, Slurm job, Kubernetes pod / container, command.

Everything comes from /proc/<pid>/{cgroup,status,cmdline}. A field that cannot be read (process gone,
no permission, unknown layout) is None, never an error. The cgroup parsers are pure functions over the
file's text, tested on real path samples of cgroup v1 and v2 layouts (Slurm, kubelet with the systemd
and cgroupfs drivers, docker, containerd, CRI-O).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gpuaudit import schema

COMMAND_MAX = schema.TEXT_MAX_CHARS[schema.PROCESSES]["command"]  # the contract's bound

# Slurm: v1 ".../slurm/uid_1000/job_123/step_0/task_0", v2 ".../slurmstepd.scope/job_123/step_0/...",
# several slurmd per node: "/slurm_node01/uid_.../job_..."
_SLURM_JOB = re.compile(r"/(?:slurm[^/]*|slurmstepd\.scope)/(?:uid_\d+/)?job_(\d+)(?:/|$)")
# kubelet, systemd driver: kubepods-burstable-pod<uid with _>.slice; cgroupfs driver: /pod<uid>/
_K8S_POD_SYSTEMD = re.compile(r"kubepods(?:-[a-z]+)?-pod([0-9a-f_]{36})\.slice")
_K8S_POD_CGROUPFS = re.compile(r"/kubepods(?:/[a-z]+)?/pod([0-9a-f-]{36})(?:/|$)")
# container id: systemd scopes (docker-, cri-containerd-, crio-, libpod-) or a bare 64-hex component
_CONTAINER_SCOPE = re.compile(r"(?:docker|cri-containerd|crio|libpod|containerd)-([0-9a-f]{64})\.scope")
_CONTAINER_BARE = re.compile(r"/([0-9a-f]{64})(?:/|$)")
_CONTAINER_COLON = re.compile(r":(?:cri-containerd|docker|crio):([0-9a-f]{64})$")


@dataclass
class CgroupInfo:
    job_id: str | None = None
    pod_uid: str | None = None
    container: str | None = None


def _cgroup_paths(text: str) -> list[str]:
    """The cgroup paths of a /proc/<pid>/cgroup file (v1 `id:controllers:path`, v2 `0::path`),
    the v2 line first: it is the authoritative one on a hybrid host."""
    v2: list[str] = []
    v1: list[str] = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        (v2 if hid == "0" and controllers == "" else v1).append(path)
    return v2 + v1


def parse_cgroup(text: str) -> CgroupInfo:
    """Slurm job id, Kubernetes pod UID and container id from the contents of /proc/<pid>/cgroup."""
    info = CgroupInfo()
    for path in _cgroup_paths(text):
        if info.job_id is None and (m := _SLURM_JOB.search(path)):
            info.job_id = m.group(1)
        if info.pod_uid is None:
            if m := _K8S_POD_SYSTEMD.search(path):
                info.pod_uid = m.group(1).replace("_", "-")
            elif m := _K8S_POD_CGROUPFS.search(path):
                info.pod_uid = m.group(1)
        if info.container is None:
            m = _CONTAINER_SCOPE.search(path) or _CONTAINER_COLON.search(path) or _CONTAINER_BARE.search(path)
            if m:
                info.container = m.group(1)[:12]  # the short id `docker ps` / `crictl ps` show
    return info


def parse_status_uid(text: str) -> int | None:
    """Real uid from /proc/<pid>/status."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            parts = line.split()
            return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return None


def parse_cmdline(raw: bytes) -> str | None:
    """NUL-separated argv as one line, truncated to COMMAND_MAX characters; None for kernel threads."""
    args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    if not args:
        return None
    return " ".join(args)[:COMMAND_MAX]


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # uid from another namespace / no passwd entry: the number is still useful
        return str(uid)


@dataclass
class _ProcInfo:
    user: str | None = None
    job_id: str | None = None
    k8s_namespace: str | None = None
    k8s_pod: str | None = None
    pod_uid: str | None = None
    container: str | None = None
    command: str | None = None

    def as_row(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class PodNames:
    """Pod UID -> (namespace, name) from the kubelet's log directory /var/log/pods/<ns>_<name>_<uid>
    (mounted read-only into the DaemonSet); without it the pod is known by its UID only."""

    def __init__(self, root: Path = Path("/var/log/pods")) -> None:
        self.root = root
        self._cache: dict[str, tuple[str, str]] = {}

    def lookup(self, uid: str) -> tuple[str | None, str | None]:
        if uid not in self._cache:
            self._refresh()
        ns_name = self._cache.get(uid)
        return ns_name if ns_name else (None, None)

    def _refresh(self) -> None:
        try:
            entries = os.listdir(self.root)
        except OSError:
            return
        self._cache.clear()  # bounded by the pods on this node
        for entry in entries:
            parts = entry.split("_")
            if len(parts) == 3:
                self._cache[parts[2]] = (parts[0], parts[1])


class ProcAttributor:
    """The real attribution of a pid: /proc readers plus a per-pid cache pruned every interval."""

    def __init__(self, proc_root: Path = Path("/proc"), pods: PodNames | None = None) -> None:
        self.proc_root = proc_root
        self.pods = pods or PodNames()
        self._cache: dict[int, _ProcInfo] = {}

    def __call__(self, pid: int) -> dict[str, Any]:
        info = self._cache.get(pid)
        if info is None:
            info = self.read(pid)
            if len(self._cache) > 4096:  # runaway pid churn: stay bounded
                self._cache.clear()
            self._cache[pid] = info
        return info.as_row()

    def prune(self, live: set[int]) -> None:
        """Forget pids no longer on any GPU (a reused pid is then read afresh)."""
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]

    def _read_text(self, pid: int, name: str) -> str | None:
        try:
            return (self.proc_root / str(pid) / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def read(self, pid: int) -> _ProcInfo:
        info = _ProcInfo()
        status = self._read_text(pid, "status")
        if status is not None and (uid := parse_status_uid(status)) is not None:
            info.user = _user_name(uid)
        with contextlib.suppress(OSError):
            info.command = parse_cmdline((self.proc_root / str(pid) / "cmdline").read_bytes())
        cgroup = self._read_text(pid, "cgroup")
        if cgroup is not None:
            cg = parse_cgroup(cgroup)
            info.job_id, info.container = cg.job_id, cg.container
            if cg.pod_uid:
                ns, name = self.pods.lookup(cg.pod_uid)
                info.k8s_namespace, info.k8s_pod, info.pod_uid = ns, name or cg.pod_uid, cg.pod_uid
        return info


Attributor = Callable[[int], dict[str, Any]]
