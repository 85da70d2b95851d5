"""Long DuckDB calls that Ctrl-C and a deadline can stop.

A DuckDB relation (`con.sql(...).fetchall()`) never looks at Python's signals: Ctrl-C waits for the query to end
(forever, for `SELECT count(*) FROM range(10^13)`), and `con.execute` turns it into `RuntimeError: Query
interrupted`. So the call runs on a worker thread while the main thread waits, where Python delivers SIGINT; on
Ctrl-C or the deadline the main thread asks DuckDB to stop (`con.interrupt()`, safe from any thread) and the
caller gets KeyboardInterrupt (the CLI prints `gpuaudit: interrupted`, exit 130) or QueryTimeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from gpuaudit.errors import GpuauditError

T = TypeVar("T")
POLL_S = 0.05  # how often the waiting thread looks at the clock (SIGINT wakes it at once)
_STOP_WAIT_S = 10.0  # how long an interrupted call gets to unwind before the caller gives up on it


class QueryTimeout(GpuauditError):
    """The call ran past its deadline and was stopped."""


def run_stoppable(call: Callable[[], T], interrupt: Callable[[], Any], *, timeout_s: float | None = None,
                  what: str = "the query") -> T:
    """`call()`, stopped through `interrupt()` on Ctrl-C (KeyboardInterrupt) or after `timeout_s` seconds
    (QueryTimeout). Only the main thread receives signals: elsewhere `call()` simply runs here."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the waiting thread, which raises it there
            box["error"] = e
        finally:
            done.set()

    worker = threading.Thread(target=work, name="gpuaudit-query", daemon=True)
    deadline = None if not timeout_s else time.monotonic() + timeout_s
    worker.start()
    try:
        while not done.wait(POLL_S):
            if deadline is not None and time.monotonic() >= deadline:
                _stop(interrupt, done)
                raise QueryTimeout(f"{what} ran longer than {timeout_s:g} s and was stopped (--timeout)")
    except KeyboardInterrupt:
        _stop(interrupt, done)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def _stop(interrupt: Callable[[], Any], done: threading.Event) -> None:
    interrupt()
    done.wait(_STOP_WAIT_S)
