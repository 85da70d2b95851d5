"""Which Prometheus series and labels become which dataset columns.

An exporter preset (presets.py: dcgm-exporter, jobstats, nvidia_gpu_exporter) gives the names; every metric
and label name can be overridden on top (`--metric FIELD=NAME[:UNIT],...`, `--label FIELD=NAME,...`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gpuaudit.errors import GpuauditError
from gpuaudit.importer.prometheus.presets import DEFAULT_PRESET, PRESETS, MetricSpec
from gpuaudit.schema import MIB, mig_fraction

# Unit -> factor to the field's stored unit (fractions, bytes, W, J, °C).
_UNITS: dict[str, dict[str, float]] = {
    "fraction": {"fraction": 1.0, "ratio": 1.0, "percent": 0.01},
    "bytes": {"mib": MIB, "bytes": 1.0, "kib": 1024.0, "gib": 1024.0**3},
    "w": {"w": 1.0, "mw": 0.001},
    "j": {"mj": 0.001, "j": 1.0},
    "c": {"c": 1.0},
}

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass(frozen=True)
class Mapping:
    metrics: dict[str, MetricSpec]
    labels: dict[str, tuple[str, ...]]
    selector: str = ""  # extra label matchers, e.g. job="dcgm", added to every query
    exporter_pod: str = ""
    exporter: str = "dcgm"  # the preset's name
    detected: bool = False  # the preset was detected (True) or given with --exporter (False)

    overrides: tuple[tuple[str, ...], tuple[str, ...], str | None] = ((), (), None)

    def with_exporter(self, exporter: str) -> Mapping:
        """The same overrides on another exporter's preset (after detection)."""
        metrics, labels, pod = self.overrides
        return build_mapping(list(metrics), list(labels), selector=self.selector, exporter_pod=pod,
                             exporter=exporter, detected=self.detected)

    def factor(self, fld: str) -> float:
        spec = self.metrics[fld]
        return _UNITS[spec.stored][spec.unit.lower()]


def build_mapping(metric_overrides: list[str] | None = None, label_overrides: list[str] | None = None,
                  selector: str = "", exporter_pod: str | None = None, exporter: str | None = None,
                  detected: bool = False) -> Mapping:
    """The `exporter` preset's mapping with `FIELD=NAME[:UNIT][,NAME...]` and `FIELD=LABEL[,LABEL...]`
    overrides applied. An empty NAME list (`FIELD=`) turns a metric off. `exporter_pod` None: the preset's.
    `exporter` None: dcgm until the import detects the exporter on the server."""

    pod_given = exporter_pod
    if exporter is None:
        exporter, detected = DEFAULT_PRESET, True

    if exporter not in PRESETS:
        raise GpuauditError(f"bad --exporter {exporter!r}: use one of {', '.join(PRESETS)} (or leave it out to "
                            "detect it)")
    preset = PRESETS[exporter]
    if exporter_pod is None:
        exporter_pod = preset.exporter_pod
    metrics = dict(preset.metrics)
    # Any field some preset knows can be given (the first preset's unit and kind for it, unless one is given).
    any_spec = {f: s for p in reversed(PRESETS.values()) for f, s in p.metrics.items()}
    for item in metric_overrides or []:
        fld, names = _split(item, "--metric", any_spec)
        spec = metrics.get(fld, any_spec[fld])
        if not names:
            metrics.pop(fld, None)
            continue
        units = {n.split(":", 1)[1] for n in names if ":" in n}
        unit = spec.unit
        if len(units) > 1:
            raise GpuauditError(f"--metric {item!r}: give one unit for all names of {fld}")
        if units:
            unit = units.pop()
            if unit.lower() not in _UNITS[spec.stored]:
                raise GpuauditError(f"--metric {item!r}: unit {unit!r} does not fit {fld}; "
                                    f"use one of {', '.join(sorted(_UNITS[spec.stored]))}")
        bare = tuple(n.split(":", 1)[0] for n in names)
        for n in bare:
            if not _NAME.fullmatch(n):
                raise GpuauditError(f"--metric {item!r}: {n!r} is not a Prometheus metric name")
        metrics[fld] = replace(spec, names=bare, unit=unit)
    if not {"sm_active", "gr_engine_active", "duty_cycle"} & set(metrics):
        raise GpuauditError("--metric: keep at least one of sm_active, gr_engine_active and duty_cycle "
                            "(utilization)")
    labels = dict(preset.labels)
    for item in label_overrides or []:
        fld, names = _split(item, "--label", labels)
        for n in names:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", n):
                raise GpuauditError(f"--label {item!r}: {n!r} is not a Prometheus label name")
        labels[fld] = tuple(names)
    selector = selector.strip()
    if selector.startswith("{") and selector.endswith("}"):
        selector = selector[1:-1].strip()
    if "{" in selector or "}" in selector:
        raise GpuauditError(f"bad --selector {selector!r}: give label matchers like job=\"dcgm\"")
    try:
        re.compile(exporter_pod)
    except re.error as e:
        raise GpuauditError(f"bad --exporter-pod regex {exporter_pod!r}: {e}") from None
    return Mapping(metrics=metrics, labels=labels, selector=selector, exporter_pod=exporter_pod, exporter=exporter,
                   detected=detected,
                   overrides=(tuple(metric_overrides or ()), tuple(label_overrides or ()), pod_given))


def _split(item: str, option: str, known: dict) -> tuple[str, list[str]]:
    if "=" not in item:
        raise GpuauditError(f"bad {option} {item!r}: use FIELD=NAME[,NAME...]")
    fld, _, rest = item.partition("=")
    fld = fld.strip()
    if fld not in known:
        raise GpuauditError(f"bad {option} {item!r}: unknown field {fld!r}; known: {', '.join(known)}")
    return fld, [n.strip() for n in rest.split(",") if n.strip()]


gpu_fraction = mig_fraction  # the schema owns the MIG share (importers of all sources use it)
