"""CLI for the agent area (filled in by its issue)."""
