-- Analyzer stage 1, the big scan of `samples`: one row per GPU (MIG slice: mig_instance >= 0, whole GPU: -1)
-- per UTC hour per STREAM (a source on a host), with what de-duplication needs. The analyzer materializes it
-- once as `gpu_streams` (GPU-hours × streams: small); sql/analysis_rollup.sql keeps each slot's winning
-- stream, sql/analysis_demand.sql weights the samples of the winners. `gpuaudit sql` shows it as a view.
--
-- A sample belongs to the hour in which its interval ends (ts is the end; an interval ending exactly on the
-- hour belongs to the hour before). Every GPU-second is weighted by gpu_fraction, so a MIG slice counts as its
-- share of a GPU. Where SM activity was not measured (sm_active NULL: sources `nvml`, `prometheus-*-util` and
-- `prometheus-*-engine`), engine-active (gr_engine_active: any SM had work, a tighter bound), else duty_cycle
-- stands in for it: an upper bound, counted in fallback_s, and its part of real_s kept apart (fallback_real_s)
-- so the analyzer can state the lower bound too. Idle-held: a process holds the GPU while SM activity < 1 %.
-- Energy: a MIG instance's row holds its share of the GPU's (schema.py), so it is not weighted again.
--
-- De-duplication, per GPU and SLOT (here the hour: slot_s = hour_s, slot_len_s = 3600):
--   1. Precedence between streams: agent GPM (nvml-gpm, simulated) > imported SM activity (prometheus-<exporter>)
--      > imported engine-active (prometheus-<exporter>-engine) > duty cycle (nvml > prometheus-<exporter>-util);
--      ties: the first host name. Only the best stream present in the slot
--      counts (pick = 1), so an import over agent data, or one GPU reported under two host names, never adds up.
--   2. Within a stream, rows that overlap in time (a copied file, two agents writing the same GPU) cover more
--      seconds than the slot they span: its sums are divided by
--      overlap = Σ seconds inside the slot ÷ (last end − first start inside the slot)   (>= 1).
--      Exact for copies of whole slots; for two agents sampling out of phase it is off by at most one interval.
--   slot_observed_s (every stream of the GPU-slot) lets the rollup report what de-duplication removed.
-- Where streams cover an hour only in part (an agent started mid-hour over an import; a copy of part of a
-- file), one pick or one factor for the whole hour would be wrong: sql/analysis_refine_hours.sql lists those
-- GPU-hours, and the analyzer runs this same query again over their samples only, with one-minute slots
-- (gpuaudit/analysis/rollup.py: `streams_sql`), replacing their hour rows. The marked lines below are what
-- it changes.
WITH raw AS (
    SELECT
        host, gpu_uuid, coalesce(mig_instance, -1) AS mig_instance, gpu_name, source,
        CASE
            WHEN source IN ('nvml-gpm', 'simulated') THEN 1
            WHEN source = 'nvml' THEN 4
            WHEN source LIKE 'prometheus-%-util' THEN 5
            WHEN source LIKE 'prometheus-%-engine' THEN 3
            WHEN source LIKE 'prometheus-%' THEN 2
            ELSE 6
        END AS precedence,
        floor((epoch(ts) - 0.001) / 3600) * 3600 AS hour_s,
        floor((epoch(ts) - 0.001) / 3600) * 3600 AS slot_s,  -- slot
        3600 AS slot_len_s,  -- slot
        epoch(ts) AS end_s,
        interval_s,
        gpu_fraction,
        interval_s * gpu_fraction AS gpu_s,
        CASE WHEN n_processes > 0 THEN interval_s * gpu_fraction ELSE 0 END AS held_s,
        duty_cycle,
        sm_active,
        coalesce(sm_active, gr_engine_active, duty_cycle) AS sm,
        coalesce(energy_j, power_w * interval_s) AS energy_j,
        energy_j IS NULL AND power_w IS NOT NULL AS energy_estimated,  -- no energy counter: power x time
        mem_used_bytes,
        mem_total_bytes
    FROM samples  -- rows
),
streams AS (
    SELECT
        -- One stream whatever the name says: a sample without it (an import lacking the info series) beside
        -- named ones would make a second winning row, each counting the other's seconds as removed.
        host, gpu_uuid, mig_instance, hour_s, slot_s, slot_len_s, source, min(gpu_name) AS gpu_name, precedence,
        max(gpu_fraction) AS gpu_fraction,
        count(*) AS samples,
        -- seconds of each interval inside its slot, and where the earliest one starts inside the slot
        sum(end_s - greatest(end_s - interval_s, slot_s)) AS covered_s,
        min(greatest(end_s - interval_s, slot_s)) AS first_in_slot_s,
        sum(gpu_s) AS observed_s,
        sum(held_s) AS held_s,
        sum(duty_cycle * gpu_s) AS busy_s,
        sum(sm * gpu_s) AS real_s,
        sum(sm * held_s) AS real_held_s,
        sum(CASE WHEN sm_active IS NULL AND sm IS NOT NULL THEN gpu_s ELSE 0 END) AS fallback_s,
        sum(CASE WHEN sm_active IS NULL AND sm IS NOT NULL THEN sm * gpu_s ELSE 0 END) AS fallback_real_s,
        sum(CASE WHEN sm < 0.01 THEN held_s ELSE 0 END) AS idle_held_s,
        sum(CASE WHEN sm IS NULL THEN gpu_s ELSE 0 END) AS unmeasured_s,
        sum(energy_j) AS energy_j,
        sum(CASE WHEN energy_j IS NOT NULL THEN gpu_s ELSE 0 END) AS energy_s,
        sum(CASE WHEN energy_estimated THEN gpu_s ELSE 0 END) AS energy_estimated_s,
        max(mem_used_bytes) AS max_mem_used_bytes,
        max(mem_total_bytes) AS mem_total_bytes,
        min(end_s - interval_s) AS first_s,
        max(end_s) AS last_s,
        max(interval_s) AS max_interval_s
    FROM raw
    -- precedence follows from source; grouping by it is cheaper than aggregating it
    GROUP BY host, gpu_uuid, mig_instance, hour_s, slot_s, slot_len_s, source, precedence
)
SELECT
    *,
    greatest(1.0, sum(covered_s) OVER stream
        / greatest(max(last_s) OVER stream - min(first_in_slot_s) OVER stream, 0.001)) AS overlap,
    sum(observed_s) OVER gpu_slot AS slot_observed_s,
    dense_rank() OVER (PARTITION BY gpu_uuid, mig_instance, slot_s ORDER BY precedence, host, source) AS pick
FROM streams
WINDOW
    stream AS (PARTITION BY gpu_uuid, mig_instance, slot_s, precedence, host, source),
    gpu_slot AS (PARTITION BY gpu_uuid, mig_instance, slot_s)
