"""Time arguments of `gpuaudit import`: absolute ISO dates, relative offsets like -30d, and step widths.

Every datetime that leaves this module is timezone-aware UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from gpuaudit.errors import GpuauditError

_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 365 * 86400}
# Times a command accepts: no GPU telemetry predates 2000 (Prometheus itself is from 2012), and nothing is
# measured after 2100. Outside, a value is a typo (`-1000000d`, `0001-01-01`, `9999-12-31`), not a window.
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def parse_duration_s(text: str) -> float:
    """Seconds in a Prometheus-style duration: `60s`, `5m`, `1h30m`, `2d`; a bare number means seconds."""
    t = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = _DURATION.findall(t)
    if not t or "".join(n + u for n, u in parts) != t:
        raise GpuauditError(f"bad duration {text!r}: use e.g. 60s, 5m, 1h, 30d")
    return float(sum(int(n) * _UNIT_S[u] for n, u in parts))


def parse_step_s(text: str) -> int:
    """The import step in whole seconds (Prometheus evaluates on this grid; rows are that long)."""
    seconds = parse_duration_s(text)
    if seconds < 1 or seconds != int(seconds):
        raise GpuauditError(f"bad --step {text!r}: it must be a whole number of seconds, at least 1s")
    return int(seconds)


def parse_time(text: str, now: datetime | None = None, *, option: str | None = None) -> datetime:
    """`now`, a relative offset (`-30d`, `-6h`, `-90m`), or an ISO date / datetime. A datetime without
    a zone is taken as UTC; one with a zone is converted to UTC. The result lies between EARLIEST and
    LATEST; `option` names the argument in errors (e.g. `--start`)."""
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    t = text.strip()
    try:
        if t.lower() == "now":
            parsed = now
        elif t.startswith("-") and len(t) > 1 and not t[1:2].isspace():
            try:
                seconds = parse_duration_s(t[1:])
            except GpuauditError:
                raise GpuauditError(f"{_bad(text, option)}: a relative offset is a duration back from now, "
                                    "e.g. -30d, -6h, -1h30m") from None
            parsed = now - timedelta(seconds=seconds)
        else:
            parsed = datetime.fromisoformat(t)
    except ValueError:
        raise GpuauditError(
            f"{_bad(text, option)}: use an ISO date or datetime (2026-01-05, 2026-01-05T12:00:00Z), "
            "a relative offset (-30d, -6h) or now"
        ) from None
    except OverflowError:  # an offset reaching before year 1
        raise GpuauditError(f"{_bad(text, option)}: it lies before year 1; use a time within "
                            f"{_EARLIEST:%Y-%m-%d} .. {LATEST:%Y-%m-%d}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return check_range(parsed.astimezone(UTC), option, text)


def check_range(t: datetime, option: str | None = None, text: str | None = None) -> datetime:
    """`t` itself, or a one-line error when it lies outside EARLIEST .. LATEST."""
    if not _EARLIEST <= t <= LATEST:
        raise GpuauditError(f"{_bad(text if text is not None else t.isoformat(), option)}: "
                            f"{t.year:04d}-{t.month:02d}-{t.day:02d} is outside "
                            f"{_EARLIEST:%Y-%m-%d} .. {LATEST:%Y-%m-%d}")
    return t


def _bad(text: str, option: str | None) -> str:
    return f"bad time {text!r}" + (f" for {option}" if option else "")


def align_down(t: datetime, step_s: int) -> datetime:
    """`t` rounded down to a multiple of step_s since the epoch: imports of overlapping windows then
    evaluate on the same grid, so their rows line up instead of interleaving."""
    epoch = int(t.timestamp())
    return datetime.fromtimestamp(epoch - epoch % step_s, UTC)
