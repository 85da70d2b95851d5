-- Analyzer stage 1: one row per GPU (MIG slice: mig_instance >= 0, whole GPU: -1) per UTC hour, from the
-- de-duplicated 300 s buckets of sql/analysis_buckets.sql (`gpu_buckets`). A bucket belongs to the hour it
-- starts in, so a sample still belongs to the hour in which its interval ends. Idle-held: a process holds
-- the GPU while SM activity < 1 %. source_min/source_max show whether sources were mixed within the hour.
SELECT
    host, gpu_uuid, mig_instance,
    floor(bucket_s / 3600) * 3600 AS hour_s,
    to_timestamp(floor(bucket_s / 3600) * 3600) AS hour,  -- readable twin of hour_s (for `gpuaudit sql`)
    min(gpu_name) AS gpu_name,
    min(source) AS source_min,
    max(source) AS source_max,
    max(gpu_fraction) AS gpu_fraction,
    sum(samples) AS samples,
    sum(observed_s) AS observed_s,
    sum(held_s) AS held_s,
    sum(busy_s) AS busy_s,
    sum(real_s) AS real_s,
    sum(real_held_s) AS real_held_s,
    sum(fallback_s) AS fallback_s,
    sum(fallback_real_s) AS fallback_real_s,
    sum(fallback_real_held_s) AS fallback_real_held_s,
    sum(unmeasured_s) AS unmeasured_s,
    sum(idle_held_s) AS idle_held_s,
    sum(energy_j) AS energy_j,
    sum(energy_s) AS energy_s,
    sum(overlap_s) AS overlap_s,
    max(max_mem_used_bytes) AS max_mem_used_bytes,
    max(mem_total_bytes) AS mem_total_bytes,
    min(first_s) AS first_s,
    max(last_s) AS last_s,
    max(max_interval_s) AS max_interval_s
FROM gpu_buckets
GROUP BY host, gpu_uuid, mig_instance, floor(bucket_s / 3600) * 3600
