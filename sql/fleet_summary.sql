-- Fleet summary: one row for the whole dataset, from the de-duplicated GPU-hours `gpu_hours`.
-- `gpu_hours` is stage 1's rollup (sql/analysis_rollup.sql): what `gpuaudit analyze` counts, so an import over
-- agent data, a copied file or one GPU under two host names is counted once here as there.
-- GPU-seconds are weighted by gpu_fraction (a MIG slice is a fraction of a GPU).
-- real_util uses SM activity where measured, engine-active or duty cycle elsewhere (upper bounds; see
-- sm_measured_share). energy_j: a MIG instance's rows hold its share of the GPU's: the sum counts a GPU once.
-- first_ts / last_ts: the start of the first sample's interval and the end of the last one.
SELECT
    COUNT(DISTINCT host)                                                        AS hosts,
    COUNT(DISTINCT gpu_uuid)                                                    AS gpus,
    to_timestamp(MIN(first_s))                                                  AS first_ts,
    to_timestamp(MAX(last_s))                                                   AS last_ts,
    SUM(observed_s) / 3600.0                                                    AS observed_gpu_hours,
    SUM(held_s) / NULLIF(SUM(observed_s), 0)                                    AS runtime_util,
    SUM(real_s) / NULLIF(SUM(observed_s), 0)                                    AS real_util,
    SUM(busy_s) / NULLIF(SUM(observed_s), 0)                                    AS duty_cycle_util,
    1 - SUM(fallback_s + unmeasured_s) / NULLIF(SUM(observed_s), 0)             AS sm_measured_share,
    SUM(energy_j) / NULLIF(SUM(energy_s), 0)                                    AS avg_power_w,
    SUM(energy_j) / 3.6e6                                                       AS energy_kwh,
    CAST(SUM(samples) AS BIGINT)                                                AS sample_rows
FROM gpu_hours;
