"""`gpuaudit push`: ship a node's finished dataset files to a collection target (a shared directory or
s3://bucket/prefix), so that a fleet's data can be read in one place (docs/collection.md). Modules: targets.py
(the directory and S3 targets), manifest.py (the state per dataset and target: manifest, lock, ownership),
run.py (one push, and `--follow`).

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

from gpuaudit.push.manifest import STATE_DIR, PushBusy, state_dir
from gpuaudit.push.run import PushStats, follow, push
from gpuaudit.push.targets import DirTarget, S3Target, Target, make_target

__all__ = ["STATE_DIR", "DirTarget", "PushBusy", "PushStats", "S3Target", "Target", "follow", "make_target", "push",
           "state_dir"]
