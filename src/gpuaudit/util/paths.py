"""Where a location a user typed points, the one owner of that rule: object storage (`s3://bucket/prefix`,
normalized) or a local path (`~` / `~user` expanded). The store's roots, every CLI path option, `gpuaudit sql
--out`, push's targets and the agent's `--upload` ask here, so each spelling means the same everywhere:

- `s3://b/p` as typed, or `s3:/b/p` once it went through pathlib (Path collapses the double slash; the CLI's
  --data option is a Path). A scheme has two letters or more, so a Windows drive never matches.
- Any other scheme is an error, never a local directory named after it; so is `s3:bucket` (a mistyped URL).
- `~nouser/x` is a one-line error naming the option, never a RuntimeError or a literal `./~nouser` folder.

Standard library only: the agent's lean install uses it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuaudit.errors import GpuauditError

_SCHEMES = ("s3",)
NAME_MAX = 255  # bytes in one path component on Linux filesystems (ext4, xfs, btrfs, tmpfs)
_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+(.*)$", re.DOTALL)


def user_cache_dir() -> Path:
    """This user's cache base, `$XDG_CACHE_HOME/gpuaudit` (default `~/.cache/gpuaudit`): what this machine keeps
    for itself (an s3:// dataset's rollups, drawn charts)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid and ignored
        base = str(Path.home() / ".cache")
    return Path(base) / "gpuaudit"


def _s3_without_slashes(text: str) -> bool:
    """`s3:bucket`: a mistyped URL, never meant as a local folder named `s3:bucket`."""
    return text[:3].lower() == "s3:" and not _URL_RE.match(text)


def as_url(value: Path | str | None) -> str | None:
    """The normalized URL ("s3://bucket/prefix") when `value` names object storage, else None (a local path).
    An unsupported scheme, a URL without a bucket or one holding a line break is an error rather than a local
    directory named after it."""
    if value is None:
        return None
    m = _URL_RE.match(str(value))
    if not m:
        return None
    scheme, rest = m.group(1).lower(), m.group(2).strip("/")
    if scheme not in _SCHEMES:
        raise GpuauditError(f"unsupported URL {value}: give a local directory or s3://bucket/prefix")
    if not rest:
        raise GpuauditError(f"{value}: an S3 URL needs a bucket: s3://bucket/prefix")
    if "\n" in rest or "\r" in rest:
        raise GpuauditError(f"{str(value)!r}: give s3://bucket/prefix or a local directory")
    return f"{scheme}://{rest}"


def split(url: str) -> tuple[str, str]:
    """("s3", "bucket/prefix") of a normalized URL."""
    scheme, _, path = url.partition("://")
    return scheme, path


def expand_user(value: Path | str, option: str) -> Path:
    """`value` with `~` / `~user` expanded (quoted on a command line, or from a unit file no shell expanded). An
    unknown user is a one-line error naming the option."""
    try:
        return Path(value).expanduser()
    except RuntimeError:  # `~nouser/x`: no such user, no home directory to expand
        raise GpuauditError(f"bad {option} {str(value)!r}: cannot expand '~' (no such user or home directory)"
                            ) from None


def check_name_lengths(path: Path | str, option: str) -> None:
    """Refuse a path with a component longer than a file name may be, in one line: every command would
    otherwise fail on its first stat() with `OSError: [Errno 36] File name too long` (and a URL's key is
    checked by its store, not here)."""
    if as_url(path):
        return
    for part in Path(path).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise GpuauditError(f"{option}: a path component is too long ({size} bytes, at most {NAME_MAX}): "
                                f"{part[:40]}...")


def local_path(value: Path | str, option: str, what: str = "a local path") -> Path:
    """A path a command writes or reads on this machine (report --out, --config, sql --out, ...): `~` expanded,
    and a URL refused (`s3://b/r` would otherwise be written as the relative folder `s3:/b/r`)."""
    text = str(value)
    m = _URL_RE.match(text)
    if m or _s3_without_slashes(text):
        shown = f"{m.group(1)}://{m.group(2)}" if m else text
        raise GpuauditError(f"{option} {shown!r} looks like a URL: {option} takes {what}")
    return expand_user(value, option)


def collection_target(value: Path | str, option: str) -> str:
    """A push / upload target: `s3://bucket[/prefix]` (normalized), or a local directory (`~` expanded). Any
    other URL, and `s3:` without `//`, is a one-line error naming the option."""
    text = str(value)
    if _URL_RE.match(text):
        try:
            url = as_url(text)
        except GpuauditError as e:
            raise GpuauditError(f"{option}: {e}") from None
        assert url is not None  # the pattern matched
        return url
    if _s3_without_slashes(text):
        raise GpuauditError(f"{option} {text!r}: an S3 target is written s3://bucket/prefix")
    return str(expand_user(text, option))
