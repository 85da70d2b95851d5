"""Import utilization history from a Prometheus-compatible server (dcgm-exporter and others).

Importing this package is cheap: the Prometheus client, polars and requests are imported by the
modules that use them (`gpuaudit.importer.prometheus`, `gpuaudit.importer.promclient`).
"""
