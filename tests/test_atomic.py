"""util.atomic, the one write-fsync-rename: whole file or none, the umask honoured, no temporary left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuaudit.push.run import _TMP_RE
from gpuaudit.util import atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_atomic_replaces_whole_and_honours_the_umask(tmp_path: Path) -> None:
    final = tmp_path / "out.bin"
    final.write_bytes(b"old")
    old = os.umask(0o027)
    try:
        atomic.write_atomic(final, b"new contents")
        atomic.write_atomic(tmp_path / "text.txt", "h\u00e9")
    finally:
        os.umask(old)
    assert final.read_bytes() == b"new contents"
    assert (tmp_path / "text.txt").read_bytes() == "h\u00e9".encode()
    assert _mode(final) == 0o640 and _mode(tmp_path / "text.txt") == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin", "text.txt"]


def test_a_failing_writer_keeps_the_previous_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    final = tmp_path / "out.bin"
    final.write_bytes(b"previous")

    def half(f: object) -> None:
        f.write(b"half")  # type: ignore[attr-defined]
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic.write_atomic(final, half)
    assert final.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_staged_names_are_the_ones_push_cleans_up(tmp_path: Path) -> None:
    """push removes a killed writer's leftovers by this pattern: the staging name must keep matching it."""
    tmp = atomic.stage(tmp_path / "part-1.parquet", b"x", mode=0o600)
    assert _TMP_RE.match(tmp.name) and tmp.parent == tmp_path and _mode(tmp) == 0o600
    atomic.replace(tmp, tmp_path / "part-1.parquet")
    assert not tmp.exists() and (tmp_path / "part-1.parquet").read_bytes() == b"x"


def test_write_synced_never_writes_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(FileExistsError):
        atomic.write_synced(tmp_path / "link", b"evil")
    assert victim.read_text() == "keep"


def test_report_files_are_staged_whole_and_honour_the_umask(tmp_path: Path) -> None:
    from gpuaudit.report.writer import write_files

    old = os.umask(0o022)
    try:
        write_files(tmp_path, [(tmp_path / "report.md", "# r\n"), (tmp_path / "charts" / "a.svg", b"<svg/>")])
    finally:
        os.umask(old)
    assert _mode(tmp_path / "report.md") == 0o644 and _mode(tmp_path / "charts" / "a.svg") == 0o644
    assert (tmp_path / "report.md").read_text() == "# r\n"
    assert not [p for p in tmp_path.rglob("*.tmp")]
