-- Analyzer stage 1, the big scan: one row per GPU (MIG slice: mig_instance >= 0, whole GPU: -1) per UTC
-- hour, from `samples`. gpu_name and source are part of the key (constant per GPU in practice): grouping
-- by them is measured ~25 % cheaper than aggregating strings; the analyzer folds the rare split rows.
-- A sample belongs to the hour in which its interval ends (ts is the end of the interval; an interval
-- ending exactly on the hour belongs to the hour before). Every GPU-second is weighted by gpu_fraction,
-- so a MIG slice counts as its share of a GPU.
-- Where SM activity was not measured (sm_active NULL: sources `nvml` and `prometheus-dcgm-util`, which
-- the writer enforces), duty_cycle stands in for it (an upper bound, counted in fallback_s). Idle-held: a process holds the GPU while SM activity < 1 %.
-- The fleet demand series comes from sql/analysis_demand.sql: a separate small-keyed scan is measured
-- cheaper than GROUPING SETS over both keys.
WITH raw AS (
    SELECT
        host, gpu_uuid, coalesce(mig_instance, -1) AS mig_instance, gpu_name, gpu_fraction, source,
        epoch(ts) AS end_s,
        interval_s,
        interval_s * gpu_fraction AS gpu_s,
        n_processes > 0 AS held,
        duty_cycle,
        coalesce(sm_active, duty_cycle) AS sm,
        sm_active IS NULL AND duty_cycle IS NOT NULL AS fallback,
        coalesce(energy_j, power_w * interval_s) * gpu_fraction AS energy_j,
        mem_used_bytes, mem_total_bytes
    FROM samples
),
s AS (
    SELECT *,
        floor((end_s - 0.001) / 3600) * 3600 AS hour_s,
        CASE WHEN held THEN gpu_s ELSE 0 END AS held_s
    FROM raw
)
SELECT
    host, gpu_uuid, mig_instance, hour_s,
    to_timestamp(hour_s) AS hour,  -- readable twin of hour_s (for `gpuaudit sql`)
    gpu_name,
    source,
    max(gpu_fraction) AS gpu_fraction,
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
GROUP BY host, gpu_uuid, mig_instance, hour_s, gpu_name, source
