-- Per-GPU summary (one row per GPU or MIG instance), busiest first.
SELECT
    host,
    gpu_uuid,
    mig_instance,
    MAX(gpu_index)                                                              AS gpu_index,
    MAX(gpu_name)                                                               AS gpu_name,
    MIN(ts)                                                                     AS first_ts,
    MAX(ts)                                                                     AS last_ts,
    SUM(interval_s * gpu_fraction) / 3600.0                                     AS observed_gpu_hours,
    SUM(CASE WHEN n_processes > 0 THEN interval_s ELSE 0 END) / NULLIF(SUM(interval_s), 0)
                                                                                AS runtime_util,
    SUM(COALESCE(sm_active, gr_engine_active, duty_cycle, 0) * interval_s) / NULLIF(SUM(interval_s), 0)
                                                                                AS real_util,
    SUM(COALESCE(duty_cycle, 0) * interval_s) / NULLIF(SUM(interval_s), 0)      AS duty_cycle_util,
    MAX(mem_used_bytes)                                                         AS max_mem_used_bytes,
    SUM(power_w * interval_s) / NULLIF(SUM(CASE WHEN power_w IS NOT NULL THEN interval_s END), 0)
                                                                                AS avg_power_w,
    MAX(source)                                                                 AS source
FROM samples
GROUP BY host, gpu_uuid, mig_instance
ORDER BY real_util DESC, host, gpu_uuid, mig_instance;
