"""CLI for the report area (filled in by its issue)."""
