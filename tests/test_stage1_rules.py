"""Rules the stage-1 SQL must spell out (portable SQL, run by DuckDB and Spark), checked against their one
Python definition: the slot a sample counts in (analysis/stage1/slots.py) and the source precedence
(schema.SOURCE_PRECEDENCE)."""

from __future__ import annotations

import re

import duckdb
import pytest
from tests.helpers import REPO

from gpuaudit import schema
from gpuaudit.analysis.stage1 import streams
from gpuaudit.analysis.stage1.slots import DEMAND_BUCKET_S, FINE_SLOT_S, HOUR_S, slot_index, slot_start_sql

SQL = REPO / "sql"
_SLOT_RE = re.compile(r"floor\(\(epoch\((?P<ts>[\w.]+)\) - (?P<end>[\d.]+)\) / (?P<w>[\w.]+)\) \* (?P<w2>[\w.]+)")


def _analysis_sql() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(SQL.glob("analysis_*.sql"))}


def test_every_slot_in_the_sql_is_the_one_rule() -> None:
    widths: dict[str, set[str]] = {}
    for name, text in _analysis_sql().items():
        found = list(_SLOT_RE.finditer(text))
        assert len(found) == text.count("floor((epoch("), f"{name}: a slot not written as slot_start_sql's"
        for m in found:
            assert m.group(0) == slot_start_sql(m.group("ts"), m.group("w")), f"{name}: {m.group(0)}"
            widths.setdefault(name, set()).add(m.group("w"))
    allowed = {str(HOUR_S), "w.slot_len_s"}
    for name in ("analysis_demand.sql", "analysis_demand_dedup.sql"):
        assert str(int(DEMAND_BUCKET_S)) in widths[name], name
    for name, ws in widths.items():
        assert ws <= allowed | {str(int(DEMAND_BUCKET_S))}, (name, ws)
        if "demand" not in name:
            assert ws <= allowed, (name, ws)
    assert f"hour_s + {HOUR_S} - last_s" in _analysis_sql()["analysis_refine_hours.sql"]


def test_the_fine_pass_uses_the_rule_with_one_minute_slots() -> None:
    fine = streams.streams_sql(fine=True)
    assert f"{slot_start_sql('ts', FINE_SLOT_S)} AS slot_s," in fine and f"{FINE_SLOT_S} AS slot_len_s," in fine
    assert f"AND {slot_start_sql('s.ts', HOUR_S)} = f.hour_s" in fine


@pytest.mark.parametrize(("end_s", "hour"), [(3600.0, 0), (3600.01, 1), (3599.0, 0), (7200.5, 2), (0.002, 0),
                                            (0.0005, -1)])
def test_an_interval_ending_on_the_hour_counts_in_the_hour_before(end_s: float, hour: int) -> None:
    assert slot_index(end_s) == hour


def test_source_precedence_in_the_sql_is_the_schemas() -> None:
    """The CASE of sql/analysis_streams.sql, run by DuckDB over every known source (and an unknown one), ranks
    each as schema.SOURCE_PRECEDENCE does."""
    text = _analysis_sql()["analysis_streams.sql"]
    case = re.search(r"(CASE\s+WHEN source.*?END) AS precedence", text, re.S)
    assert case is not None
    sources = [*schema.SOURCE_PRECEDENCE, "some-other-tool"]
    values = ", ".join(f"('{s}')" for s in sources)
    got = dict(duckdb.connect().execute(f"SELECT source, {case.group(1)} FROM (VALUES {values}) t(source)").fetchall())
    assert got == {s: schema.SOURCE_PRECEDENCE.get(s, schema.OTHER_SOURCE_PRECEDENCE) for s in sources}
    assert max(schema.SOURCE_PRECEDENCE.values()) < schema.OTHER_SOURCE_PRECEDENCE
    assert {schema.SOURCE_NVML_GPM, schema.SOURCE_NVML, schema.SOURCE_SIMULATED, *schema.IMPORT_SOURCES} \
        == set(schema.SOURCE_PRECEDENCE)  # every known source has its rank
