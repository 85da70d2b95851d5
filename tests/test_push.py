"""`gpuaudit push` against a target that changed behind its back: a wiped directory or emptied bucket is
repopulated (never trusted from the manifest alone), `--delete-after-upload` deletes a local file only once the
target holds it at that moment, state written by a root push stays usable by the data's owner, an overlapping
push is skipped, and temporary files a killed push left on a directory target are cleaned up."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import s3fs
from tests.collection_helpers import Node, assert_same_rows, rows, target_files
from tests.helpers import run_cli, wait_until
from tests.s3_helpers import S3Server

from gpuaudit import push
from gpuaudit.errors import GpuauditError

NOBODY = 65534
HOUR = 3600.0


def _objects(s3: S3Server, url: str) -> list[str]:
    return [k for k in s3.keys(url) if k.endswith(".parquet")]


def _wipe_bucket(s3: S3Server, url: str) -> None:
    fs = s3fs.S3FileSystem(endpoint_url=s3.endpoint, skip_instance_cache=True)
    base = url.removeprefix("s3://")
    fs.rm([f"{base}/{k}" for k in s3.keys(url)])


# --- a target that lost files ---------------------------------------------------------------------------


def test_delete_after_upload_never_deletes_what_a_wiped_target_lost(node: Node, tmp_path: Path) -> None:
    """The reviewer's repro: push, `rm -rf` the target, push --delete-after-upload. It deleted every local file
    while the target held nothing; now the files are sent again first, and only then deleted."""
    central = tmp_path / "central"
    node.flush(0)
    node.flush(1)
    expected = rows(node.root)
    push.push(node.root, central)
    shutil.rmtree(central)
    stats = push.push(node.root, central, delete_after_upload=True)
    assert (stats.sent, stats.resent, stats.deleted_local) == (8, 8, 8)
    assert node.files() == []
    got = rows(central)
    assert all(got[v].equals(expected[v]) for v in expected)


def test_cli_repro_wiped_directory_target(node: Node, tmp_path: Path) -> None:
    central = tmp_path / "central"
    node.flush(0)
    assert run_cli("push", "--data", str(node.root), "--to", str(central)).returncode == 0
    shutil.rmtree(central)
    r = run_cli("push", "--data", str(node.root), "--to", str(central), "--delete-after-upload")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pushed 4 files") and "4 re-sent" in r.stdout, r.stdout
    assert len(target_files(central)) == 4 and node.files() == []


def test_delete_after_upload_never_trusts_a_damaged_copy_of_the_same_size(node: Node, tmp_path: Path) -> None:
    """A target file overwritten with as many zero bytes: the size matched, so --delete-after-upload deleted
    the only good copy. A directory target's copy is compared by content (MD5) before the local file goes; the
    damaged copy is replaced and only then is the local file deleted."""
    central = tmp_path / "central"
    node.flush(0)
    expected = rows(node.root)
    push.push(node.root, central)
    for f in target_files(central):
        path = central / f
        path.write_bytes(b"\0" * path.stat().st_size)
    stats = push.push(node.root, central, delete_after_upload=True)
    assert stats.deleted_local == 4 and node.files() == []
    got = rows(central)
    assert all(got[v].equals(expected[v]) for v in expected)


class _StaleListing(push.DirTarget):
    """A target whose run-time view is stale: it claims to hold every file (the listing was taken before an
    operator removed them). The deletion must still check the target itself."""

    def holds(self, rel: str, size: int, md5: str) -> bool:
        return True

    same = holds


def test_deletion_checks_the_target_at_that_moment(node: Node, tmp_path: Path, caplog) -> None:
    central = tmp_path / "central"
    node.flush(0)
    push.push(node.root, central)
    shutil.rmtree(central / "gpu_samples")
    stats = push.push(node.root, _StaleListing(central), delete_after_upload=True)
    assert stats.deleted_local == 2  # gpu_processes: still there, deleted; gpu_samples: gone, kept
    assert sorted(f.split("/")[0] for f in node.files()) == ["gpu_samples", "gpu_samples"]
    assert "not deleted" in caplog.text
    stats = push.push(node.root, central, delete_after_upload=True)  # an honest listing: re-sent, then deleted
    assert (stats.resent, stats.deleted_local) == (2, 2) and node.files() == []


def test_a_wiped_directory_target_is_repopulated(node: Node, tmp_path: Path) -> None:
    central = tmp_path / "central"
    node.flush(0)
    node.flush(1)
    push.push(node.root, central)
    shutil.rmtree(central)
    again = push.push(node.root, central)
    assert (again.sent, again.resent, again.confirmed) == (8, 8, 0)
    assert_same_rows(central, node.root)
    (central / node.files()[0]).write_bytes(b"truncated")  # a copy of another size counts as lost too
    assert push.push(node.root, central).resent == 1
    assert_same_rows(central, node.root)
    quiet = push.push(node.root, central)
    assert (quiet.sent, quiet.confirmed) == (0, 8)


def test_an_emptied_bucket_is_repopulated_with_one_listing_per_table_and_host(
        node: Node, s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/fleet"
    bucket = url.removeprefix("s3://").split("/")[0]
    node.flush(0)
    node.flush(1)
    push.push(node.root, url)
    requests: list[str] = []

    class Log(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            parts = record.getMessage().split('"')
            if len(parts) > 2 and bucket in parts[1]:
                requests.append(parts[1])

    def objects(method: str) -> int:
        return sum(r.startswith(method) and ".parquet" in r for r in requests)

    handler = Log()
    logging.getLogger("werkzeug").addHandler(handler)
    try:
        quiet = push.push(node.root, url)
        # Checking 8 confirmed files: one listing per (table, host), never a request per file.
        assert (quiet.sent, quiet.confirmed) == (0, 8)
        assert sum("list-type=2" in r for r in requests) == 2 and objects("HEAD") == objects("GET") == 0, requests
        _wipe_bucket(s3, url)
        requests.clear()
        refilled = push.push(node.root, url, delete_after_upload=True)
        assert (refilled.sent, refilled.resent, refilled.deleted_local) == (8, 8, 8)
        assert objects("HEAD") == 8  # each upload read back (size, ETag) right before its local file goes
        node.flush(2)
        push.push(node.root, url)
        requests.clear()
        held = push.push(node.root, url, delete_after_upload=True)
        assert (held.sent, held.confirmed, held.deleted_local) == (0, 4, 4)
        assert objects("HEAD") == 4  # listed as there, and asked again right before each deletion
    finally:
        logging.getLogger("werkzeug").removeHandler(handler)
    assert len(_objects(s3, url)) == 12 and node.files() == []


def test_the_agents_uploader_repopulates_a_wiped_target(node: Node, tmp_path: Path) -> None:
    central = tmp_path / "central"
    node.flush(0)

    class Trigger:
        """Two flushes, then the agent stops; the target is wiped between the two."""

        def __init__(self) -> None:
            self.lines = [b"\n", b"\n", b""]

        def readline(self) -> bytes:
            if len(self.lines) == 2:
                shutil.rmtree(central)
            return self.lines.pop(0)

    events: list[tuple[str, dict[str, object]]] = []
    push.follow(node.root, central, trigger=Trigger(),  # type: ignore[arg-type]
                event=lambda name, level=logging.INFO, **kw: events.append((name, kw)))
    assert [e[1]["sent"] for e in events if e[0] == "upload"] == [4, 4, 0]
    assert_same_rows(central, node.root)


# --- temporary files of a killed push -----------------------------------------------------------------------


def test_stale_temporary_files_of_a_killed_push_are_removed(node: Node, tmp_path: Path) -> None:
    central = tmp_path / "central"
    node.flush(0)
    push.push(node.root, central)
    part = (central / node.files()[0]).parent
    old, young = part / ".x.parquet.0123abcd.tmp", part / ".y.parquet.89abcdef.tmp"
    other = part / ".not-ours.tmp"
    for f in (old, young, other):
        f.write_bytes(b"partial")
    now = time.time()
    os.utime(old, (now - 2 * HOUR, now - 2 * HOUR))
    os.utime(other, (now - 2 * HOUR, now - 2 * HOUR))
    push.push(node.root, push.DirTarget(central, clock=lambda: now))
    assert not old.exists() and young.exists() and other.exists()
    later = now + 2 * HOUR
    push.push(node.root, push.DirTarget(central, clock=lambda: later))
    assert not young.exists() and other.exists()


# --- two pushes at once ---------------------------------------------------------------------------------------


@pytest.fixture
def held_lock(node: Node, tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """Another push to `central` holds the lock of this dataset."""
    central = tmp_path / "central"
    node.flush(0)
    state = push.state_dir(node.root, push.make_target(central))
    state.mkdir(parents=True)
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        yield central, fd
    finally:
        os.close(fd)


def test_an_overlapping_push_is_skipped_with_exit_0(node: Node, held_lock: tuple[Path, int]) -> None:
    central, _ = held_lock
    r = run_cli("push", "--data", str(node.root), "--to", str(central))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("skipped: another `gpuaudit push`") and len(r.stdout.splitlines()) == 1
    assert r.stderr == "" and not central.exists()


def test_a_push_can_wait_a_bounded_time_for_the_lock(node: Node, held_lock: tuple[Path, int]) -> None:
    central, fd = held_lock
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(push.PushBusy):
        push.push(node.root, central, wait_s=5, sleep=sleep, clock=lambda: now[0])
    assert 5 <= now[0] < 6

    def sleep_then_release(s: float) -> None:
        now[0] += s
        fcntl.flock(fd, fcntl.LOCK_UN)  # the other push finishes

    assert push.push(node.root, central, wait_s=5, sleep=sleep_then_release, clock=lambda: now[0]).sent == 4


def test_the_uploaders_last_push_waits_for_an_overlapping_one(node: Node, held_lock: tuple[Path, int]) -> None:
    central, fd = held_lock
    lines = [b"\n", b""]
    events: list[str] = []
    slept: list[float] = []

    class Trigger:
        def readline(self) -> bytes:
            return lines.pop(0)

    def sleep(s: float) -> None:
        slept.append(s)
        fcntl.flock(fd, fcntl.LOCK_UN)

    push.follow(node.root, central, trigger=Trigger(), sleep=sleep,  # type: ignore[arg-type]
                event=lambda name, level=logging.INFO, **kw: events.append(name))
    assert events == ["upload_skipped", "upload"]  # skipped while busy (no failure, no backoff), then shipped
    assert len(target_files(central)) == 4 and slept


# --- a push run as root, then the agent's user ---------------------------------------------------------------


@pytest.fixture
def owned_node(frames: dict[str, pl.DataFrame]) -> Iterator[Node]:
    """A dataset owned by another user (the agent's), somewhere that user can reach."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a push run as root, then as the data's owner")
    top = Path(tempfile.mkdtemp(prefix="gpuaudit-owned-"))
    os.chmod(top, 0o755)
    n = Node(top / "node", frames)
    n.flush(0)
    for p in [top, *top.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)
    try:
        yield n
    finally:
        shutil.rmtree(top)


def _push_as_nobody(node: Node, central: Path) -> tuple[int, str]:
    """(exit status, output) of push.push run as the data's owner in a forked child: the interpreter lives
    under /root here, which another user cannot exec, so no subprocess."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the agent's user, push, report through the pipe
        code, text = 3, ""
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            text, code = push.push(node.root, central).summary(str(central)), 0
        except GpuauditError as e:
            text, code = str(e), 2
        except BaseException as e:  # reported to the parent, which fails the test
            text = f"{type(e).__name__}: {e}"
        finally:
            os.write(write, text.encode())
            os._exit(code)
    os.close(write)
    done = (0, 0)

    def exited() -> bool:
        nonlocal done
        done = os.waitpid(pid, os.WNOHANG)
        return done[0] != 0

    if not wait_until(exited, 120):
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the push as another user hung")
    with os.fdopen(read, "rb") as f:
        out = f.read().decode()
    return os.waitstatus_to_exitcode(done[1]), out


def test_state_written_by_a_root_push_belongs_to_the_datas_owner(owned_node: Node) -> None:
    central = owned_node.root.parent / "central"
    central.mkdir()
    os.chown(central, NOBODY, NOBODY)
    push.push(owned_node.root, central)  # as root (e.g. an operator catching up by hand)
    state = owned_node.root / push.STATE_DIR
    assert {(p.stat().st_uid, p.stat().st_gid) for p in [state, *state.rglob("*")]} == {(NOBODY, NOBODY)}
    owned_node.flush(1)
    for p in owned_node.root.rglob("*"):
        os.chown(p, NOBODY, NOBODY)
    code, out = _push_as_nobody(owned_node, central)  # then the agent's uploader, as the agent's user
    assert code == 0, out
    assert out.startswith("pushed 4 files")


def test_state_another_user_owns_is_one_line_that_says_what_to_do(owned_node: Node) -> None:
    central = owned_node.root.parent / "central"
    state = push.state_dir(owned_node.root, push.make_target(central))
    state.mkdir(parents=True)  # as an older gpuaudit run as root left it: root's, 0755 / 0644
    (state / "lock").write_text("")
    code, out = _push_as_nobody(owned_node, central)
    assert code == 2, out
    assert len(out.strip().splitlines()) == 1
    assert "not writable" in out and f"chown -R nobody:nogroup {owned_node.root / push.STATE_DIR}" in out


def test_the_state_error_without_root(node: Node, tmp_path: Path) -> None:
    """The same message where the state cannot be written for any reason (as a plain user: a read-only state)."""
    if os.geteuid() == 0:
        pytest.skip("root can write anything: covered by the test above")
    central = tmp_path / "central"
    node.flush(0)
    push.push(node.root, central)
    state = push.state_dir(node.root, push.make_target(central))
    for p in state.iterdir():
        p.chmod(0o444)
    node.flush(1)
    with pytest.raises(GpuauditError, match=r"not writable.*chown -R"):
        push.push(node.root, central)


# --- analyze --help -------------------------------------------------------------------------------------------


def test_analyze_help_names_the_spark_extra() -> None:
    r = run_cli("analyze", "--help", env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.replace("│", " ").split())  # rich wraps the help text into the option's box
    assert "pip install 'gpuaudit[spark]'" in flat, r.stdout


def test_spark_refuses_s3_and_says_what_to_do() -> None:
    from gpuaudit.analysis.stage1 import spark

    with pytest.raises(GpuauditError, match=r"s3a://.*default engine.*copy"):
        spark.load_rollups("s3://bucket/fleet")
