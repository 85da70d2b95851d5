"""CLI for the store: sql, compact."""
