-- Analyzer stage 1: one row per GPU (MIG slice: mig_instance >= 0, whole GPU: -1) per UTC hour (and host): the
-- winning stream of each slot of `gpu_streams` (sql/analysis_streams.sql), its sums divided by its overlap.
-- overlap_s: the GPU-seconds de-duplication removed (other streams, and the winner's own overlap).
SELECT
    host, gpu_uuid, mig_instance, hour_s,
    to_timestamp(hour_s) AS hour,  -- readable twin of hour_s (for `gpuaudit sql`)
    min(gpu_name) AS gpu_name,
    min(source) AS source_min,
    max(source) AS source_max,
    max(gpu_fraction) AS gpu_fraction,
    sum(samples) AS samples,
    sum(observed_s / overlap) AS observed_s,
    sum(held_s / overlap) AS held_s,
    sum(busy_s / overlap) AS busy_s,
    sum(real_s / overlap) AS real_s,
    sum(real_held_s / overlap) AS real_held_s,
    sum(fallback_s / overlap) AS fallback_s,
    sum(fallback_real_s / overlap) AS fallback_real_s,
    sum(unmeasured_s / overlap) AS unmeasured_s,
    sum(idle_held_s / overlap) AS idle_held_s,
    sum(energy_j / overlap) AS energy_j,
    sum(energy_s / overlap) AS energy_s,
    sum(energy_estimated_s / overlap) AS energy_estimated_s,
    sum(slot_observed_s - observed_s / overlap) AS overlap_s,
    max(max_mem_used_bytes) AS max_mem_used_bytes,
    max(mem_total_bytes) AS mem_total_bytes,
    min(first_s) AS first_s,
    max(last_s) AS last_s,
    max(max_interval_s) AS max_interval_s
FROM gpu_streams
WHERE pick = 1
GROUP BY host, gpu_uuid, mig_instance, hour_s
