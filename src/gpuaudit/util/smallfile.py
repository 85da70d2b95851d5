"""Reading a small file a user names (--config, sql --file, --bearer-token-file): a regular file, and only so big.

`/dev/zero`, a FIFO or a 10 GB log given by mistake would otherwise be read whole into memory (12.9 GB RSS before
anything failed); a FIFO would block forever. Opened without blocking, checked by fstat (no race with a rename),
and read to one byte past the cap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuaudit.errors import GpuauditError

CONFIG_MAX_BYTES = 1 << 20  # a cost config is a few KB
QUERY_MAX_BYTES = 1 << 20  # a query file is a few KB
TOKEN_MAX_BYTES = 64 << 10  # a bearer token (a JWT with many claims is a few KB)


def _read_small_file(path: Path | str, option: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `path`, or a one-line GpuauditError naming `option`: not a regular file
    (a device, FIFO, socket or directory), larger than `max_bytes`, or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise GpuauditError(f"cannot read {option} {path}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise GpuauditError(f"{option} {path} is {kind}: give a regular file")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 16, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise GpuauditError(f"cannot read {option} {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise GpuauditError(f"{option} {path} is larger than {max_bytes:,} bytes: not a {option} file")
    return b"".join(chunks)


def read_small_text(path: Path | str, option: str, max_bytes: int) -> str:
    """read_small_file decoded as UTF-8, with the offset of the first bad byte in the error."""
    data = _read_small_file(path, option, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GpuauditError(f"{option} {path} is not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})"
                            ) from None
