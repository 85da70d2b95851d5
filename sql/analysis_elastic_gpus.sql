-- Analyzer stage 1: the GPUs (MIG slices) that report only while a process holds them: held in at least 99 %
-- of their observed time, and absent from more than 5 % of the trial. Autoscaled cloud instances (and their
-- agents) exist only while a job holds them, often with a new UUID per launch: their absent time is not a
-- coverage gap but capacity that did not exist. The analyzer treats them as elastic when the fleet runs in the
-- cloud (--current cloud): their demand is not scaled to the fleet, and the fleet counts their peak of
-- concurrent GPUs, not their distinct UUIDs. Read from `gpu_streams` (small): no scan of `samples`.
WITH per_gpu AS (
    SELECT
        gpu_uuid,
        mig_instance,
        sum(observed_s / overlap) AS observed_s,
        sum(held_s / overlap) AS held_s,
        max(gpu_fraction) AS gpu_fraction
    FROM gpu_streams
    WHERE pick = 1
    GROUP BY gpu_uuid, mig_instance
),
span AS (
    SELECT max(last_s) - min(first_s) AS span_s FROM gpu_streams
)
SELECT per_gpu.gpu_uuid, per_gpu.mig_instance, per_gpu.gpu_fraction, per_gpu.observed_s
FROM per_gpu CROSS JOIN span
WHERE per_gpu.observed_s > 0
    AND per_gpu.held_s >= 0.99 * per_gpu.observed_s
    AND per_gpu.observed_s / per_gpu.gpu_fraction < 0.95 * span.span_s
