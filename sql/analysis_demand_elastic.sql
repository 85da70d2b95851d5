-- Analyzer stage 1: the part of the fleet demand series (sql/analysis_demand.sql) that comes from the elastic
-- GPUs listed in `elastic_gpus` (sql/analysis_elastic_gpus.sql), one row per 300 s bucket and
-- reported GPU name. Run only when that
-- list is not empty, so a fleet without elastic GPUs pays no join. Elastic GPUs are taken as written once
-- (autoscaled instances each run their own agent); the de-duplication of sql/analysis_demand_dedup.sql is not
-- applied to them.
SELECT
    floor((epoch(s.ts) - 0.001) / 300) * 300 AS bucket_s,
    s.gpu_name,
    sum(s.interval_s * s.gpu_fraction) AS observed_s,
    sum(CASE WHEN s.n_processes > 0 THEN s.interval_s * s.gpu_fraction ELSE 0 END) AS held_s,
    max(s.interval_s) AS max_interval_s
FROM samples AS s
JOIN elastic_gpus AS e
    ON s.gpu_uuid = e.gpu_uuid
    AND coalesce(s.mig_instance, -1) = e.mig_instance
GROUP BY floor((epoch(s.ts) - 0.001) / 300) * 300, s.gpu_name
ORDER BY bucket_s, s.gpu_name
