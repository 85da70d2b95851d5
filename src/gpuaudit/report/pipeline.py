"""The analyze / report / demo flows live in gpuaudit.flows (one flow each); kept importable from here."""

from __future__ import annotations

from gpuaudit.flows import DEMO_DATA, analyze, report_dataset, run_demo

__all__ = ["DEMO_DATA", "analyze", "report_dataset", "run_demo"]
