"""The import's summary for people: what was imported, the layout detected, what could not be attributed."""

from __future__ import annotations

from gpuaudit import schema
from gpuaudit.importer.prometheus.presets import PRESETS
from gpuaudit.importer.prometheus.result import ImportResult


def summary(result: ImportResult) -> tuple[list[str], list[str]]:
    """(lines for stdout, notes for stderr): what was imported, the layout detected, and what could not be
    attributed or measured. The CLI prints them; tests read them."""
    preset = PRESETS.get(result.exporter)
    how = "detected" if result.exporter_detected else "given with --exporter"
    parts = [f"exporter {result.exporter} ({preset.title if preset else '?'}, {how})"]
    if result.host_labels:
        parts.append("hosts from " + ", ".join(f"{k} ({v} series)" for k, v in sorted(result.host_labels.items())))
    if result.pod_styles:
        parts.append("pods from " + ", ".join(f"{k} ({v} series)" for k, v in sorted(result.pod_styles.items())))
    if result.exporter_pods_skipped:
        parts.append(f"{result.exporter_pods_skipped} exporter-pod label sets skipped")
    if result.time_sliced:
        parts.append(f"time-sliced GPUs (per-pod shares as process rows): {len(result.time_sliced)}")
    if result.mig_gpus:
        parts.append(f"MIG GPUs: {len(result.mig_gpus)} (power and energy split over their instances, once)")
    out = ["layout: " + "; ".join(parts)]
    if result.held_steps:
        rest = result.held_steps - result.held_attributed
        out.append(f"held steps: {result.held_attributed} of {result.held_steps} got a pod or job"
                   + (f" ({rest} held by framebuffer memory only: no pod or job label)" if rest else ""))
    energy = [f"from the counter on {result.energy_from_counter} GPUs"] if result.energy_from_counter else []
    if result.energy_from_power:
        energy.append(f"estimated from power on {result.energy_from_power} GPUs (no energy counter)")
    if energy:
        out.append("energy: " + "; ".join(energy))
    notes: list[str] = []
    engine = sum(n for s, n in result.sources.items() if s in schema.ENGINE_ACTIVE_SOURCES)
    if engine:
        notes.append(f"{engine} rows measure engine-active, not SM activity (GR_ENGINE_ACTIVE: the time any SM had "
                     "work, an upper bound). To measure SM activity, add this line to the dcgm-exporter counters "
                     f"CSV: {schema.DCGM_SM_ACTIVE_CSV_LINE}")
    util_only = sum(n for s, n in result.sources.items() if s.endswith("-util"))
    if util_only:
        notes.append(f"{util_only} rows have no SM activity or engine-active metric: their duty cycle is an upper "
                     "bound on SM activity")
    for uuid, (kept, values) in sorted(result.merged_hosts.items()):
        notes.append(f"{uuid} was reported under {len(values)} host values ({', '.join(values)}): one GPU, "
                     f"stored on {kept}")
    for host, (why, hint) in sorted(result.suspect_hosts.items()):
        if host not in result.stored_hosts:
            continue  # a value no GPU is stored under (another label won)
        fix = (f"give --label host={hint} (that label seems to hold the node name)" if hint else
               "relabel the node name onto the series (__meta_kubernetes_pod_node_name -> node) or give "
               "--label host=LABEL")
        notes.append(f"host value {host} looks like {'an' if why[0] in 'aeiou' else 'a'} {why} rather than a node "
                     f"name: {fix}")
    for what, why in result.refused.items():
        notes.append(f"{what} not imported: {why}")
    for what, how in result.derived.items():
        notes.append(f"{what}: no GPU_I_PROFILE label; fraction derived: {how}")
    for what in result.no_utilization:
        notes.append(f"{what} has series but no utilization series: not imported")
    notes += result.notes
    return out, notes
