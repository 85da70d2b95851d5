-- Per-GPU summary (one row per GPU or MIG instance), busiest first, from the de-duplicated GPU-hours `gpu_hours`
-- (stage 1's rollup, what `gpuaudit analyze` counts). mig_instance is -1 for a whole GPU.
SELECT
    h.host,
    h.gpu_uuid,
    h.mig_instance,
    MAX(i.gpu_index)                                                            AS gpu_index,
    MAX(h.gpu_name)                                                             AS gpu_name,
    to_timestamp(MIN(h.first_s))                                                AS first_ts,
    to_timestamp(MAX(h.last_s))                                                 AS last_ts,
    SUM(h.observed_s) / 3600.0                                                  AS observed_gpu_hours,
    SUM(h.held_s) / NULLIF(SUM(h.observed_s), 0)                                AS runtime_util,
    SUM(h.real_s) / NULLIF(SUM(h.observed_s), 0)                                AS real_util,
    SUM(h.busy_s) / NULLIF(SUM(h.observed_s), 0)                                AS duty_cycle_util,
    MAX(h.max_mem_used_bytes)                                                   AS max_mem_used_bytes,
    SUM(h.energy_j) / NULLIF(SUM(h.energy_s), 0)                                AS avg_power_w,
    MAX(h.source_max)                                                           AS source
FROM gpu_hours AS h
LEFT JOIN (
    SELECT gpu_uuid, coalesce(mig_instance, -1) AS mig_instance, max(gpu_index) AS gpu_index
    FROM samples GROUP BY ALL
) AS i USING (gpu_uuid, mig_instance)
GROUP BY h.host, h.gpu_uuid, h.mig_instance
ORDER BY real_util DESC, h.host, h.gpu_uuid, h.mig_instance;
