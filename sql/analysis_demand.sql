-- Analyzer stage 1: the fleet demand series, one row per 300 s bucket, from the de-duplicated buckets of
-- sql/analysis_buckets.sql (`gpu_buckets`). held_s / 300 = GPUs held by a process on average in the bucket;
-- real_s / 300 = SM-weighted GPUs in use (duty cycle where SM activity was not measured); observed_s / 300 =
-- GPUs reporting (the analyzer scales demand to the whole fleet with it).
SELECT
    bucket_s,
    to_timestamp(bucket_s) AS bucket,  -- readable twin of bucket_s (for `gpuaudit sql`)
    sum(samples) AS samples,
    sum(observed_s) AS observed_s,
    sum(held_s) AS held_s,
    sum(real_s) AS real_s,
    max(max_interval_s) AS max_interval_s
FROM gpu_buckets
GROUP BY bucket_s
ORDER BY bucket_s
