-- Analyzer stage 1: who held each GPU, per GPU (MIG slice: mig_instance >= 0, whole GPU: -1) per UTC
-- hour, from `processes`. A holder is a (user, job, pod, pod UID); process_samples counts its process rows in
-- that hour. The analyzer splits each GPU-hour's held time (from analysis_rollup.sql, same hour rule:
-- the hour in which the sampled interval ends) between its holders in proportion to process_samples —
-- one plain GROUP BY, no window, so it stays one cheap pass over a large table.
SELECT
    host,
    gpu_uuid,
    coalesce(mig_instance, -1) AS mig_instance,
    floor((epoch(ts) - 0.001) / 3600) * 3600 AS hour_s,
    coalesce("user", '(unknown)') AS "user",
    coalesce(job_id, '') AS job_id,
    coalesce(k8s_namespace, '') AS k8s_namespace,
    coalesce(k8s_pod, '') AS k8s_pod,
    coalesce(pod_uid, '') AS pod_uid,  -- a dataset written before the column reads it as NULL
    count(*) AS process_samples,
    to_timestamp(hour_s) AS hour  -- readable twin of hour_s (for `gpuaudit sql`)
FROM processes
GROUP BY host, gpu_uuid, mig_instance, hour_s, "user", job_id, k8s_namespace, k8s_pod, pod_uid
