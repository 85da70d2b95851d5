-- Analyzer stage 1: the scheduler's allocations (`allocations`: Slurm jobs, Kubernetes pods), one row per job
-- per host, with times as epoch seconds. A small table (jobs, not samples): the analyzer splits it into
-- GPU-hours and maps it onto the GPUs (gpuaudit/analysis/ledger.py).
SELECT
    source, job_id, job_id_raw, "user", account, "partition", namespace, host, gpus, gpu_type, mig_profile,
    gpu_model,  -- the catalogue key of its GPUs (NULL in a dataset written before the column, or unknown)
    epoch(start_ts) AS start_s,
    epoch(end_ts) AS end_s,
    state
FROM allocations
