-- Fleet summary: one row for the whole dataset.
-- GPU-hours are weighted by gpu_fraction (a MIG slice is a fraction of a GPU).
-- real_util uses SM activity where measured, engine-active or duty cycle elsewhere (upper bounds; see
-- sm_measured_share). energy_j: a MIG instance's row holds its share of the GPU's, so the sum counts a GPU once.
SELECT
    COUNT(DISTINCT host)                                                        AS hosts,
    COUNT(DISTINCT gpu_uuid)                                                    AS gpus,
    MIN(ts)                                                                     AS first_ts,
    MAX(ts)                                                                     AS last_ts,
    SUM(interval_s * gpu_fraction) / 3600.0                                     AS observed_gpu_hours,
    SUM(CASE WHEN n_processes > 0 THEN interval_s * gpu_fraction ELSE 0 END)
        / NULLIF(SUM(interval_s * gpu_fraction), 0)                             AS runtime_util,
    SUM(COALESCE(sm_active, gr_engine_active, duty_cycle, 0) * interval_s * gpu_fraction)
        / NULLIF(SUM(interval_s * gpu_fraction), 0)                             AS real_util,
    SUM(COALESCE(duty_cycle, 0) * interval_s * gpu_fraction)
        / NULLIF(SUM(interval_s * gpu_fraction), 0)                             AS duty_cycle_util,
    SUM(CASE WHEN sm_active IS NOT NULL THEN interval_s * gpu_fraction ELSE 0 END)
        / NULLIF(SUM(interval_s * gpu_fraction), 0)                             AS sm_measured_share,
    SUM(power_w * interval_s) / NULLIF(SUM(CASE WHEN power_w IS NOT NULL THEN interval_s END), 0)
                                                                                AS avg_power_w,
    SUM(energy_j) / 3.6e6                                                       AS energy_kwh,
    COUNT(*)                                                                    AS sample_rows
FROM samples;
