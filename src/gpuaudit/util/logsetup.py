"""The one logging setup: gpuaudit's log lines on stderr, data in them (names, paths, errors) with control
characters escaped. Two line formats:

- messages (every command): `gpuaudit: warning: ...`, warnings and worse;
- events (the agent, `push --follow`): `ts=<UTC> level=info event=<name> k=v ...` (agent/log.event writes
  them), info and worse, debug too with `verbose`.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from gpuaudit.util.textsafe import printable


class _Messages(logging.Formatter):
    """`gpuaudit: warning: ...`, one line: messages name files and hosts from the data, so control, format and
    bidi characters in them are shown escaped (an ESC[2J or a U+202E in a pushed file's name never reaches the
    terminal raw)."""

    def format(self, record: logging.LogRecord) -> str:
        level = {"WARNING": "warning", "ERROR": "error", "CRITICAL": "error"}.get(record.levelname, "note")
        return f"gpuaudit: {level}: {printable(record.getMessage())}"


class _StderrHandler(logging.StreamHandler[Any]):
    """Writes to whatever sys.stderr is when a record comes (a test runner swaps it between commands)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


class _Events(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        return f"ts={ts} level={record.levelname.lower()} {record.getMessage()}"


def setup(*, events: bool = False, verbose: bool = False) -> None:
    """Send log lines to stderr (idempotent). Messages: gpuaudit's loggers and Python's `warnings` (captured)
    through one escaping handler on the root logger, set up once per process before any command runs (the CLI's
    callback). Events (`events`): the agent's key=value lines replace that for the gpuaudit.* loggers."""
    if not events:
        root = logging.getLogger()
        if any(isinstance(h.formatter, _Messages) for h in root.handlers):
            return
        handler = _StderrHandler()
        handler.setFormatter(_Messages())
        # gpuaudit's own records and Python's warnings: a library's chatter (urllib3 logs each retry it makes) is
        # not ours to show; its outcome is, in gpuaudit's words (the importer's one-line error counts the retries).
        handler.addFilter(lambda r: r.name == "gpuaudit" or r.name.startswith(("gpuaudit.", "py.warnings")))
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
        logging.captureWarnings(True)
        return
    root = logging.getLogger("gpuaudit")
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(getattr(h, "_gpuaudit_agent", False) for h in root.handlers):
        events_handler = logging.StreamHandler(sys.stderr)
        events_handler.setFormatter(_Events())
        events_handler._gpuaudit_agent = True  # type: ignore[attr-defined]
        root.addHandler(events_handler)
        root.propagate = False
