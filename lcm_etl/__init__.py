import os

__version__ = "0.1.0"

# DuckDB's bundled jemalloc keeps freed pages for 10 s by default; a migration's peak memory is then
# the sum of every plan step's working set rather than the largest one (measured on the 2M-message
# source: 237 MB → 194 MB peak for a dry run). Return them at once. Set before any module imports
# duckdb (jemalloc reads it when the library loads); a user's own setting wins.
os.environ.setdefault("DUCKDB_JE_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
