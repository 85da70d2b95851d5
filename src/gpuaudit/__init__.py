"""gpuaudit: measure real GPU utilization and turn it into a cloud / hybrid / on-prem decision.

Importing this package is cheap on purpose: it never imports polars, pynvml or the Prometheus
client (the CLI's --help and the agent's start-up depend on that).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpuaudit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
