-- Analyzer stage 1, the one big scan of `samples`: one row per GPU (MIG slice: mig_instance >= 0, whole
-- GPU: -1) per 300 s bucket, DE-DUPLICATED. The analyzer materializes it once as `gpu_buckets`;
-- sql/analysis_rollup.sql (per GPU-hour) and sql/analysis_demand.sql (fleet demand) read that small table.
-- `gpuaudit sql` exposes the same relation as the view `gpu_buckets`.
--
-- A sample belongs to the bucket (and hour) in which its interval ends (ts is the end; an interval ending
-- exactly on a boundary belongs to the bucket before). Every GPU-second is weighted by gpu_fraction, so a MIG
-- slice counts as its share of a GPU. Where SM activity was not measured (sm_active NULL: sources `nvml` and
-- `prometheus-dcgm-util`), duty_cycle stands in for it: an upper bound, counted in fallback_s, and its part of
-- real_s is kept apart (fallback_real_s) so the analyzer can state the lower bound too.
--
-- De-duplication, per GPU and UTC hour (an hour, not a bucket, so intervals longer than a bucket are handled):
--   1. Precedence between streams: agent GPM (nvml-gpm, simulated) > DCGM import (prometheus-dcgm) > duty
--      cycle (nvml > prometheus-dcgm-util); ties: the first host name. Only the best stream present in the hour
--      counts, so an import over agent data, or one GPU reported under two host names, never adds up.
--   2. Within that stream, rows that overlap in time (a copied file, two agents writing the same GPU) cover
--      more seconds than the hour they span: every sum is divided by
--      overlap = Σ seconds inside the hour ÷ (last end − first start inside the hour)   (>= 1).
--      Exact for copies; for two agents sampling out of phase it is off by at most one interval per hour.
--   overlap_s keeps the GPU-seconds removed by 1 and 2 (reported as data quality).
WITH raw AS (
    SELECT
        host, gpu_uuid, coalesce(mig_instance, -1) AS mig_instance, gpu_name, source,
        CASE source
            WHEN 'nvml-gpm' THEN 1 WHEN 'simulated' THEN 1
            WHEN 'prometheus-dcgm' THEN 2
            WHEN 'nvml' THEN 3
            WHEN 'prometheus-dcgm-util' THEN 4
            ELSE 5
        END AS precedence,
        floor((epoch(ts) - 0.001) / 300) * 300 AS bucket_s,
        floor((epoch(ts) - 0.001) / 3600) * 3600 AS hour_s,
        epoch(ts) AS end_s,
        interval_s,
        gpu_fraction,
        interval_s * gpu_fraction AS gpu_s,
        CASE WHEN n_processes > 0 THEN interval_s * gpu_fraction ELSE 0 END AS held_s,
        duty_cycle,
        sm_active,
        coalesce(sm_active, duty_cycle) AS sm,
        coalesce(energy_j, power_w * interval_s) * gpu_fraction AS energy_j,
        mem_used_bytes,
        mem_total_bytes
    FROM samples
),
per_source AS (
    SELECT
        host, gpu_uuid, mig_instance, bucket_s, hour_s, source, gpu_name, precedence,
        max(gpu_fraction) AS gpu_fraction,
        count(*) AS samples,
        -- seconds of each interval inside its hour, and where the earliest one starts inside the hour
        sum(end_s - greatest(end_s - interval_s, hour_s)) AS covered_s,
        min(greatest(end_s - interval_s, hour_s)) AS first_in_hour_s,
        sum(gpu_s) AS observed_s,
        sum(held_s) AS held_s,
        sum(duty_cycle * gpu_s) AS busy_s,
        sum(sm * gpu_s) AS real_s,
        sum(sm * held_s) AS real_held_s,
        sum(CASE WHEN sm_active IS NULL AND duty_cycle IS NOT NULL THEN gpu_s ELSE 0 END) AS fallback_s,
        sum(CASE WHEN sm_active IS NULL AND duty_cycle IS NOT NULL THEN duty_cycle * gpu_s ELSE 0 END)
            AS fallback_real_s,
        sum(CASE WHEN sm_active IS NULL AND duty_cycle IS NOT NULL THEN duty_cycle * held_s ELSE 0 END)
            AS fallback_real_held_s,
        sum(CASE WHEN sm IS NULL THEN gpu_s ELSE 0 END) AS unmeasured_s,
        sum(CASE WHEN sm < 0.01 THEN held_s ELSE 0 END) AS idle_held_s,
        sum(energy_j) AS energy_j,
        sum(CASE WHEN energy_j IS NOT NULL THEN gpu_s ELSE 0 END) AS energy_s,
        max(mem_used_bytes) AS max_mem_used_bytes,
        max(mem_total_bytes) AS mem_total_bytes,
        min(end_s - interval_s) AS first_s,
        max(end_s) AS last_s,
        max(interval_s) AS max_interval_s
    FROM raw
    GROUP BY host, gpu_uuid, mig_instance, bucket_s, hour_s, source, gpu_name, precedence
),
stream_hours AS (
    -- one row per stream (source and host) per GPU-hour: how much its rows overlap, and all it observed
    SELECT
        gpu_uuid, mig_instance, hour_s, precedence, host, source,
        greatest(1.0, sum(covered_s) / greatest(max(last_s) - min(first_in_hour_s), 0.001)) AS overlap,
        sum(observed_s) AS stream_observed_s
    FROM per_source
    GROUP BY gpu_uuid, mig_instance, hour_s, precedence, host, source
),
winners AS (
    SELECT
        *,
        sum(stream_observed_s) OVER (PARTITION BY gpu_uuid, mig_instance, hour_s) AS hour_observed_s,
        row_number() OVER (PARTITION BY gpu_uuid, mig_instance, hour_s ORDER BY precedence, host, source) AS pick
    FROM stream_hours
),
ranked AS (
    SELECT p.*, w.overlap,
        -- spread what the hour loses (other streams, and the overlap) over the winner's rows
        p.observed_s * w.hour_observed_s / greatest(w.stream_observed_s, 1e-9) - p.observed_s / w.overlap AS removed_s
    FROM per_source AS p
    JOIN winners AS w
        ON w.pick = 1 AND p.gpu_uuid = w.gpu_uuid AND p.mig_instance = w.mig_instance AND p.hour_s = w.hour_s
        AND p.precedence = w.precedence AND p.host = w.host AND p.source = w.source
)
SELECT
    host, gpu_uuid, mig_instance, bucket_s, gpu_name, source, gpu_fraction, samples,
    observed_s / overlap AS observed_s,
    held_s / overlap AS held_s,
    busy_s / overlap AS busy_s,
    real_s / overlap AS real_s,
    real_held_s / overlap AS real_held_s,
    fallback_s / overlap AS fallback_s,
    fallback_real_s / overlap AS fallback_real_s,
    fallback_real_held_s / overlap AS fallback_real_held_s,
    unmeasured_s / overlap AS unmeasured_s,
    idle_held_s / overlap AS idle_held_s,
    energy_j / overlap AS energy_j,
    energy_s / overlap AS energy_s,
    removed_s AS overlap_s,
    max_mem_used_bytes, mem_total_bytes, first_s, last_s, max_interval_s
FROM ranked
