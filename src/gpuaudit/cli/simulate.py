"""CLI for the simulate area (filled in by its issue)."""
