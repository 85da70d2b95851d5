-- Analyzer stage 1: the fleet demand series, one row per 300 s bucket (the bucket in which a sampled interval
-- ends), for data without duplicates (every GPU-hour of `gpu_streams` has one stream, overlap 1; otherwise
-- sql/analysis_demand_dedup.sql weights the samples as the rollup does). held_s / 300 = GPUs held by a process
-- on average in the bucket; real_s / 300 = SM-weighted GPUs in use (engine-active, else duty cycle, where SM
-- activity was not measured); observed_s / 300 = GPUs reporting (the analyzer scales demand to the whole fleet with it).
-- One row per bucket and reported GPU name: the analyzer prices each GPU model's demand at its own prices.
SELECT
    floor((epoch(ts) - 0.001) / 300) * 300 AS bucket_s,
    to_timestamp(floor((epoch(ts) - 0.001) / 300) * 300) AS bucket,  -- readable twin of bucket_s
    gpu_name,
    count(*) AS samples,
    sum(interval_s * gpu_fraction) AS observed_s,
    sum(CASE WHEN n_processes > 0 THEN interval_s * gpu_fraction ELSE 0 END) AS held_s,
    sum(coalesce(sm_active, gr_engine_active, duty_cycle) * interval_s * gpu_fraction) AS real_s,
    max(interval_s) AS max_interval_s
FROM samples
GROUP BY floor((epoch(ts) - 0.001) / 300) * 300, gpu_name
ORDER BY bucket_s, gpu_name
