"""The aggregator: ingest into live state and the DuckDB history, analysis, alerts and the query API."""

import os

# DuckDB's bundled jemalloc keeps freed pages about 10 s before returning them: at 1024 nodes 150-250 MiB of the
# aggregator's peak RSS (``benchmarks/scale.py``, ``benchmarks/writer.py --memory``). Returned after 50 ms by a
# background thread instead (at once cost the writer about a tenth more CPU); an operator's own setting wins. Read when
# DuckDB loads, hence here: every module of this package that imports DuckDB is imported after this one.
ALLOCATOR_CONF_ENV = "DUCKDB_JE_MALLOC_CONF"
ALLOCATOR_CONF = "background_thread:true,dirty_decay_ms:50,muzzy_decay_ms:0"
os.environ.setdefault(ALLOCATOR_CONF_ENV, ALLOCATOR_CONF)
