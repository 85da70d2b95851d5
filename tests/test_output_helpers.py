"""One text-safety module (util/textsafe), one JSON module (util/jsonio: one escaper, one `plain` walker), one
formatting vocabulary (util/fmt: MISSING, how each output spells a value that is not there), one logging setup
(util/logsetup). They once disagreed across five modules ("—" vs "n/a", two escapers, three walkers)."""

from __future__ import annotations

import ast
import datetime as dt
import enum
import json
import logging
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from tests.helpers import REPO

from gpuaudit.analysis import text
from gpuaudit.report.sections import formatting
from gpuaudit.util import fmt, jsonio, logsetup

SRC = REPO / "src" / "gpuaudit"


def _defined(name: str) -> list[str]:
    """Modules that define a function `name`."""
    return sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                  if any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(ast.parse(p.read_text()))))


def _calling(attr: str) -> list[str]:
    return sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                  if any(isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(ast.parse(p.read_text()))))


def test_each_helper_has_one_home() -> None:
    assert _defined("printable") == _defined("visible") == ["util/textsafe.py"]
    assert _defined("json_escaped") == _defined("json_text") == _defined("plain") == ["util/jsonio.py"]
    assert _calling("addHandler") == ["util/logsetup.py"] and _calling("basicConfig") == []


def test_missing_values_are_spelled_from_one_table() -> None:
    assert fmt.pct(None) == fmt.money(float("nan")) == fmt.unit_value(None, "USD") == fmt.MISSING["figure"]
    assert formatting.cell(None, "") == fmt.MISSING["cell"]
    assert text._pct(None) == text._usd(None) == fmt.MISSING["summary"]
    golden = (REPO / "tests" / "golden" / "report_fixed.md").read_text()
    assert f"| {fmt.MISSING['cell']} |" in golden and fmt.MISSING["figure"] not in golden


