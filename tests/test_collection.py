"""Collecting many nodes in one place: `gpuaudit push` and `agent run --upload` to a shared directory or to a
real S3-compatible server (moto in server mode on 127.0.0.1), reading `--data s3://...`, node-side compaction
between pushes (never a row counted twice), `sql --views` that survive compaction, and the documented commands."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from tests.collection_helpers import CHUNKS, Node, assert_same_rows, rows, target_files
from tests.helpers import REPO, run_cli, wait_until
from tests.s3_helpers import S3Server

from gpuaudit import push, schema, store
from gpuaudit.errors import GpuauditError


def analyze_json(root: Path | str, env: dict[str, str] | None = None) -> dict[str, Any]:
    r = run_cli("analyze", "--json", "--data", str(root), env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("generated_at", "data_root"):
        out.pop(key, None)
    return out


def test_superseded_follows_chains_and_ignores_a_merge_that_never_landed() -> None:
    r1 = {"new": "c1.parquet", "old": ["a.parquet", "b.parquet"]}
    r2 = {"new": "c2.parquet", "old": ["c1.parquet", "d.parquet"]}
    crash = {"new": "never.parquet", "old": ["e.parquet"]}
    # On a collection target: a, b, d were pushed before, c1 never was (compacted again first), c2 is there.
    assert store.superseded({"a.parquet", "b.parquet", "d.parquet", "c2.parquet", "e.parquet"},
                            [r1, r2, crash]) == {"a.parquet", "b.parquet", "c1.parquet", "d.parquet"}
    # c2 not there yet: every input stays visible.
    assert store.superseded({"a.parquet", "b.parquet", "d.parquet"}, [r1, r2]) == set()


# --- a shared directory as the target -------------------------------------------------------------------


def test_push_compact_push_never_counts_a_row_twice(node: Node, tmp_path: Path) -> None:
    """The documented rsync recipe double-counted after a node-side compaction; push + records must not."""
    central = tmp_path / "central"
    node.flush(0)
    node.flush(1)
    push.push(node.root, central)
    assert_same_rows(central, node.root)

    store.compact(node.root)
    stats = push.push(node.root, central)
    assert stats.sent == 2 * 2 * 2  # per table and date: the merged file and its record
    assert stats.pruned == 2 * 2 * 2  # the two flushes it replaced, removed from the target
    assert_same_rows(central, node.root)
    assert target_files(central) == node.files()

    node.flush(2)
    store.compact(node.root)  # merges the first merged file again: a chain of records
    node.flush(3)
    push.push(node.root, central)
    assert_same_rows(central, node.root)
    assert target_files(central) == node.files()
    assert analyze_json(central) == analyze_json(node.root)


def test_readers_hide_superseded_files_until_they_are_pruned(node: Node, tmp_path: Path) -> None:
    """A target whose superseded files were not removed (a crash between upload and prune, or a bucket policy
    without delete) still never shows a row twice: its readers honour the pushed compaction records."""
    central = tmp_path / "central"
    node.flush(0)
    node.flush(1)
    push.push(node.root, central)
    pushed = {rel: (central / rel).read_bytes() for rel in target_files(central)}
    store.compact(node.root)
    push.push(node.root, central)
    for rel, content in pushed.items():  # as if the prune had not happened
        (central / rel).write_bytes(content)
    assert len(target_files(central)) == len(pushed) + len(node.files())
    assert_same_rows(central, node.root)


def test_push_is_idempotent_by_file_name(node: Node, tmp_path: Path) -> None:
    central = tmp_path / "central"
    node.flush(0)
    node.flush(1)
    first = push.push(node.root, central)
    assert first.sent == len(node.files()) == 8
    stamps = {p: p.stat().st_mtime_ns for p in central.rglob("*.parquet")}
    again = push.push(node.root, central)
    assert (again.sent, again.confirmed, again.found) == (0, 8, 0)  # the manifest, checked by listing: nothing read
    shutil.rmtree(node.root / push.STATE_DIR)  # manifest lost: checked on the target, still nothing re-sent
    lost = push.push(node.root, central)
    assert (lost.sent, lost.found) == (0, 8)
    assert {p: p.stat().st_mtime_ns for p in central.rglob("*.parquet")} == stamps
    assert not list(central.rglob("*.tmp")) and not (central / store.STAGING).exists()


def test_a_file_rewritten_under_its_name_replaces_the_remote_copy(node: Node, tmp_path: Path) -> None:
    """The importer (and the agent retrying a half-written flush) rewrites a file under the same name."""
    central = tmp_path / "central"
    df = node.frames[schema.SAMPLES]
    store.write_table(node.root, schema.SAMPLES, df.head(10), name="import-x")
    push.push(node.root, central)
    store.write_table(node.root, schema.SAMPLES, df.head(30), name="import-x")
    assert push.push(node.root, central).sent == 1
    assert_same_rows(central, node.root)


def test_compact_refuses_a_collection_target(node: Node, tmp_path: Path) -> None:
    node.flush(0)
    push.push(node.root, tmp_path / "central")
    r = run_cli("compact", "--data", str(tmp_path / "central"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "collection target" in r.stderr and "compact the data on the nodes" in r.stderr


def test_push_cli_to_a_directory_and_bad_targets(node: Node, tmp_path: Path) -> None:
    node.flush(0)
    r = run_cli("push", "--data", str(node.root), "--to", str(tmp_path / "central"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pushed 4 files")
    for to, message in ((str(node.root), "into itself"), (str(tmp_path / "no" / "such"), "parent directory"),
                        ("gs://bucket/x", "unsupported URL")):
        r = run_cli("push", "--data", str(node.root), "--to", to)
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


# --- a real S3-compatible server ----------------------------------------------------------------------


def test_s3_push_then_every_reading_command_matches_the_local_data(node: Node, s3: S3Server, tmp_path: Path) -> None:
    url = f"s3://{s3.new_bucket()}/fleet"
    for k in range(CHUNKS):
        node.flush(k)
    r = run_cli("push", "--data", str(node.root), "--to", url, env=s3.env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pushed 16 files")
    assert_same_rows(url, node.root)
    assert analyze_json(url, s3.env) == analyze_json(node.root)
    q = "SELECT host, count(*) AS n, sum(energy_j) AS e FROM samples GROUP BY host"
    remote_sql = run_cli("sql", "--data", url, q, "--format", "json", env=s3.env, cwd=tmp_path)
    assert remote_sql.returncode == 0, remote_sql.stderr
    assert remote_sql.stdout == run_cli("sql", "--data", str(node.root), q, "--format", "json").stdout
    rep = run_cli("report", "--data", url, "--format", "json", "--quiet", "--out", str(tmp_path / "rep"),
                  env=s3.env, cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["trial"]["gpus"] == 8
    views = run_cli("sql", "--data", url, "--views", env=s3.env, cwd=tmp_path)
    assert f"read_parquet(['{url}/gpu_samples/host=*/date=*/*.parquet']" in views.stdout
    assert not (tmp_path / "s3:").exists()


def test_s3_compaction_between_pushes_never_counts_a_row_twice(node: Node, s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/fleet"
    node.flush(0)
    node.flush(1)
    push.push(node.root, url)
    store.compact(node.root)
    node.flush(2)
    push.push(node.root, url)
    assert_same_rows(url, node.root)
    keys = s3.keys(url)
    assert [k for k in keys if k.endswith(".parquet")] == node.files()  # superseded objects were removed
    assert sum(k.rsplit("/", 1)[1].startswith(store.JOURNAL_PREFIX) for k in keys) == 4  # records travel


@pytest.fixture
def failing_puts(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """A fault in the fsspec layer: after `ok` object uploads, every further one fails (a network cut)."""
    import s3fs

    real = s3fs.S3FileSystem._pipe_file
    state = {"ok": 3, "calls": 0}

    async def pipe_file(self: Any, path: str, data: bytes, *args: Any, **kwargs: Any) -> Any:
        state["calls"] += 1
        if state["ok"] <= 0:
            raise ConnectionResetError("injected: connection reset by peer")
        state["ok"] -= 1
        return await real(self, path, data, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_pipe_file", pipe_file)
    s3fs.S3FileSystem.clear_instance_cache()  # cached instances bound the real method at creation
    yield state
    s3fs.S3FileSystem.clear_instance_cache()


def test_s3_push_resumes_after_a_failure_and_never_resends_confirmed_files(
        node: Node, s3: S3Server, failing_puts: dict[str, int]) -> None:
    url = f"s3://{s3.new_bucket()}/fleet"
    for k in range(CHUNKS):
        node.flush(k)
    total = len(node.files())
    s3.puts.clear()
    delays: list[float] = []
    with pytest.raises(GpuauditError, match=r"after 3 attempts.*3 files sent; run it again to resume"):
        push.push(node.root, url, retries=2, sleep=delays.append)
    assert delays == [1.0, 2.0]  # bounded retries with exponential backoff
    first = list(s3.puts)
    assert len(first) == 3
    failing_puts["ok"] = 10**6  # the network is back
    stats = push.push(node.root, url, sleep=delays.append)
    assert stats.sent == total - 3 and stats.confirmed == 3
    second = s3.puts[3:]
    assert len(second) == total - 3 and not set(second) & set(first)  # what the server saw: nothing twice
    assert_same_rows(url, node.root)


def test_s3_local_files_are_deleted_only_after_confirmation(
        node: Node, s3: S3Server, failing_puts: dict[str, int]) -> None:
    url = f"s3://{s3.new_bucket()}/fleet"
    node.flush(0)
    node.flush(1)
    expected = rows(node.root)
    before = node.files()
    with pytest.raises(GpuauditError):
        push.push(node.root, url, delete_after_upload=True, retries=0)
    remote_files = [k for k in s3.keys(url) if k.endswith(".parquet")]
    assert len(remote_files) == 3
    assert node.files() == sorted(set(before) - set(remote_files))  # exactly the confirmed ones are gone
    failing_puts["ok"] = 10**6
    stats = push.push(node.root, url, delete_after_upload=True)
    assert stats.deleted_local == len(before) - 3 and node.files() == []
    got = rows(url)
    assert all(got[v].equals(expected[v]) for v in expected)


def test_s3_unreachable_endpoint_is_one_line_and_deletes_nothing(node: Node, s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/fleet"
    node.flush(0)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    r = run_cli("push", "--data", str(node.root), "--to", url, "--endpoint-url", dead, "--retries", "0",
                "--delete-after-upload", env=s3.env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("gpuaudit: error: push to")
    assert len(node.files()) == 4
    r = run_cli("push", "--data", str(node.root), "--to", url, env=s3.env)
    assert r.returncode == 0 and r.stdout.startswith("pushed 4 files"), r.stderr


def test_reading_a_missing_s3_dataset_is_one_line(s3: S3Server, tmp_path: Path) -> None:
    r = run_cli("analyze", "--data", f"s3://{s3.new_bucket()}/nothing", env=s3.env, cwd=tmp_path)
    assert r.returncode == 2 and "no dataset at s3://" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "s3:").exists()


# --- the agent ------------------------------------------------------------------------------------------


def test_agent_upload_ships_every_flush(tmp_path: Path) -> None:
    """Flushes are counted, not timed: the agent runs until the target holds three flushes (two tables each),
    then stops on SIGTERM; its last flush is pushed before it exits."""
    data, central, log = tmp_path / "node", tmp_path / "central", tmp_path / "agent.log"
    with log.open("wb") as err:
        p = subprocess.Popen([sys.executable, "-m", "gpuaudit", "agent", "run", "--simulate", "phantom",
                              "--simulate-gpus", "2", "--interval", "0.2", "--flush-interval", "0.4", "--data",
                              str(data), "--host", "n1", "--upload", str(central)], stderr=err, cwd=REPO)
    try:
        assert wait_until(lambda: len(target_files(central)) >= 6 or p.poll() is not None), log.read_text()
        assert p.poll() is None, log.read_text()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0, log.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err_text = log.read_text()
    assert "event=upload_started" in err_text and "event=upload " in err_text
    assert_same_rows(central, data)  # the agent waited for the push of its last flush before exiting
    assert target_files(central) == target_files(data)  # every flush shipped, each as its own file


def test_agent_upload_to_s3(s3: S3Server, tmp_path: Path) -> None:
    url = f"s3://{s3.new_bucket()}/fleet"
    r = run_cli("agent", "run", "--simulate", "static", "--simulate-gpus", "2", "--once", "--interval", "0.2",
                "--data", str(tmp_path / "node"), "--host", "n1", "--upload", url, env=s3.env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert_same_rows(url, tmp_path / "node")


def test_uploader_never_blocks_the_agent_and_restarts_with_backoff(tmp_path: Path, caplog) -> None:
    from gpuaudit.agent.upload import Uploader

    now = [0.0]
    up = Uploader(tmp_path, str(tmp_path / "central"), clock=lambda: now[0])
    up.argv = [sys.executable, "-c", "import time; time.sleep(60)"]  # an uploader stuck on the network
    for _ in range(100_000):  # far more than a pipe holds (64 KiB): every notify still returns at once
        up.notify()
    stuck = up.proc
    assert stuck is not None and stuck.poll() is None
    up.close(wait_s=0.2)  # the agent's exit waits a bounded time, then leaves it
    assert "event=upload_pending" in caplog.text
    stuck.kill()
    stuck.wait()

    up.argv = [sys.executable, "-c", "raise SystemExit(3)"]  # an uploader that dies
    up.notify()
    first = up.proc
    assert first is not None
    first.wait()
    up.notify()  # notices the exit: restart only after a backoff
    assert "event=upload_exited code=3" in caplog.text and up.proc is None
    up.notify()
    assert up.proc is None
    now[0] += 1.0
    up.notify()
    assert up.proc is not None and up.proc is not first
    up.close()


@pytest.mark.parametrize("args", [
    ["agent", "run", "--once", "--simulate", "static"],
    ["simulate", "--gpus", "8", "--days", "0.1"],
    ["compact"],
    ["push", "--to", "/tmp/nowhere-at-all"],
])
def test_writing_commands_refuse_s3_data_and_create_no_local_s3_folder(tmp_path: Path, args: list[str]) -> None:
    for env in ({}, {"GPUAUDIT_DATA": "s3://bkt/trial"}):
        extra = [] if env else ["--data", "s3://bkt/trial"]
        r = run_cli(*args, *extra, env=env, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("gpuaudit: error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "--upload s3://bkt/trial" in r.stderr
        assert not (tmp_path / "s3:").exists()


def test_local_paths_never_import_the_s3_libraries(node: Node, tmp_path: Path) -> None:
    """The agent (even with --upload s3://...), push to a directory and local reads stay free of s3fs/botocore:
    ~50 MB the long-lived agent does not carry."""
    node.flush(0)
    probe = f"""
import sys
from pathlib import Path
from gpuaudit import push, store
from gpuaudit.agent.runner import AgentConfig
import gpuaudit.cli
AgentConfig(root=Path({str(tmp_path / "a")!r}), host="h", upload="s3://bucket/x").validate()
push.push({str(node.root)!r}, {str(tmp_path / "central")!r})
store.open_dataset({str(node.root)!r}).fetchall("SELECT count(*) FROM samples")
heavy = sorted(m for m in ("s3fs", "fsspec", "botocore", "aiobotocore") if m in sys.modules)
assert not heavy, heavy
"""
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --- gpuaudit sql --views ----------------------------------------------------------------------------------


def test_sql_views_are_globs_that_survive_compaction_and_new_files(node: Node) -> None:
    node.flush(0)
    node.flush(1)
    r = run_cli("sql", "--data", str(node.root), "--views")
    assert r.returncode == 0, r.stderr
    assert "*.parquet" in r.stdout and "agent-flush" not in r.stdout

    def counts() -> tuple[int, int]:
        con = duckdb.connect()
        for statement in filter(str.strip, r.stdout.split(";\n")):
            con.execute(statement)
        return con.execute("SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM processes)").fetchone()

    n = counts()
    assert n == tuple(rows(node.root)[v].height for v in ("samples", "processes"))
    store.compact(node.root)
    assert counts() == n
    node.flush(2)
    assert counts() == tuple(rows(node.root)[v].height for v in ("samples", "processes")) != n


# --- the documented commands ------------------------------------------------------------------------------


def _doc_blocks(path: Path) -> list[str]:
    """The ```sh blocks that follow a `<!-- tested -->` marker in a doc page."""
    return re.findall(r"<!-- tested[^>]*-->\s*```sh\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_documented_collection_commands_run(s3: S3Server, tmp_path: Path) -> None:
    blocks = _doc_blocks(REPO / "docs" / "collection.md")
    assert len(blocks) >= 2
    s3.new_bucket()  # moto needs no particular name; the docs use audit-bucket
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3.endpoint, skip_instance_cache=True)
    if not fs.exists("audit-bucket"):
        fs.mkdir("audit-bucket")
    env = {**os.environ, **s3.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("GPUAUDIT_DATA", None)
    for block in blocks:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"{block}\n{r.stdout}\n{r.stderr}"
    assert not (tmp_path / "s3:").exists()
    # What the walkthrough collected, in the directory and in the bucket: each node's rows, exactly once.
    nodes = {v: pl.concat([rows(tmp_path / n)[v] for n in ("node-a", "node-b")]).sort(pl.all())
             for v in schema.VIEW_NAMES.values()}
    for collected in (tmp_path / "central", "s3://audit-bucket/fleet"):
        got = rows(collected)
        assert all(got[v].equals(nodes[v]) for v in nodes) and nodes["samples"].height > 0
    assert "read_parquet(['s3://audit-bucket/fleet/gpu_samples/" in (tmp_path / "views.sql").read_text()
