"""util.atomic, the one write-fsync-rename: whole file or none, the umask honoured, no temporary left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuaudit.push.targets import _TMP_RE
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


def _fail_second_rename(monkeypatch: pytest.MonkeyPatch, into: Path) -> list[Path]:
    """os.replace, the one rename seam, fails on the second rename of a file into `into` (an I/O error, a quota
    on a network filesystem); the other renames (setting aside under dot-names, the restore) go through.
    Returns the files renamed into `into`, in order."""
    real = os.replace
    landed: list[Path] = []
    calls = 0

    def replace(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        nonlocal calls
        dst = Path(dst)
        if into in dst.parents and not dst.name.startswith("."):
            calls += 1
            if calls == 2:
                raise OSError(5, "Input/output error")
            landed.append(dst)
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return landed


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_publish_all_restores_what_it_replaced_when_a_later_rename_fails(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24.2: several staged files renamed into place; the second rename fails. The first, already
    renamed, is put back as it was (it replaced a file) and the third never lands: nothing partial is left."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old a")
    (out / "c.txt").write_text("old c")
    before = _tree(out)
    staged = [(atomic.stage(out / n, f"new {n}"), out / n) for n in ("a.txt", "b.txt", "c.txt")]
    _fail_second_rename(monkeypatch, out)
    with pytest.raises(OSError, match="Input/output error"):
        atomic.publish_all(staged)
    for tmp, _ in staged:
        tmp.unlink(missing_ok=True)
    assert _tree(out) == before


def test_publish_all_renames_every_file_and_removes_the_stale_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old a")
    (out / "stale.txt").write_text("stale")
    staged = [(atomic.stage(out / n, f"new {n}"), out / n) for n in ("a.txt", "b.txt")]
    atomic.publish_all(staged, remove=[out / "stale.txt", out / "never-there.txt"])
    assert _tree(out) == {"a.txt": b"new a.txt", "b.txt": b"new b.txt"}


def test_a_report_whose_second_rename_fails_leaves_the_earlier_report_whole(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24.2: report/writer.write_files renamed in a loop, so a failure on the second rename left the new
    first file beside the old others while the message said "nothing was written". Now the message is true:
    the earlier report is there byte for byte, the stale file it would have removed included, and no
    temporary is left."""
    from gpuaudit.errors import GpuauditError
    from gpuaudit.report.writer import write_files

    out = tmp_path / "report"
    write_files(out, [(out / "report.html", "<p>old</p>"), (out / "report.md", "# old\n"),
                      (out / "charts" / "a.svg", b"<svg>old</svg>")])
    (out / "report.json").write_text("{}\n")
    before = _tree(out)
    landed = _fail_second_rename(monkeypatch, out)
    with pytest.raises(GpuauditError, match="nothing was written") as e:
        write_files(out, [(out / "report.html", "<p>new</p>"), (out / "report.md", "# new\n"),
                          (out / "charts" / "a.svg", b"<svg>new</svg>")], stale=[out / "report.json"])
    assert "Input/output error" in str(e.value)
    assert landed[0] == out / "report.html"  # renamed into place before the failure (then restored)
    assert _tree(out) == before
