-- Analyzer stage 1: the fleet demand series when the data holds duplicates (some GPU-hour of `gpu_streams` has
-- pick > 1 or overlap > 1; otherwise sql/analysis_demand.sql gives the same without the join). One row per
-- 300 s bucket and reported GPU name (the bucket in which a sampled interval ends). Only the samples of each GPU-slot's winning
-- stream count, each weighted by 1 / its overlap (see sql/analysis_streams.sql: de-duplicated as the rollup is). held_s / 300 = GPUs held by a process on average in
-- the bucket; real_s / 300 = SM-weighted GPUs in use (duty cycle where SM activity was not measured);
-- observed_s / 300 = GPUs reporting (the analyzer scales demand to the whole fleet with it).
WITH weighted AS (
    SELECT
        floor((epoch(s.ts) - 0.001) / 300) * 300 AS bucket_s,
        s.interval_s * s.gpu_fraction / w.overlap AS gpu_s,
        CASE WHEN s.n_processes > 0 THEN s.interval_s * s.gpu_fraction / w.overlap ELSE 0 END AS held_s,
        coalesce(s.sm_active, s.gr_engine_active, s.duty_cycle) * s.interval_s * s.gpu_fraction / w.overlap AS real_s,
        s.interval_s,
        s.gpu_name
    FROM samples AS s
    JOIN gpu_streams AS w
        ON w.pick = 1
        AND s.gpu_uuid = w.gpu_uuid
        AND coalesce(s.mig_instance, -1) = w.mig_instance
        AND floor((epoch(s.ts) - 0.001) / 3600) * 3600 = w.hour_s
        AND floor((epoch(s.ts) - 0.001) / w.slot_len_s) * w.slot_len_s = w.slot_s
        AND s.host = w.host
        AND s.source = w.source
)
SELECT
    bucket_s,
    to_timestamp(bucket_s) AS bucket,  -- readable twin of bucket_s (for `gpuaudit sql`)
    gpu_name,
    count(*) AS samples,
    sum(gpu_s) AS observed_s,
    sum(held_s) AS held_s,
    sum(real_s) AS real_s,
    max(interval_s) AS max_interval_s
FROM weighted
GROUP BY bucket_s, gpu_name
ORDER BY bucket_s, gpu_name
