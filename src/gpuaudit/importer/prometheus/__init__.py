"""`gpuaudit import prometheus`: GPU exporter history (dcgm-exporter, jobstats, nvidia_gpu_exporter,
gpuaudit's own agent) from a Prometheus-compatible server into the dataset. Which series become which rows:
presets.py (the names), identity.py (host, GPU and workload of a series), rows.py (the rules).

Two phases, so a failure never leaves a partial import behind:
1. fetch: every query of every chunk is answered and converted to typed rows, spilled to a private
   temporary directory (bounded memory for long windows). Any server or network error stops here,
   before the dataset is touched.
2. write: one store transaction (store/transaction.py) replaces the imported GPUs' Prometheus-sourced rows
   in the window: per (host, date) partition the importer's own file is replaced by a new one,
   `prometheus-<stamp>.parquet` (a new name each time): its previous rows minus those the new import
   replaces, plus the new rows. The replaced files are listed in a compaction record next to it, as
   `gpuaudit compact` leaves one, so that `gpuaudit push` removes them from a collection target and the
   target's readers hide them until then (without it the target kept both files: rows counted twice).

Idempotency: imported rows live on a step grid aligned to the epoch, and a new import replaces the
Prometheus-sourced rows of the same GPUs inside its window (also in files that compaction merged the
importer's file into). Importing the same or an overlapping window again therefore never duplicates rows.

Modules: fetch (queries, detection, spill), check (answers refused), run (import_prometheus and the write),
text (the summary), result (ImportResult), and the Prometheus-only rules: presets (exporters' names), mapping
(series and labels -> columns), identity (what one series is about), rows (a chunk's answers -> rows). The HTTP
client, shared with the Kubernetes importer, is importer/promclient.py.
"""

from gpuaudit.importer.prometheus.fetch import plan_queries, query_for
from gpuaudit.importer.prometheus.result import ImportResult, Progress
from gpuaudit.importer.prometheus.run import FILE_STEM, PROM_SOURCES, import_prometheus
from gpuaudit.importer.prometheus.text import summary

__all__ = ["FILE_STEM", "PROM_SOURCES", "ImportResult", "Progress", "import_prometheus", "plan_queries", "query_for",
           "summary"]
