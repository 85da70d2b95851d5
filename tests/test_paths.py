"""util.paths, the one owner of what a typed location means: s3 URL, local path, `~user`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.helpers import REPO

from gpuaudit.errors import GpuauditError
from gpuaudit.util import paths

NOUSER = "~no_such_user_gpuaudit_paths"


@pytest.mark.parametrize(("given", "url"), [
    ("s3://bucket/prefix/", "s3://bucket/prefix"), (Path("s3://bucket/p"), "s3://bucket/p"),
    ("S3://Bucket", "s3://Bucket"), ("/local/dir", None), ("relative", None), ("C:/windows", None), (None, None),
])
def test_as_url_normalizes_s3_and_leaves_local_paths(given: str | Path | None, url: str | None) -> None:
    assert paths.as_url(given) == url


@pytest.mark.parametrize(("given", "message"), [
    ("gs://bucket/x", "unsupported URL"), ("s3://", "needs a bucket"), ("s3://b/x\ny", "give s3://bucket"),
])
def test_as_url_refuses_what_is_no_dataset_url(given: str, message: str) -> None:
    with pytest.raises(GpuauditError, match=message):
        paths.as_url(given)


@pytest.mark.parametrize("given", ["s3://b/r", "xx://b/r", "s3:bucket/r", "S3://b"])
def test_local_path_refuses_urls_naming_the_option(given: str) -> None:
    with pytest.raises(GpuauditError, match=r"^--out .* looks like a URL: --out takes a local directory$"):
        paths.local_path(given, "--out", "a local directory")


def test_tilde_expands_and_an_unknown_user_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.local_path("~/r", "--out") == tmp_path / "r"
    assert paths.collection_target("~/c", "--to") == str(tmp_path / "c")
    for fn in (paths.local_path, paths.collection_target, paths.expand_user):
        with pytest.raises(GpuauditError, match=r"^bad --x '~no_such_user_gpuaudit_paths/x': cannot expand '~'"):
            fn(f"{NOUSER}/x", "--x")


@pytest.mark.parametrize(("given", "message"), [
    ("s3:bucket", "^--to 's3:bucket': an S3 target is written s3://bucket/prefix$"),
    ("xx://b", "^--to: unsupported URL"), ("s3://", "^--to: s3://: an S3 URL needs a bucket"),
])
def test_collection_target_refuses_malformed_urls(given: str, message: str) -> None:
    with pytest.raises(GpuauditError, match=message):
        paths.collection_target(given, "--to")
    assert paths.collection_target("s3://b/p/", "--to") == "s3://b/p"


def test_only_cli_imports_cli() -> None:
    """agent/upload.py once imported cli._common to reach the target rule: nothing outside cli may."""
    offenders = []
    for path in (REPO / "src" / "gpuaudit").rglob("*.py"):
        if "cli" in path.relative_to(REPO / "src" / "gpuaudit").parts or path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n == "gpuaudit.cli" or n.startswith("gpuaudit.cli.")]
    assert offenders == []


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The XDG spec: a relative $XDG_CACHE_HOME is invalid. Found in review: the cache landed under the working
    directory, wherever the report ran."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    assert paths.user_cache_dir() == tmp_path / ".cache" / "gpuaudit"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "abs"))
    assert paths.user_cache_dir() == tmp_path / "abs" / "gpuaudit"
