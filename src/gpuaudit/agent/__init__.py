"""The node agent: samples NVML every interval, attributes GPU processes, buffers and flushes rows
crash-safely into the dataset. Modules: nvml (the NVML seam and its typed device calls), sampler (NVML ->
rows), procinfo (/proc and cgroups), buffer (bounded buffer and flusher), runner (life cycle), instance (one
agent per data directory and host), status, upload, metrics, log. `gpuaudit selftest` (gpuaudit.selftest)
drives the sampler from outside; nothing here imports it. Nothing here imports polars or pyarrow (the
agent's RSS budget)."""
