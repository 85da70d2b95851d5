"""`gpuaudit push`: ship a node's finished dataset files to a collection target (a shared directory or
s3://bucket/prefix), so that a fleet's data can be read in one place.

Contract:
- Only published files travel: `<table>/host=*/date=*/*.parquet` and the compaction records next to them
  (`.compact-*.json`); never `.staging/`, sidecars or status files. The remote path mirrors the local one.
- Idempotent by file name: a file the target already holds with the same size and checksum (S3 ETag, or the
  file's MD5 on a directory target) is not sent again. What was confirmed is appended to a small manifest
  (`<data>/.push/<target id>/manifest.jsonl`: name, size, mtime, MD5), so a re-run neither reads nor sends
  a file already confirmed, and an interrupted run resumes where it stopped. The manifest is never trusted
  alone: each run lists what the target holds (S3: one recursive listing per table and host, from the node's
  oldest partition on; a directory: each partition pushed), and a confirmed file the target lost (a wiped or
  recreated target, a deleted object, a copy of another size) is sent again. A file that changed locally
  since (same name rewritten: the agent retrying a half-written flush) is sent again and replaces the remote
  copy.
- Atomic on the target: S3 gets one PUT per file (atomic); a directory target gets a temporary dot-file,
  fsync, rename. Every write is read back (size, checksum) before it counts as confirmed.
- Local files are never deleted before their remote copy is confirmed; deleting them afterwards is opt-in
  (`delete_after_upload`), and each deletion first checks the target itself at that moment (a stat: same size;
  an S3 HEAD: same size and ETag; or the read-back of the PUT just made), never this run's listing or the
  manifest.
- Node-side compaction never makes the target count a row twice: within a partition the compaction records
  go first, then the data files. The target's readers hide the files a record supersedes once its merged
  file is there (store.superseded, the rule that already covers a crash mid-compaction), and push then
  deletes those superseded remote files ("pruning"), so the target converges to what the node holds.
- Bounded retries: each remote operation is tried `retries + 1` times with exponential backoff; then the
  run stops with one line saying how far it got (a re-run resumes).
- One push per (data, target) at a time: a lock file in the state directory. A second one is skipped
  (PushBusy: `gpuaudit push` says so and exits 0, as cron and the agent's uploader may overlap), or waits a
  bounded time for it (`wait_s`: the uploader's last push when the agent stops).
- The state directory belongs to the dataset's owner: a push run as root gives what it creates there to the
  owner of the data directory, so that the agent's uploader (its user) can go on using it.
- A directory target's temporary files that a killed push left (`.<name>.<8 hex>.tmp`) are removed from the
  partitions a later push lists, once older than an hour (a younger one may be another push's, mid-write).
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import logging
import os
import pwd
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, cast

from gpuaudit import schema, store
from gpuaudit.errors import GpuauditError
from gpuaudit.store import readers, remote
from gpuaudit.util import atomic, jsonio, locks, paths

log = logging.getLogger("gpuaudit.push")

STATE_DIR = ".push"
RETRIES = 3
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
FOLLOW_BACKOFF_MAX_S = 300.0
LOCK_POLL_S = 0.5
FINAL_LOCK_WAIT_S = 15.0  # the uploader's last push waits this long for an overlapping one (the agent waits 20 s)
STALE_TMP_S = 3600.0  # a directory target's temporary file this old is a killed push's, never one mid-write
_TMP_RE = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp$")  # DirTarget.put's temporary names


@dataclass
class PushStats:
    sent: int = 0            # files written to the target
    sent_bytes: int = 0
    confirmed: int = 0       # confirmed by an earlier run (manifest) and still listed on the target: not sent
    found: int = 0           # already on the target, identical (e.g. the manifest was lost): recorded, not sent
    resent: int = 0          # of `sent`: confirmed earlier, but the target no longer held them (wiped, deleted)
    pruned: int = 0          # superseded remote files removed after their merged file was confirmed
    deleted_local: int = 0   # local files removed after confirmation (delete_after_upload)

    def summary(self, url: str) -> str:
        parts = [f"pushed {self.sent} file(s), {self.sent_bytes:,} bytes, to {url}",
                 f"{self.confirmed + self.found} already there"]
        if self.resent:
            parts.append(f"{self.resent} re-sent: the target no longer held them")
        if self.pruned:
            parts.append(f"{self.pruned} superseded remote file(s) removed")
        if self.deleted_local:
            parts.append(f"{self.deleted_local} local file(s) deleted after upload")
        return "; ".join(parts)


class _Mismatch(Exception):
    """The target does not hold what was just written (retried)."""


class PushBusy(GpuauditError):
    """Another push of the same dataset to the same target holds the lock."""


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
        self._owner = _owner(self.root)

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
                    if _TMP_RE.match(entry.name) and now - st.st_mtime > STALE_TMP_S:
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
                _give(d, self._owner)
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_atomic(final, data, before_replace=lambda tmp: _give(tmp, self._owner))
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


# --------------------------------------------------------------------------------------------- manifest


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
            _give(self.path, self.owner)
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
            atomic.write_atomic(self.path, text, before_replace=lambda tmp: _give(tmp, self.owner))
            self.lines = len(self.entries)


def state_dir(root: Path, target: Target) -> Path:
    key = target.url if paths.as_url(target.url) else str(Path(target.url).resolve())
    return root / STATE_DIR / hashlib.sha1(key.encode()).hexdigest()[:12]


def _owner(root: Path) -> tuple[int, int] | None:
    """(uid, gid) to give the state files to: the data directory's owner, when this push runs as root and
    the data is another user's (the agent's). Else None: files are created as this user's, as usual."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    st = root.stat()
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else None


