"""The one logging setup: gpuaudit's log lines on stderr, data in them (names, paths, errors) with control
characters escaped. Two line formats:

- messages (`gpuaudit sql`, `compact`, `push`): `gpuaudit: warning: ...`, warnings and worse;
- events (the agent, `push --follow`): `ts=<UTC> level=info event=<name> k=v ...` (agent/log.event writes
  them), info and worse, debug too with `verbose`.
"""

from __future__ import annotations

import logging
import sys
import time

from gpuaudit.util.textsafe import printable


class _Messages(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class _Events(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        return f"ts={ts} level={record.levelname.lower()} {record.getMessage()}"


def setup(*, events: bool = False, verbose: bool = False) -> None:
    """Send log lines to stderr (idempotent): messages for a command, or (`events`) the agent's key=value lines."""
    if not events:
        # The root logger: a library's warning (an unreadable file DuckDB skipped, s3fs) reaches the user too.
        handler = logging.StreamHandler()
        handler.setFormatter(_Messages("gpuaudit: %(levelname)s: %(message)s"))
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
        logging.addLevelName(logging.WARNING, "warning")
        return
    root = logging.getLogger("gpuaudit")
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(getattr(h, "_gpuaudit_agent", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Events())
        handler._gpuaudit_agent = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.propagate = False
