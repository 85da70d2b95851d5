"""Stage 1 of the analysis: one SQL rollup pass over the dataset (DuckDB, or Spark via sqlglot)."""
