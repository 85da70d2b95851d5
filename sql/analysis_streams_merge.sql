-- Analyzer stage 1: `gpu_streams`, what the rollup and the demand series read: the hourly streams
-- (`gpu_streams_hourly`, sql/analysis_streams.sql) except the GPU-hours listed in `refine_hours`
-- (sql/analysis_refine_hours.sql), which come from `gpu_streams_fine` instead: the same query over their
-- samples only, with one-minute slots.
SELECT * FROM gpu_streams_hourly AS h
WHERE NOT EXISTS (
    SELECT 1 FROM refine_hours AS f
    WHERE f.gpu_uuid = h.gpu_uuid AND f.mig_instance = h.mig_instance AND f.hour_s = h.hour_s
)
UNION ALL
SELECT * FROM gpu_streams_fine
