"""What an import did: the counts, the layout detected, and what could not be attributed (text.py says it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

Progress = Callable[[int, int], None]  # (queries done, queries in total)


@dataclass
class ImportResult:
    start: datetime  # exclusive: the first row ends one step later
    end: datetime  # inclusive: the last row's ts
    step_s: int
    sample_rows: int = 0
    process_rows: int = 0
    replaced_rows: int = 0  # earlier imported rows this import superseded
    queries: int = 0
    series: int = 0
    gpus: int = 0
    hosts: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    # What the summary tells (the layout found, and what could not be attributed):
    exporter: str = ""
    exporter_detected: bool = False
    present_names: set[str] | None = None  # metric names the server listed in the window (None: unknown)
    host_labels: dict[str, int] = field(default_factory=dict)  # host label -> series that took it
    pod_styles: dict[str, int] = field(default_factory=dict)  # pod label -> series that took it
    exporter_pods_skipped: int = 0
    suspect_hosts: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # host -> (why, label hint)
    merged_hosts: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # uuid -> (kept, all values)
    stored_hosts: set[str] = field(default_factory=set)  # the host values rows are stored under
    time_sliced: list[str] = field(default_factory=list)
    mig_gpus: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # MIG instances not imported -> why
    derived: dict[str, str] = field(default_factory=dict)  # MIG fractions derived from memory
    no_utilization: list[str] = field(default_factory=list)  # GPUs with series but no utilization series
    held_steps: int = 0
    held_attributed: int = 0
    energy_from_counter: int = 0  # GPUs
    energy_from_power: int = 0  # GPUs with power but no energy counter (the analysis estimates it)
    notes: list[str] = field(default_factory=list)
