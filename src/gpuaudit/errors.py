"""The one exception type the CLI turns into a one-line error and a non-zero exit."""


class GpuauditError(Exception):
    """A user-facing error: bad input, missing data, unreachable server. The message is the whole story."""

    exit_code = 2


class NoDataError(GpuauditError):
    """The dataset is empty or too short to say anything."""