def _give(path: Path, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        os.chown(path, *owner)


@contextlib.contextmanager
def _locked(state: Path, url: str, owner: tuple[int, int] | None, wait_s: float,
            sleep: Callable[[float], None], clock: Callable[[], float]) -> Iterator[None]:
    made = [d for d in (state.parent, state) if not d.exists()]
    state.mkdir(parents=True, exist_ok=True)
    for d in made:
        _give(d, owner)
    (state / "target").write_text(url + "\n", encoding="utf-8")  # which target this folder is about
    _give(state / "target", owner)
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        _give(state / "lock", owner)
        if not locks.take(fd, wait_s=wait_s, poll_s=LOCK_POLL_S, sleep=sleep, clock=clock):
            raise PushBusy(f"another `gpuaudit push` to {url} from this dataset is running; it ships "
                           "these files (a file it missed goes with the next push)")
        yield
    finally:
        os.close(fd)


def _state_error(root: Path, state: Path, e: OSError) -> GpuauditError:
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


# ------------------------------------------------------------------------------------------------- push


@dataclass
class _Run:
    root: Path
    target: Target
    manifest: Manifest
    retries: int
    sleep: Callable[[float], None]
    delete_after_upload: bool
    stats: PushStats = field(default_factory=PushStats)
    live: set[str] = field(default_factory=set)

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        for i in range(self.retries + 1):
            try:
                return fn(*args)
            except (GpuauditError, PermissionError, FileNotFoundError, FileExistsError, NotADirectoryError,
                    IsADirectoryError):
                raise  # retrying cannot fix a missing bucket, a denied permission or a file in the way
            except Exception as e:
                if i == self.retries:
                    raise GpuauditError(
                        f"push to {self.target.url} stopped at {what} after {self.retries + 1} attempt(s): "
                        f"{remote.describe_error(e)} ({self.stats.sent} file(s) sent; run it again to resume)"
                    ) from e
                delay = min(BACKOFF_MIN_S * 2 ** i, BACKOFF_MAX_S)
                log.warning("push: %s failed (%s), retrying in %g s", what, remote.describe_error(e), delay)
                self.sleep(delay)
        raise AssertionError("unreachable")

    def partition(self, table: str, part_dir: Path) -> None:
        prefix = f"{table}/{part_dir.parent.name}/{part_dir.name}"
        try:
            names = sorted(os.listdir(part_dir))
        except FileNotFoundError:
            return
        record_names = [n for n in names if n.startswith(store.JOURNAL_PREFIX) and n.endswith(".json")]
        data = [n for n in names if n.endswith(".parquet") and not n.startswith(".")]
        hidden = store.hidden_names(part_dir, names)  # files a crash mid-compaction left: not shipped
        done: set[str] = set()
        # Records first: the target hides their inputs from the moment the merged file lands.
        for name in record_names + [n for n in data if n not in hidden]:
            if self.ship(f"{prefix}/{name}", part_dir / name, deletable=name.endswith(".parquet")):
                done.add(name)
        # Records are parsed only while one of them still has superseded files to remove (once each): a
        # compacted day keeps a record listing up to a day of flushes, and the uploader runs every minute.
        if any(n in done and not self.manifest.entries.get(f"{prefix}/{n}", {}).get("p") for n in record_names):
            records = store.acting_records({n: r for n in record_names if (r := _read_record(part_dir / n))}, part_dir)
            self.prune(prefix, records, done)

    def ship(self, rel: str, path: Path, *, deletable: bool) -> bool:
        """Make sure the target holds `path` as `rel`; True once confirmed."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return False  # compacted or deleted since the listing: nothing to ship
        self.live.add(rel)
        known = self.manifest.matches(rel, st.st_size, st.st_mtime_ns)
        if known:
            md5 = str(self.manifest.entries[rel].get("h") or "")
            # The manifest says the target had it; the target's listing says whether it still does (by content
            # when the local copy is about to be deleted).
            check = self.target.same if self.delete_after_upload and deletable else self.target.holds
            if self.attempt(f"checking {rel}", check, rel, st.st_size, md5):
                self.stats.confirmed += 1
                self.maybe_delete(rel, path, st.st_size, st.st_mtime_ns, md5, deletable)
                return True
            # One line per file would flood a wiped target's log: the summary counts them (`resent`).
            log.debug("push: %s was confirmed before but %s no longer holds it: sending it again", rel,
                      self.target.url)
        try:
            with path.open("rb") as f:
                st = os.fstat(f.fileno())  # what is read is this version, even if the name is replaced meanwhile
                data = f.read()
        except FileNotFoundError:
            return False
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        checked_now = False  # a PUT's read-back is a look at the target this moment: no second one to delete
        if self.attempt(f"checking {rel}", self.target.same, rel, len(data), md5):
            self.stats.found += 1
        else:
            checked_now = True
            self.attempt(f"sending {rel}", self.target.put, rel, data, md5)
            self.stats.sent += 1
            self.stats.sent_bytes += len(data)
            self.stats.resent += int(known)
        self.manifest.record(rel, s=st.st_size, m=st.st_mtime_ns, h=md5)
        self.maybe_delete(rel, path, st.st_size, st.st_mtime_ns, md5, deletable, checked_now=checked_now)
        return True

    def maybe_delete(self, rel: str, path: Path, size: int, mtime_ns: int, md5: str, deletable: bool, *,
                     checked_now: bool = False) -> None:
        if not (self.delete_after_upload and deletable):
            return
        try:
            st = path.stat()
        except FileNotFoundError:
            return
        if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):  # not the version the target confirmed
            return
        # Asked of the target now (a stat, a HEAD), not this run's listing: a copy lost since must not cost the data.
        if not checked_now and not self.attempt(f"confirming {rel}", self.target.confirm, rel, size, md5):
            log.warning("push: %s not deleted: %s does not hold it now (the next push sends it again)", rel,
                        self.target.url)
            return
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            self.stats.deleted_local += 1
            self.live.discard(rel)

    def prune(self, prefix: str, records: dict[str, dict[str, Any]], done: set[str]) -> None:
        """Remove the remote files that confirmed records supersede (once per record)."""
        todo = {n: r for n, r in records.items()
                if n in done and not self.manifest.entries.get(f"{prefix}/{n}", {}).get("p")}
        hidden = store.superseded(done, list(records.values()))
        there = self.attempt(f"listing {prefix}", self.target.names, prefix) if todo else set()
        # A collection directory's open readers may have listed the superseded files: they stay (hidden by the
        # record) until a push finds no reader (store/readers.py). An s3:// target's readers list again.
        with (readers.unread(self.target.root) if isinstance(self.target, DirTarget) and todo
              else contextlib.nullcontext(True)) as free:
            if not free:
                log.info("push: keeping the superseded files of %s while a reader has %s open (hidden; the next "
                         "push removes them)", prefix, self.target.url)
                return
            self._prune(prefix, todo, hidden, there, done)

    def _prune(self, prefix: str, todo: dict[str, dict[str, Any]], hidden: set[str], there: set[str],
               done: set[str]) -> None:
        for name, record in sorted(todo.items()):
            if record["new"] not in done and record["new"] not in hidden:
                continue  # its merged file is not confirmed yet (or never landed): the inputs stay
            for old in sorted(set(record["old"]) & there - {record["new"]}):
                try:
                    if self.attempt(f"removing superseded {prefix}/{old}", self.target.delete, f"{prefix}/{old}"):
                        self.stats.pruned += 1
                except PermissionError as e:  # e.g. a bucket policy without delete: readers hide the file anyway
                    log.warning("push: cannot remove superseded %s/%s (%s); readers hide it", prefix, old,
                                remote.describe_error(e))
            self.manifest.record(f"{prefix}/{name}", p=1)


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        r = jsonio.read_json_file(path)
    except (OSError, ValueError):
        return None
    ok = isinstance(r, dict) and isinstance(r.get("new"), str) and isinstance(r.get("old"), list)
    return r if ok else None


def push(root: Path | str, to: Path | str | Target, *, endpoint_url: str | None = None,
         delete_after_upload: bool = False, retries: int = RETRIES, wait_s: float = 0.0,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> PushStats:
    """Ship the dataset at `root` (local) to `to` (a directory, an s3:// URL, or a Target). See the module doc.
    Raises PushBusy when another push of it to the same target still runs after `wait_s` seconds."""
    root = store.local_root(root)
    if not root.is_dir():
        raise GpuauditError(f"no dataset at {root}")
    if retries < 0:
        raise GpuauditError(f"--retries must be >= 0, got {retries}")
    target: Target = cast(Target, to) if hasattr(to, "put") else make_target(to, endpoint_url=endpoint_url)
    if isinstance(target, DirTarget):
        src, dst = root.resolve(), target.root.resolve()
        if dst == src or src in dst.parents:
            raise GpuauditError(f"cannot push {root} into itself ({target.root})")
    state = state_dir(root, target)
    try:
        owner = _owner(root)
        with _locked(state, target.url, owner, wait_s, sleep, clock):
            run = _Run(root, target, Manifest(state, owner), retries, sleep, delete_after_upload)
            complete = False
            try:
                run.attempt(f"reaching {target.url}", target.prepare)
                for table in schema.TABLES:
                    base = root / table
                    if base.is_dir():
                        for part_dir in sorted(base.glob("host=*/date=*")):
                            run.partition(table, part_dir)
                complete = True
            finally:
                # Entries of files gone locally are dropped only after a full walk (a stopped run saw only part).
                run.manifest.close(run.live if complete else set(run.manifest.entries))
    except OSError as e:  # local state or files, a denied permission on either side: one line, never a traceback
        if isinstance(e, PermissionError) and e.filename and Path(e.filename).is_relative_to(state.parent):
            raise _state_error(root, state, e) from e
        where = e.filename or target.url
        raise GpuauditError(f"push to {target.url} stopped: {where}: {e.strerror or remote.describe_error(e)} "
                            f"(run it again to resume)") from e
    return run.stats


def follow(root: Path | str, to: Path | str, *, endpoint_url: str | None = None, delete_after_upload: bool = False,
           retries: int = RETRIES, trigger: IO[bytes] | None = None,
           event: Callable[..., None] | None = None, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> None:
    """Push each time a line arrives on `trigger` (the agent writes one after each flush), and once more at its
    end of input (the agent stopped, or died: the pipe closed). A failed round is logged and retried at a
    later trigger, backing off (doubling up to 5 minutes); it never stops the loop. A round another push
    (cron) is running for is skipped, not a failure; the last one waits for it a while."""
    import sys

    trigger = trigger or sys.stdin.buffer
    say = event or (lambda name, level=logging.INFO, **kw: log.log(level, "%s %s", name, kw))
    target = make_target(to, endpoint_url=endpoint_url)
    failures, not_before = 0, 0.0
    while True:
        eof = not trigger.readline()
        if not eof and clock() < not_before:
            continue
        try:
            stats = push(root, target, delete_after_upload=delete_after_upload, retries=retries,
                         wait_s=FINAL_LOCK_WAIT_S if eof else 0.0, sleep=sleep, clock=clock)
        except PushBusy as e:
            say("upload_skipped", logging.DEBUG if not eof else logging.WARNING, reason=str(e))
        except GpuauditError as e:
            failures += 1
            delay = min(BACKOFF_MIN_S * 2 ** failures, FOLLOW_BACKOFF_MAX_S)
            not_before = clock() + delay
            say("upload_failed", logging.WARNING, error=str(e), failures=failures, retry_in_s=delay)
        else:
            if failures:
                say("upload_recovered", after_failures=failures)
            failures, not_before = 0, 0.0
            level = logging.INFO if stats.sent or stats.pruned or stats.deleted_local else logging.DEBUG
            say("upload", level, sent=stats.sent, bytes=stats.sent_bytes, resent=stats.resent, pruned=stats.pruned,
                deleted_local=stats.deleted_local, to=target.url)
        if eof:
            return