class _Color(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class _Row:
    b: float
    a: object
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("a", "b")


def test_plain_walks_results_and_query_values_alike() -> None:
    naive = dt.datetime(2026, 1, 2, 3, 4, 5)
    doc = {"x": (1.5, math.nan, np.float32(2.0), np.int64(3)), 4: _Row(math.inf, [_Color.RED, naive])}
    assert jsonio.plain(doc, rich=True) == {"x": [1.5, None, 2.0, 3], "4": {"a": ["red", "2026-01-02T03:04:05Z"],
                                                                           "b": None}}
    assert list(jsonio.plain(doc, rich=True)["4"]) == ["a", "b"]  # the class's order, not the fields'
    # A DuckDB MAP arrives as (key, value) pairs: an object, a non-string key JSON-encoded.
    assert jsonio.plain([(1, math.nan), (2, 0.5)], maps=True) == {"1": None, "2": 0.5}
    assert jsonio.plain([(1, 2), (3, 4)]) == [[1, 2], [3, 4]]
    assert jsonio.plain(naive) is naive  # only a result document turns datetimes into text


def test_json_text_escapes_unsafe_characters_only() -> None:
    out = jsonio.json_text({"host": "n\u202e1", "name": "é — 日本", "v": math.nan})
    assert out == '{"host": "n\\u202e1", "name": "é — 日本", "v": null}'
    assert jsonio.loads(out)["host"] == "n\u202e1"


def test_one_logging_setup_for_messages_and_events() -> None:
    root, gpuaudit = logging.getLogger(), logging.getLogger("gpuaudit")
    saved = (root.handlers[:], gpuaudit.handlers[:], gpuaudit.propagate, gpuaudit.level, root.level)
    try:
        root.handlers, gpuaudit.handlers = [], []
        logsetup.setup(events=True)
        logsetup.setup(events=True)  # idempotent
        assert len(gpuaudit.handlers) == 1 and not gpuaudit.propagate
        record = logging.LogRecord("gpuaudit.agent", logging.INFO, "", 0, "event=x n=1", None, None)
        line = gpuaudit.handlers[0].format(record)
        assert line.startswith("ts=") and line.endswith("Z level=info event=x n=1")
        logsetup.setup()
        [handler] = root.handlers
        msg = logging.LogRecord("gpuaudit.store", logging.WARNING, "", 0, "skipped a\x1bb", None, None)
        assert handler.format(msg) == "gpuaudit: warning: skipped a\\x1bb"
    finally:
        root.handlers, gpuaudit.handlers = saved[0], saved[1]
        gpuaudit.propagate = saved[2]
        gpuaudit.setLevel(saved[3])
        root.setLevel(saved[4])


def test_report_files_use_the_json_module() -> None:
    from gpuaudit.report import writer

    assert writer.document_bytes is jsonio.document_bytes


def test_the_fast_result_walk_equals_the_python_one() -> None:
    """29: a fleet's result (1,000 GPUs: 116,000 job and pod rows) took 3.8 s to turn into a plain document and
    3.2 s to encode, more than the warm analysis itself. orjson now does both; the document must be the one the
    walker gives (dataclass field order and JSON_FIELDS, UTC "Z", enums, NaN as null, numpy scalars), and what
    orjson will not take (a key that is not a string) falls back to the walker."""
    from gpuaudit.analysis.figure import Table, TableColumn

    class Colour(enum.Enum):
        RED = "red"

    when = dt.datetime(2026, 1, 5, 3, 4, 5, 123456, tzinfo=dt.UTC)
    table = Table("t", "d", (TableColumn("a", "s", "x"),), ({"a": 1.5, "at": when, "n": math.nan},), "src")
    doc = {"table": table, "c": Colour.RED, "day": when.date(), "naive": when.replace(tzinfo=None),
           "np": [np.float64(0.25), np.int64(7), np.float64(math.inf)], "t": (1, 2e-05)}
    walked = jsonio._walk(doc, rich=True, maps=False, default=None)
    fast = jsonio.plain(doc, rich=True)
    assert fast == walked and list(fast["table"]) == ["name", "description", "source", "columns", "rows"]
    assert fast["table"]["rows"][0] == {"a": 1.5, "at": "2026-01-05T03:04:05.123456Z", "n": None}
    assert fast["naive"] == "2026-01-05T03:04:05.123456Z" and fast["np"] == [0.25, 7, None]
    odd = {1: "one", "big": 2**70}
    assert jsonio.plain(odd, rich=True) == {"1": "one", "big": 2**70}
    text = jsonio.json_text(fast, indent=2)
    assert json.loads(text) == json.loads(json.dumps(fast, indent=2)) and text.startswith('{\n  "table"')


def test_a_result_document_is_written_in_one_pass_as_the_walked_one() -> None:
    """29: `analyze --json` turned a fleet's result into Python dicts (0.4 s for 45 MB) only to encode them
    again (0.4 s), and report.json went through Python's encoder. document_bytes encodes the result itself: the
    text must be what json_text writes of the walked document (indented and compact, unsafe characters escaped),
    and what orjson will not take must still come out as the walker has it."""
    from gpuaudit.analysis.figure import Table, TableColumn

    class Colour(enum.Enum):
        RED = "red"

    when = dt.datetime(2026, 1, 5, 3, 4, 5, 123456, tzinfo=dt.UTC)
    rows = ({"a": 1.5, "at": when, "n": math.nan, "who": "eve\u202e"}, {"a": 6.25e-05, "at": when, "n": 2, "who": "é"})
    doc = {"table": Table("t", "d", (TableColumn("a", "s", "x"),), rows, "src"), "c": Colour.RED,
           "day": when.date(), "np": [np.float64(0.25), np.int64(7), np.float64(-math.inf)], "t": (1, 2e-05)}
    walked = jsonio._walk(doc, rich=True, maps=False, default=None)
    for indent, kwargs in ((True, {"indent": 2}), (False, {"separators": (",", ":")})):
        text = jsonio.document_bytes(doc, indent=indent).decode("utf-8")
        assert json.loads(text) == walked == json.loads(jsonio.json_text(jsonio.plain(doc, rich=True), **kwargs))
        assert text == jsonio.json_text(walked, indent=2) if indent else "\n" not in text
        assert "\\u202e" in text and "\u202e" not in text and "é" in text
        assert text.startswith('{\n  "table"' if indent else '{"table":{"name":"t"')
    odd = {1: "one", "big": 2**70, "when": when}
    assert json.loads(jsonio.document_bytes(odd, indent=False)) == {"1": "one", "big": 2**70,
                                                                   "when": "2026-01-05T03:04:05.123456Z"}
