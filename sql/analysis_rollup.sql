-- Analyzer stage 1: ONE scan of `samples` producing two small rollups at once (GROUPING SETS).
--   level = 'gpu_hour': one row per GPU (MIG slice: mig_instance >= 0, whole GPU: -1) per UTC hour
--   level = 'demand'  : one row per 300 s bucket for the whole fleet (the demand series)
-- A sample belongs to the hour / bucket in which its interval ends (ts is the end of the interval; an
-- interval ending exactly on a boundary belongs to the one before). Every GPU-second is weighted by
-- gpu_fraction, so a MIG slice counts as its share of a GPU.
-- Sources `nvml` and `prometheus-dcgm-util` measure no SM activity: duty_cycle stands in for it there
-- (an upper bound, counted in fallback_s). Idle-held: a process holds the GPU while SM activity < 1 %.
-- The inner CTEs compute epoch(ts) and the weighted seconds once per row (measured ~10 % faster).
WITH raw AS (
    SELECT
        host, gpu_uuid, coalesce(mig_instance, -1) AS mig_instance, gpu_name, gpu_fraction, source,
        epoch(ts) AS end_s,
        interval_s,
        interval_s * gpu_fraction AS gpu_s,
        n_processes > 0 AS held,
        duty_cycle,
        CASE WHEN source IN ('nvml', 'prometheus-dcgm-util') OR sm_active IS NULL THEN duty_cycle ELSE sm_active END AS sm,
        (source IN ('nvml', 'prometheus-dcgm-util') OR sm_active IS NULL) AND duty_cycle IS NOT NULL AS fallback,
        coalesce(energy_j, power_w * interval_s) * gpu_fraction AS energy_j,
        mem_used_bytes, mem_total_bytes
    FROM samples
),
s AS (
    SELECT *,
        floor((end_s - 0.001) / 3600) * 3600 AS hour_s,
        floor((end_s - 0.001) / 300) * 300 AS bucket_s,
        CASE WHEN held THEN gpu_s ELSE 0 END AS held_s
    FROM raw
)
SELECT
    CASE WHEN grouping(bucket_s) = 0 THEN 'demand' ELSE 'gpu_hour' END AS level,
    host, gpu_uuid, mig_instance, hour_s, bucket_s,
    to_timestamp(hour_s) AS hour,  -- readable twins of the epoch keys (for `gpuaudit sql`)
    to_timestamp(bucket_s) AS bucket,
    any_value(gpu_name) AS gpu_name,
    max(gpu_fraction) AS gpu_fraction,
    min(source) AS source_min,
    max(source) AS source_max,
    count(*) AS samples,
    sum(gpu_s) AS observed_s,
    sum(held_s) AS held_s,
    sum(duty_cycle * gpu_s) AS busy_s,
    sum(sm * gpu_s) AS real_s,
    sum(sm * held_s) AS real_held_s,
    sum(CASE WHEN fallback THEN gpu_s ELSE 0 END) AS fallback_s,
    sum(CASE WHEN sm IS NULL THEN gpu_s ELSE 0 END) AS unmeasured_s,
    sum(CASE WHEN sm < 0.01 THEN held_s ELSE 0 END) AS idle_held_s,
    sum(energy_j) AS energy_j,
    sum(CASE WHEN energy_j IS NOT NULL THEN gpu_s ELSE 0 END) AS energy_s,
    max(mem_used_bytes) AS max_mem_used_bytes,
    max(mem_total_bytes) AS mem_total_bytes,
    min(end_s - interval_s) AS first_s,
    max(end_s) AS last_s,
    max(interval_s) AS max_interval_s
FROM s
GROUP BY GROUPING SETS ((host, gpu_uuid, mig_instance, hour_s), (bucket_s))
