"""The dataset on disk: Hive-partitioned Parquet under one root directory, read through DuckDB.

One module per seam: `base` (root, layout, DuckDB session), `writer` (atomic writes), `journal` (the compaction
record and the superseded rule), `reader` (the `Dataset` and its views), `compact`, `transaction` (an import's
all-or-nothing replacement of a source's rows in a window), `conformance` (the reader's
side of the contract), `remote` (s3:// datasets) and `sqlquery` (`gpuaudit sql`). This package re-exports the
public API, so callers write `store.open_dataset(...)`.
"""

from gpuaudit.store.base import (
    DEFAULT_DATA,
    PUSH_TARGET,
    STAGING,
    connect,
    data_root,
    dataset_exists,
    local_root,
    partition_dir,
)
from gpuaudit.store.compact import COMPACT_LOCK, CompactStats, compact, compaction_lock, finish_journals
from gpuaudit.store.journal import (
    JOURNAL_PREFIX,
    acting_records,
    has_supersedable,
    hidden_names,
    in_cycles,
    is_record_name,
    load_journal,
    superseded,
)
from gpuaudit.store.reader import Dataset, find_damaged, open_dataset, parquet_problem, table_files
from gpuaudit.store.writer import read_json, write_json, write_table

__all__ = [
    "COMPACT_LOCK", "DEFAULT_DATA", "JOURNAL_PREFIX", "PUSH_TARGET", "STAGING", "CompactStats", "Dataset",
    "acting_records", "compact", "compaction_lock", "connect", "data_root", "dataset_exists", "find_damaged",
    "finish_journals", "has_supersedable", "hidden_names", "in_cycles", "is_record_name", "load_journal",
    "local_root", "open_dataset", "parquet_problem", "partition_dir", "read_json", "superseded", "table_files",
    "write_json", "write_table",
]
