"""CLI for the importer area (filled in by its issue)."""
