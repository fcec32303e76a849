"""The rows a sync re-run plans, copied out of the source and the target into small SQLite files.

DuckDB's sqlite_scanner reads a table whole: a filter on a column is applied after the scan. Narrowing the
plan to a few sessions by filtering the attached 200k-message source and target costs as much as reading
them. SQLite finds the same rows through its indexes in milliseconds, so a re-run copies them into files
with the same tables (the same CREATE statements, so the scanner sees the same types) and attaches those
in place of the whole files; the plan's SQL does not change.
"""
from __future__ import annotations

from contextlib import closing
from pathlib import Path

from lcm_etl import sqlite_runtime
from lcm_etl.read.lcmdb.source_tables import SOURCE_TABLES

def source_subset(snapshot: Path, out: Path, conversations: list[str]) -> Path:
    """The scope's conversations and every row of theirs the plan reads. Keys arrive as text
    (CAST(conversation_id AS VARCHAR)); integer ids are compared as integers so the index is used."""
    keys = [(int(k),) if k.lstrip("-").isdigit() else (k,) for k in conversations]
    rows = [(t.name, t.scope_rows) for t in SOURCE_TABLES]   # the tables the plan reads, in their order
    return _copy(snapshot, out, rows, "CREATE TEMP TABLE scope (conv PRIMARY KEY)", keys)


def target_subset(target: Path, out: Path, sessions: list[str], tables: list[tuple[str, str]], index: str = "") -> Path:
    """The scope's sessions as the target holds them: `tables` (target.REMNIC_TABLES), each with which of its
    rows belong to the sessions, and their indexes, and `index`: built while the copy's pages are in the cache (a
    query's second read of the rows, from the file, would cost as much as the copy)."""
    return _copy(target, out, tables, "CREATE TEMP TABLE scope (session_id TEXT PRIMARY KEY)",
                 [(s,) for s in sessions], index)


def _copy(db: Path, out: Path, tables, scope_ddl: str, keys: list[tuple], index: str = "") -> Path:
    out.unlink(missing_ok=True)
    with closing(sqlite_runtime.connect(out, "", isolation_level=None)) as con:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("ATTACH ? AS whole", (sqlite_runtime.uri(db),))
        con.execute(scope_ddl)
        con.executemany("INSERT OR IGNORE INTO temp.scope VALUES (?)", keys)
        ddl = dict(con.execute("SELECT name, sql FROM whole.sqlite_master WHERE type = 'table'").fetchall())
        con.execute("BEGIN")
        for table, rows in tables:
            if table in ddl:
                con.execute(ddl[table])
                con.execute(f'INSERT INTO main."{table}" SELECT * FROM whole."{table}" WHERE {rows}')
        if index:   # and the tables' own: a scan of indexed columns reads the index (r05's tgt_max_turn), not the rows
            for (sql,) in con.execute("SELECT sql FROM whole.sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                                      "AND tbl_name IN (SELECT name FROM main.sqlite_master)").fetchall() + [(index,)]:
                con.execute(sql)
        con.execute("COMMIT")
    return out
