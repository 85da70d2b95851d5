-- Analyzer stage 1: the GPU-hours of `gpu_streams_hourly` (sql/analysis_streams.sql, hourly slots) whose
-- de-duplication needs a finer slot: more than one stream, or rows overlapping within a stream, where some
-- stream covers the hour only in part (it starts or ends more than one sampling interval inside it) or the
-- overlap factor is not a whole number (a copy of part of the hour). A copy of whole hours, or an import
-- under an agent that ran all hour, is exact at the hour and is not listed.
SELECT gpu_uuid, mig_instance, hour_s
FROM gpu_streams_hourly
GROUP BY gpu_uuid, mig_instance, hour_s
HAVING (max(pick) > 1 OR max(overlap) > 1)
    AND max(CASE
        WHEN first_in_slot_s - hour_s > max_interval_s THEN 1
        WHEN hour_s + 3600 - last_s > max_interval_s THEN 1
        WHEN abs(overlap - round(overlap)) > 0.01 THEN 1
        ELSE 0
    END) = 1
