"""Rooms stay rooms: the size limits of docs/DESIGN.md, read from the source with `ast`, so a long function or a
file that grows past its room fails here instead of in the next review."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuaudit"
LONG_FUNCTION_LINES = 80  # a function longer than this does more than one thing
MOST_LONG_FUNCTIONS = 3  # outside cli/, whose Typer commands are option lists
LONG_FILE_LINES = 600
MOST_LONG_FILES = 2


def _functions(text: str, where: str) -> list[tuple[int, str]]:
    """(lines, "where:line name") of every function and method in `text`, nested ones included."""
    return [(n.end_lineno - n.lineno + 1, f"{where}:{n.lineno} {n.name}") for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.end_lineno]


def test_at_most_three_long_functions_outside_the_cli() -> None:
    long = sorted((f for p in SRC.rglob("*.py") if "cli" not in p.relative_to(SRC).parts
                   for f in _functions(p.read_text(encoding="utf-8"), str(p.relative_to(SRC)))
                   if f[0] > LONG_FUNCTION_LINES), reverse=True)
    assert len(long) <= MOST_LONG_FUNCTIONS, "\n".join(f"{n} lines  {where}" for n, where in long)


def test_at_most_two_files_over_600_lines() -> None:
    sizes = sorted(((len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(SRC)))
                    for p in SRC.rglob("*.py")), reverse=True)
    long = [s for s in sizes if s[0] > LONG_FILE_LINES]
    assert len(long) <= MOST_LONG_FILES, long


def test_the_size_reader_counts_methods_and_nested_functions_from_def_to_last_line() -> None:
    text = "class C:\n    def m(self):\n" + "        x = 1\n" * 81 + "def outer():\n    def inner():\n        pass\n"
    assert sorted(_functions(text, "t.py")) == [(2, "t.py:85 inner"), (3, "t.py:84 outer"), (82, "t.py:2 m")]
