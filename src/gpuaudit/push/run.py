"""`gpuaudit push`: ship a node's finished dataset files to a collection target (targets.py), remembering what
the target confirmed (manifest.py). The contract is the package's (push/__init__.py)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from gpuaudit import schema, store
from gpuaudit.errors import GpuauditError
from gpuaudit.push.manifest import Manifest, PushBusy, locked, owner_of, state_dir, state_error
from gpuaudit.push.targets import DirTarget, Target, make_target
from gpuaudit.store import readers, remote
from gpuaudit.util import fmt, jsonio

log = logging.getLogger("gpuaudit.push")

_RETRIES = 3
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
_FOLLOW_BACKOFF_MAX_S = 300.0
_FINAL_LOCK_WAIT_S = 15.0  # the uploader's last push waits this long for an overlapping one (the agent waits 20 s)


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
        parts = [f"pushed {fmt.count(self.sent, 'file')}, {self.sent_bytes:,} bytes, to {url}",
                 f"{self.confirmed + self.found} already there"]
        if self.resent:
            parts.append(f"{self.resent} re-sent: the target no longer held them")
        if self.pruned:
            parts.append(f"{fmt.count(self.pruned, 'superseded remote file')} removed")
        if self.deleted_local:
            parts.append(f"{fmt.count(self.deleted_local, 'local file')} deleted after upload")
        return "; ".join(parts)


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
                        f"push to {self.target.url} stopped at {what} after "
                        f"{fmt.count(self.retries + 1, 'attempt')}: {remote.describe_error(e)} "
                        f"({fmt.count(self.stats.sent, 'file')} sent; run it again to resume)"
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
         delete_after_upload: bool = False, retries: int = _RETRIES, wait_s: float = 0.0,
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
        owner = owner_of(root)
        with locked(state, target.url, owner, wait_s, sleep, clock):
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
            raise state_error(root, state, e) from e
        where = e.filename or target.url
        raise GpuauditError(f"push to {target.url} stopped: {where}: {e.strerror or remote.describe_error(e)} "
                            f"(run it again to resume)") from e
    return run.stats


def follow(root: Path | str, to: Path | str, *, endpoint_url: str | None = None, delete_after_upload: bool = False,
           retries: int = _RETRIES, trigger: IO[bytes] | None = None,
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
                         wait_s=_FINAL_LOCK_WAIT_S if eof else 0.0, sleep=sleep, clock=clock)
        except PushBusy as e:
            say("upload_skipped", logging.DEBUG if not eof else logging.WARNING, reason=str(e))
        except GpuauditError as e:
            failures += 1
            delay = min(BACKOFF_MIN_S * 2 ** failures, _FOLLOW_BACKOFF_MAX_S)
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

