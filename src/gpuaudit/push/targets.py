"""Where `gpuaudit push` writes: a directory (a shared filesystem) or s3://bucket/prefix, behind one `Target`
protocol. Each write is atomic on the target (S3: one PUT; a directory: temporary dot-file, fsync, rename) and
read back (size, checksum) before it counts. A directory target's temporary files that a killed push left
(`.<name>.<8 hex>.tmp`) are removed from the partitions a later push lists, once older than an hour (a
younger one may be another push's, mid-write)."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gpuaudit import store
from gpuaudit.errors import GpuauditError
from gpuaudit.push.manifest import give, owner_of
from gpuaudit.store import readers, remote
from gpuaudit.util import atomic, paths

_STALE_TMP_S = 3600.0  # a directory target's temporary file this old is a killed push's, never one mid-write
_TMP_RE = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp$")  # DirTarget.put's temporary names


class _Mismatch(Exception):
    """The target does not hold what was just written (retried)."""


class Target(Protocol):
    """Where push writes. `holds`, `same` and `names` answer from what the target listed during this run
    (listed again after each `prepare`); `confirm` asks the target itself, now."""

    url: str

    def prepare(self) -> None: ...
    def holds(self, rel: str, size: int, md5: str) -> bool: ...
    def same(self, rel: str, size: int, md5: str) -> bool: ...
    def put(self, rel: str, data: bytes, md5: str) -> None: ...
    def names(self, prefix: str) -> set[str]: ...
    def confirm(self, rel: str, size: int, md5: str) -> bool: ...
    def delete(self, rel: str) -> bool: ...


class DirTarget:
    """A directory (a shared filesystem): temporary dot-file, fsync, rename, fsync of the directory. Each partition
    is listed (names and sizes) once per run, when a file of it is checked; `clock` (wall time) dates the
    temporary files a killed push left there."""

    def __init__(self, root: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.root = paths.expand_user(root, "--to")
        self.url = str(self.root)
        self.clock = clock
        self._listed: dict[str, dict[str, int]] = {}  # partition -> name -> size
        self._owner: tuple[int, int] | None = None

    def prepare(self) -> None:
        self._listed.clear()  # the target may have changed since the last run (wiped, recreated, pruned)
        try:
            self.root.mkdir(exist_ok=True)  # not its parents: a missing mount point must not become a directory
        except FileNotFoundError:
            raise GpuauditError(f"cannot push to {self.root}: its parent directory does not exist") from None
        readers.prepare(self.root)  # a reader of the target that opens from now on holds off the prune
        mark = self.root / store.PUSH_TARGET
        if not mark.exists():
            mark.write_text("gpuaudit push collects node datasets here; compact them on the nodes, not here\n")
        # Run as root: what it creates belongs to the target directory's owner, so the agents' pushes (their
        # user) can still write into the partitions it made.
        self._owner = owner_of(self.root)

    def _partition(self, prefix: str) -> dict[str, int]:
        if prefix not in self._listed:
            found: dict[str, int] = {}
            now = self.clock()
            try:
                entries = list(os.scandir(self.root / prefix))
            except (FileNotFoundError, NotADirectoryError):
                entries = []
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                    if _TMP_RE.match(entry.name) and now - st.st_mtime > _STALE_TMP_S:
                        os.unlink(entry.path)  # a killed push's: nothing else ever reads or renames it
                        continue
                except FileNotFoundError:
                    continue
                found[entry.name] = st.st_size
            self._listed[prefix] = found
        return self._listed[prefix]

    def holds(self, rel: str, size: int, md5: str) -> bool:
        prefix, _, name = rel.rpartition("/")
        return self._partition(prefix).get(name) == size

    def same(self, rel: str, size: int, md5: str) -> bool:
        if not self.holds(rel, size, md5):
            return False
        try:
            return _md5_file(self.root / rel) == md5
        except FileNotFoundError:
            return False

    def confirm(self, rel: str, size: int, md5: str) -> bool:
        # Before a local file is deleted: the content, not the size (a copy zeroed or damaged in place keeps its
        # size). Reading it back costs one read of a file about to be deleted here.
        try:
            return (self.root / rel).stat().st_size == size and _md5_file(self.root / rel) == md5
        except FileNotFoundError:
            return False

    def put(self, rel: str, data: bytes, md5: str) -> None:
        final = self.root / rel
        if self._owner is not None:
            made = [d for d in (final.parent, *final.parent.parents) if d.is_relative_to(self.root)
                    and not d.exists()]
            final.parent.mkdir(parents=True, exist_ok=True)
            for d in made:
                give(d, self._owner)
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_atomic(final, data, before_replace=lambda tmp: give(tmp, self._owner))
        prefix = rel.rpartition("/")[0]
        self._partition(prefix)[final.name] = final.stat().st_size
        if not self.same(rel, len(data), md5):
            raise _Mismatch(f"{final} does not read back as written")

    def names(self, prefix: str) -> set[str]:
        return set(self._partition(prefix))

    def delete(self, rel: str) -> bool:
        prefix, _, name = rel.rpartition("/")
        self._partition(prefix).pop(name, None)
        try:
            (self.root / rel).unlink()
            return True
        except FileNotFoundError:
            return False


class S3Target:
    """s3://bucket/prefix through s3fs. The objects of a table's host are listed once per run, in one recursive
    listing (a request per 1000 objects) that starts at the first partition checked: push walks a host's
    partitions oldest first, so the listing skips what the node no longer holds (deleted after upload)."""

    def __init__(self, url: str, endpoint_url: str | None = None) -> None:
        self.url = url
        self.fs = remote.filesystem(url, endpoint_url=endpoint_url)
        self.base = paths.split(url)[1]
        bucket, _, key_root = self.base.partition("/")
        self._bucket, self._keys = bucket, f"{key_root}/" if key_root else ""
        self._listed: dict[str, dict[str, tuple[int, str]]] = {}  # partition -> rel -> (size, etag)
        self._since: dict[str, str] = {}  # <table>/host=<h> -> the first partition its listing covers

    def prepare(self) -> None:
        self._listed.clear()  # other writers (a central prune, an operator) may have changed the target
        self._since.clear()
        bucket = self.base.split("/", 1)[0]
        try:
            self.fs.info(bucket)  # unlike exists(), an unreachable endpoint raises here (and is retried)
        except FileNotFoundError:
            raise GpuauditError(f"cannot push to {self.url}: bucket {bucket!r} does not exist (or is not visible "
                                "with these credentials)") from None

    def _scope(self, rel: str) -> dict[str, tuple[int, str]]:
        """The objects of `rel`'s partition, <table>/host=<h>/date=<d> (listed with its host on first use)."""
        parts = rel.split("/")
        host, partition = "/".join(parts[:2]), "/".join(parts[:3])
        since = self._since.get(host)
        if since is None or partition < since:
            self._list_host(host, partition)
        return self._listed.setdefault(partition, {})

    def _list_host(self, host: str, since: str) -> None:
        """List <table>/host=<h>/ from partition `since` on (S3 lists keys in order: StartAfter skips the
        older ones without reading them)."""
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": f"{self._keys}{host}/",
                                  "StartAfter": f"{self._keys}{since}", **self.fs.req_kw}
        found: dict[str, dict[str, tuple[int, str]]] = {}
        while True:
            try:
                page = self.fs.call_s3("list_objects_v2", **kwargs)
            except FileNotFoundError:
                break
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(self._keys):]
                found.setdefault(rel.rpartition("/")[0], {})[rel] = (int(obj.get("Size") or 0),
                                                                     str(obj.get("ETag") or ""))
            if not page.get("IsTruncated") or not page.get("NextContinuationToken"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        for partition in [p for p in self._listed if p.startswith(f"{host}/") and p >= since]:
            del self._listed[partition]
        self._listed.update(found)
        self._since[host] = since

    def _remote(self, rel: str) -> tuple[int, str] | None:
        return self._scope(rel).get(rel)

    @staticmethod
    def _etag_matches(etag: str, md5: str) -> bool:
        etag = etag.strip('"')
        # A multipart upload's ETag is not the MD5 of the object ("<md5 of md5s>-<parts>"): size only then.
        return "-" in etag or not etag or etag == md5

    def same(self, rel: str, size: int, md5: str) -> bool:
        got = self._remote(rel)
        return got is not None and got[0] == size and self._etag_matches(got[1], md5)

    holds = same  # the listing carries the ETag: as cheap as the size alone

    def confirm(self, rel: str, size: int, md5: str) -> bool:
        try:
            info = self.fs.info(f"{self.base}/{rel}")  # a HEAD now, not this run's listing
        except FileNotFoundError:
            return False
        return int(info.get("size") or 0) == size and self._etag_matches(str(info.get("ETag") or ""), md5)

    def put(self, rel: str, data: bytes, md5: str) -> None:
        key = f"{self.base}/{rel}"
        self.fs.pipe_file(key, data)  # one PUT below 100 MB: the object appears whole or not at all
        info = self.fs.info(key)
        got = (int(info.get("size") or 0), str(info.get("ETag") or ""))
        self._scope(rel)[rel] = got
        if got[0] != len(data) or not self._etag_matches(got[1], md5):
            raise _Mismatch(f"s3://{key} reads back as {got[0]} bytes, ETag {got[1]}; expected {len(data)}, {md5}")

    def names(self, prefix: str) -> set[str]:
        return {rel.rsplit("/", 1)[1] for rel in self._scope(f"{prefix}/")}

    def delete(self, rel: str) -> bool:
        if self._remote(rel) is None:
            return False
        self.fs.rm_file(f"{self.base}/{rel}")
        self._scope(rel).pop(rel, None)
        return True


def _md5_file(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_target(to: Path | str, *, endpoint_url: str | None = None) -> Target:
    where = paths.collection_target(to, "--to")
    return S3Target(where, endpoint_url) if paths.as_url(where) else DirTarget(Path(where))
