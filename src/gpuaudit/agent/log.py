"""Structured logs for the agent: one `key=value` line per event (util.logsetup.setup(events=True) sends them
to stderr)."""

from __future__ import annotations

import logging
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
