"""CLI for the analyze area (filled in by its issue)."""
