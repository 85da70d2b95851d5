"""Structured logs for the agent: one `key=value` line per event on stderr."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from gpuaudit.util.textsafe import printable

logger = logging.getLogger("gpuaudit.agent")


def _fmt(value: Any) -> str:
    text = printable(value)  # names and errors from the node: no raw control characters in the log
    if not text or any(c in text for c in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event=<name> k=v ...`; values with spaces are quoted so the line stays machine-readable."""
    if not logger.isEnabledFor(level):
        return
    parts = [f"event={name}"] + [f"{k}={_fmt(v)}" for k, v in fields.items() if v is not None]
    logger.log(level, " ".join(parts))


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        return f"ts={ts} level={record.levelname.lower()} {record.getMessage()}"


def setup(verbose: bool = False) -> None:
    """Send gpuaudit.* logs to stderr as key=value lines (idempotent)."""
    root = logging.getLogger("gpuaudit")
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(getattr(h, "_gpuaudit_agent", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Formatter())
        handler._gpuaudit_agent = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.propagate = False
