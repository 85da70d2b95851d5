"""Usage errors (an unknown option, a bad value, a missing argument) as one `gpuaudit: error: ...` line.

Typer draws them as a 4-6 line box; the README promises one line per error. Click's own message is kept,
with its "Did you mean" hint, shown escaped and cut short (an argument can be a 200 KB line), plus where to look.
"""

from __future__ import annotations

from typing import Any

import typer

MAX_ECHO = 300  # characters of a message that echoes what was typed


def _click_exceptions() -> Any:
    """Typer >= 0.20 vendors click as typer._click; older typers use click itself."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def run(app: typer.Typer) -> int:
    """Run `app` on sys.argv; returns the exit status."""
    ex = _click_exceptions()
    try:
        rv = app(standalone_mode=False)
    except ex.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `gpuaudit agent`: the help, as before
            e.show()
            return int(e.exit_code)
        _error(usage_line(e))
        return int(e.exit_code)
    except ex.ClickException as e:
        _error(cut(e.format_message()))
        return int(e.exit_code)
    except typer.Abort:  # Ctrl-C or EOF at a prompt
        typer.echo("gpuaudit: interrupted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0


def usage_line(e: Any) -> str:
    """Click's message, cut short, with the hint a query starting with `--` needs, and where the help is."""
    message = cut(e.format_message())
    option = getattr(e, "option_name", None) or ""
    if type(e).__name__ == "NoSuchOption" and option.startswith("--") and (len(option) > 40 or not
                                                                          option[2:].replace("-", "").isalnum()):
        message += "; a query that starts with `--` goes after `--`: gpuaudit sql -- '-- ...'"
    ctx = getattr(e, "ctx", None)
    if ctx is not None:
        message += f" (see `{ctx.command_path} --help`)"
    return message


def cut(text: str, limit: int = MAX_ECHO) -> str:
    """`text` as one visible line of at most `limit` characters (control characters escaped first)."""
    from gpuaudit.util.textsafe import printable

    line = printable(text)
    return line if len(line) <= limit else f"{line[:limit]}... ({len(line):,} characters)"


def _error(message: str) -> None:
    typer.echo(f"gpuaudit: error: {message}", err=True)
