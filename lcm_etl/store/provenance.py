"""Provenance: every row a run writes into the target is attributable to that run, so `undo` can take it out.

Two records, both written in the same transaction as the rows they describe (a run killed between batches
leaves committed batches that are attributable too):

- `lcm_etl_run_ranges (run_id, tbl, lo, hi)` for the AUTOINCREMENT tables (lcm_messages, lcm_message_parts,
  lcm_compaction_events), one row per table and batch: a batch holds the write lock, so every row with an id
  above the table's high-water mark before the batch was inserted by it (70_assign_turns.sql numbers
  messages from there too), and AUTOINCREMENT never hands out an id twice. `lo` is the high-water mark + 1
  (max of sqlite_sequence and max(id)), so an undo of the latest run can put the sequence back. A range per
  batch instead of a row per row: recording 200k messages costs three max() lookups per batch.
- `lcm_etl_run_rows (run_id, tbl, key, before)` for the tables keyed by text or by several columns
  (summaries and lcm-etl's own provenance tables) and for the rows a run changes in place (sync:
  87_apply_changes.sql's message metadata, summary text and parent; 89's moved boundary; 95's replaced
  conversations): key is the JSON array of the row's primary key, before is NULL for a row the run inserted,
  else the row as it was before the run first changed it (a JSON array of SQL literals, `quote()`, so any value
  round-trips).
  TEMP triggers on the writer's own connection fill it, so every write step is covered without each step
  knowing, and a live Remnic's writes (other connections) are never attributed to the run. A REPLACE or
  UPDATE that leaves a row as it was records nothing: the row stays the earlier writer's.

A new target is one run: at its end every row it holds is recorded as inserted (`record_whole`), and it
has no triggers (they would also stop SQLite's page-copy of 82_copy_scratch.sql).
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3

from lcm_etl.store.target import REMNIC_TABLES

RANGED = tuple(t.name for t in REMNIC_TABLES if t.ranged)
# table -> what the triggers record: inserts (with the before-image of a replaced row) and/or updates
KEYED = {"lcm_summary_nodes": ("insert", "update"), "lcm_messages": ("update",), "lcm_compaction_events": ("update",),
         "lcm_etl_summaries": ("insert", "update"), "lcm_etl_summary_edges": ("insert", "update"),
         "lcm_etl_conversations": ("insert", "update"), "lcm_etl_large_files": ("insert", "update"),
         "lcm_etl_skipped": ("insert", "update")}


def columns(con: sqlite3.Connection, table: str) -> tuple[list[str], list[str]]:
    """(every column, the primary key's columns in key order); rowid tables without one are keyed by id."""
    info = con.execute(f"PRAGMA main.table_info({table})").fetchall()
    cols = [r[1] for r in info]
    pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
    return cols, pk


def key_sql(alias: str, pk: list[str]) -> str:
    return f"json_array({', '.join(f'{alias}.{c}' for c in pk)})"


def image_sql(alias: str, cols: list[str]) -> str:
    return f"json_array({', '.join(f'quote({alias}.{c})' for c in cols)})"


def install_triggers(con: sqlite3.Connection, run_id: str) -> None:
    """TEMP triggers on this connection that record the run's keyed rows and before-images. (SQLite allows
    no schema name on a trigger's INSERT target; the run's stage and snapshot hold no lcm_etl_run_rows.)"""
    assert run_id.isalnum()   # it is written into the triggers' SQL (a uuid4 hex)
    for table, ops in KEYED.items():
        cols, pk = columns(con, table)
        same_key = " AND ".join(f"o.{c} = NEW.{c}" for c in pk)
        if "insert" in ops:
            # before the insert: the row it replaces (if any, and if it differs), else NULL (a new row)
            con.execute(f"""
CREATE TEMP TRIGGER IF NOT EXISTS lcm_etl_prov_{table}_ins BEFORE INSERT ON main.{table} BEGIN
  INSERT OR IGNORE INTO lcm_etl_run_rows (run_id, tbl, key, before)
  SELECT '{run_id}', '{table}', {key_sql('NEW', pk)},
         (SELECT {image_sql('o', cols)} FROM main.{table} o WHERE {same_key})
  WHERE NOT EXISTS (SELECT 1 FROM main.{table} o WHERE {same_key}
                    AND {image_sql('o', cols)} = {image_sql('NEW', cols)});
END""")
        if "update" in ops:
            con.execute(f"""
CREATE TEMP TRIGGER IF NOT EXISTS lcm_etl_prov_{table}_upd BEFORE UPDATE ON main.{table}
WHEN {image_sql('OLD', cols)} IS NOT {image_sql('NEW', cols)} BEGIN
  INSERT OR IGNORE INTO lcm_etl_run_rows (run_id, tbl, key, before)
  VALUES ('{run_id}', '{table}', {key_sql('OLD', pk)}, {image_sql('OLD', cols)});
END""")


def high_water(con: sqlite3.Connection) -> dict[str, int]:
    """Per AUTOINCREMENT table, the highest id ever handed out (the next insert gets a larger one)."""
    return {t: con.execute(f"SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{t}'), 0), "
                           f"coalesce((SELECT max(id) FROM main.{t}), 0))").fetchone()[0] for t in RANGED}


def record_ranges(con: sqlite3.Connection, run_id: str, before: dict[str, int]) -> None:
    """After a batch's inserts (same transaction): the ids above `before` are the batch's."""
    for table, mark in before.items():
        top = con.execute(f"SELECT coalesce(max(id), 0) FROM main.{table}").fetchone()[0]
        if top > mark:
            con.execute("INSERT INTO lcm_etl_run_ranges (run_id, tbl, lo, hi) VALUES (?, ?, ?, ?)",
                        (run_id, table, mark + 1, top))


def record_whole(con: sqlite3.Connection, run_id: str) -> None:
    """A new target's run wrote every row it holds (its ranges start at 1: undone, the sequence restarts)."""
    record_ranges(con, run_id, dict.fromkeys(RANGED, 0))
    for table, ops in KEYED.items():
        if "insert" in ops:
            _, pk = columns(con, table)
            con.execute(f"INSERT OR IGNORE INTO lcm_etl_run_rows (run_id, tbl, key, before) "
                        f"SELECT ?, ?, {key_sql('t', pk)}, NULL FROM main.{table} t", (run_id, table))


def committed(con: sqlite3.Connection, run_id: str) -> dict[str, int]:
    """What the run's committed batches hold in the target now, by kind (the names undo reports): a run that
    did not complete has no counts of its own beyond those it could still write, and a killed one none."""
    out = {}
    for table, kind in ((t.name, t.rows) for t in REMNIC_TABLES if t.ranged):
        out[kind] = con.execute(f"SELECT coalesce(sum((SELECT count(*) FROM main.{table} t WHERE t.id BETWEEN r.lo AND r.hi)), 0) "
                                "FROM lcm_etl_run_ranges r WHERE r.run_id = ? AND r.tbl = ?", (run_id, table)).fetchone()[0]
    out["summaries"] = con.execute(
        "SELECT count(*) FROM lcm_etl_run_rows w JOIN main.lcm_summary_nodes n ON n.id = json_extract(w.key, '$[0]') "
        "WHERE w.run_id = ? AND w.tbl = 'lcm_summary_nodes' AND w.before IS NULL", (run_id,)).fetchone()[0]
    out["changed"] = con.execute("SELECT count(*) FROM lcm_etl_run_rows WHERE run_id = ? AND before IS NOT NULL "
                                 "AND tbl IN ('lcm_messages', 'lcm_summary_nodes')", (run_id,)).fetchone()[0]
    return out
