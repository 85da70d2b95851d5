"""The node agent: samples NVML every interval, attributes GPU processes, buffers and flushes rows
crash-safely into the dataset. Modules: sampler (NVML -> rows), procinfo (/proc and cgroups),
buffer (bounded buffer and flusher), runner (life cycle), status, simulation (fake NVML wiring).
Nothing here imports polars or pyarrow (the agent's RSS budget)."""
