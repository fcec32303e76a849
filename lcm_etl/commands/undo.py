"""`undo RUN_ID`: take out exactly what one run wrote, from what the run recorded (lcm_etl/store/provenance.py).

In one write transaction, under the run lock: the run's messages (with their FTS rows and parts), parts,
boundary events and summaries (with their FTS rows) and the lcm_etl_* rows it inserted are deleted; rows it
changed in place get their before-images back (a summary's text with its FTS row, its parent, a message's
metadata, a replaced conversation); AUTOINCREMENT sequences go back when nothing was inserted after the run,
so undo then re-run gives the same ids. The run's status becomes `undone` and the undo is a ledger row.

It refuses (exit 2, nothing changed) when rows written after the run depend on the run's rows:
- a later lcm-etl run changed or extended them (its before-images would then lie): undo that run first;
- Remnic wrote a summary covering the run's turns, a summary whose parent is one of the run's summaries, or
  messages after the run's turns in a session: `--force` removes the run's rows anyway and leaves those
  (a summary whose parent goes becomes a root). Foreign keys are off during the transaction (Remnic has no
  index on parent_id: each summary delete would scan the table) and checked once before the commit.

`--dry-run` does all of this on a private copy of the target and reports it.
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from lcm_etl.store import ledger, target as tgt
from lcm_etl.errors import BadInput, RunFailed
from lcm_etl.store.provenance import KEYED, RANGED, columns
from lcm_etl.report import SCHEMA_VERSION, one_line_each
from lcm_etl.store.runlock import target_lock
from lcm_etl.read.snapshot.sqlite_copy import take_snapshot

ROW_NAMES = {t.name: t.rows for t in tgt.REMNIC_TABLES}


@dataclass
class UndoOptions:
    target: Path
    run_id: str
    force: bool = False
    dry_run: bool = False
    lock_timeout: float = 10.0


@dataclass
class UndoReport:
    target: str
    run_id: str
    dry_run: bool
    command: str = ""            # of the undone run
    status: str = ""             # of the undone run, before the undo
    removed: dict[str, int] = field(default_factory=dict)    # what goes, by kind
    restored: dict[str, int] = field(default_factory=dict)   # rows given their before-run values back
    left: list[str] = field(default_factory=list)            # --force: what stays, and why that is safe
    undo_run_id: str | None = None
    elapsed_s: float = 0.0

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, **asdict(self), "elapsed_s": round(self.elapsed_s, 3)}

    def as_text(self) -> str:
        head = "DRY RUN - nothing was changed; undo would do this:" if self.dry_run else "Done."
        lines = [f"lcm-etl undo: {head}", f"  target:  {self.target}",
                 f"  run:     {self.run_id} ({self.command}, {self.status})"]
        verb = "would remove" if self.dry_run else "removed"
        lines.append(f"  {verb}: " + (", ".join(f"{k} {n}" for k, n in self.removed.items() if n) or "nothing"))
        if any(self.restored.values()):
            verb = "would restore" if self.dry_run else "restored"
            lines.append(f"  {verb} as before the run: "
                         + ", ".join(f"{k} {n}" for k, n in self.restored.items() if n))
        lines += [f"  left: {why}" for why in self.left]
        lines.append(f"  elapsed {self.elapsed_s:.2f} s" + (f"   undo run {self.undo_run_id}" if self.undo_run_id else ""))
        return one_line_each(lines)


def undo(opts: UndoOptions, now) -> UndoReport:
    t0 = time.monotonic()
    if not tgt.check_target(opts.target, open_it=not opts.dry_run):
        raise BadInput(f"no target at {opts.target}: nothing to undo")
    report = UndoReport(target=str(opts.target), run_id=opts.run_id, dry_run=opts.dry_run)
    if opts.dry_run:   # the whole undo, on a private copy (even opening a WAL target creates files beside it)
        copy = take_snapshot(opts.target, "target")
        try:
            with closing(tgt.connect(copy.path, opts.lock_timeout)) as con:
                _undo(con, copy.path, opts, report, now)
        finally:
            copy.close()
        report.undo_run_id = None
    else:
        with target_lock(opts.target, opts.lock_timeout), closing(tgt.connect(opts.target, opts.lock_timeout)) as con:
            _undo(con, opts.target, opts, report, now)
    report.elapsed_s = time.monotonic() - t0
    return report


def _undo(con: sqlite3.Connection, path: Path, opts: UndoOptions, report: UndoReport, now) -> None:
    con.execute("PRAGMA foreign_keys=OFF")   # checked once before the commit (see the module's docstring)
    tgt.begin_immediate(con, opts.target, opts.lock_timeout)
    try:
        if ledger.schema_version(con) == 0:
            raise BadInput(f"no run is recorded in {opts.target} (lcm-etl has not written it): nothing to undo")
        ledger.mark_dead_runs(con)   # we hold the run lock: a run still `running` was killed
        run = _resolve(con, opts.run_id, opts.target)
        report.run_id, report.command, report.status = run["run_id"], run["command"], run["status"]
        _run_rows(con, run)
        report.left = _check_dependents(con, run, opts.force)
        report.restored = _restore(con, run["run_id"])
        report.removed = _remove(con, run["run_id"])
        _rewind_sequences(con, run["run_id"])
        con.execute("DELETE FROM lcm_etl_run_rows WHERE run_id = ?", (run["run_id"],))
        con.execute("DELETE FROM lcm_etl_run_ranges WHERE run_id = ?", (run["run_id"],))
        broken = [r for t in ("lcm_summary_nodes", "lcm_message_parts")
                  for r in con.execute(f"PRAGMA foreign_key_check({t})")]
        if broken:
            raise RunFailed(f"internal error: undoing run {run['run_id']} would leave {len(broken)} broken references "
                            f"(first: {tuple(broken[0])}); nothing was changed")
        record = ledger.RunRecord.new("undo", now(), {"run_id": run["run_id"], "force": opts.force,
                                                      "dry_run": opts.dry_run}, provenance=False)
        record.counts = {"undid": run["run_id"], "removed": report.removed, "restored": report.restored,
                         "left": report.left}
        con.execute("UPDATE lcm_etl_runs SET status = 'undone', undone_by = ? WHERE run_id = ?",
                    (record.run_id, run["run_id"]))
        ledger.complete(con, record, now())
        report.undo_run_id = record.run_id
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def _resolve(con: sqlite3.Connection, ref: str, target: Path) -> dict:
    """The run named by its id or a unique prefix of it."""
    runs = [r for r in ledger.read_runs(con) if r["run_id"].startswith(ref.strip().lower())] if ref.strip() else []
    if len(runs) != 1:
        what = f"no run in the ledger of {target} matches" if not runs else \
            f"{len(runs)} runs in the ledger of {target} match"
        raise BadInput(f"{what} {ref!r} (`lcm-etl runs --dest {target}` lists them)")
    run = runs[0]
    if run["command"] == "undo":
        raise BadInput(f"run {run['run_id']} is an undo; it cannot itself be undone (re-run the undone command)")
    if run["status"] == "undone":
        raise BadInput(f"run {run['run_id']} was already undone (by run {run['undone_by']})")
    if not run["provenance"]:
        raise BadInput(f"run {run['run_id']} was written by an lcm-etl that recorded no provenance "
                       f"(version {run['tool_version']}); its rows cannot be told from others, so it cannot be undone")
    return run


def _run_rows(con: sqlite3.Connection, run: dict) -> None:
    """TEMP tables: the run's message ranges, its turns per session, its summaries, the runs after it."""
    rid = run["run_id"]
    con.execute("CREATE TEMP TABLE _u_msg AS SELECT lo, hi FROM lcm_etl_run_ranges WHERE run_id = ? "
                "AND tbl = 'lcm_messages'", (rid,))
    con.execute("CREATE TEMP TABLE _u_turns AS SELECT m.session_id, min(m.turn_index) AS lo, max(m.turn_index) AS hi "
                "FROM _u_msg r JOIN lcm_messages m ON m.id BETWEEN r.lo AND r.hi GROUP BY m.session_id")
    con.execute("CREATE TEMP TABLE _u_sums (id PRIMARY KEY, inserted) WITHOUT ROWID")
    con.execute("INSERT INTO _u_sums SELECT json_extract(key, '$[0]'), before IS NULL FROM lcm_etl_run_rows "
                "WHERE run_id = ? AND tbl = 'lcm_summary_nodes'", (rid,))
    con.execute("CREATE TEMP TABLE _u_later AS SELECT run_id, command, started_at FROM lcm_etl_runs "
                "WHERE rowid > ? AND status != 'undone' AND command != 'undo'", (run["seq"],))


# Rows that are not the run's and depend on its rows, with the later run that wrote each (NULL: Remnic).
_DEPENDENTS = """
SELECT d.kind, d.id, d.session_id,
       CASE d.kind WHEN 'message' THEN
         (SELECT g.run_id FROM lcm_etl_run_ranges g JOIN _u_later l USING (run_id)
          WHERE g.tbl = 'lcm_messages' AND d.id BETWEEN g.lo AND g.hi)
       ELSE (SELECT w.run_id FROM lcm_etl_run_rows w JOIN _u_later l USING (run_id)
             WHERE w.tbl = 'lcm_summary_nodes' AND w.key = json_array(d.id) AND w.before IS NULL) END
FROM (
  SELECT 'message' AS kind, m.id, m.session_id
  FROM _u_turns t JOIN lcm_messages m ON m.session_id = t.session_id AND m.turn_index > t.hi
  UNION ALL
  SELECT 'covering', n.id, n.session_id
  FROM _u_turns t JOIN lcm_summary_nodes n ON n.session_id = t.session_id AND n.msg_end >= t.lo AND n.msg_start <= t.hi
  WHERE n.id NOT IN (SELECT id FROM _u_sums)
  UNION ALL
  SELECT 'child', n.id, n.session_id FROM lcm_summary_nodes n
  WHERE n.parent_id IN (SELECT id FROM _u_sums WHERE inserted) AND n.id NOT IN (SELECT id FROM _u_sums)
) d
"""

# Later runs that changed a row this run wrote or changed (their before-images hold this run's values): a message's
# metadata, a boundary event moved (89_move_boundary.sql).
_OVERLAPS = """
SELECT DISTINCT l.run_id FROM lcm_etl_run_rows r JOIN lcm_etl_run_rows l ON l.tbl = r.tbl AND l.key = r.key
WHERE r.run_id = :run AND l.run_id IN (SELECT run_id FROM _u_later)
UNION
SELECT DISTINCT l.run_id FROM lcm_etl_run_rows l JOIN lcm_etl_run_ranges r ON r.run_id = :run AND r.tbl = l.tbl
  AND json_extract(l.key, '$[0]') BETWEEN r.lo AND r.hi
WHERE l.tbl IN ('lcm_messages', 'lcm_compaction_events') AND l.run_id IN (SELECT run_id FROM _u_later)
"""

# each kind: its name, one and many, and why --force may leave it (its `left` line)
_KINDS = {"message": ("message appended after its imported turns", "messages appended after its imported turns",
                      " ({where}): they keep their turn numbers; Remnic appends after a session's highest turn, so "
                      "nothing collides"),
          "covering": ("summary covering its turns", "summaries covering its turns",
                       ": their range now names turns without messages; expanding them finds only the messages that "
                       "remain"),
          "child": ("summary whose parent is one of its summaries", "summaries whose parent is one of its summaries",
                    ", made roots (parent_id NULL): a summary no other summary covers, as Remnic makes them")}


def _check_dependents(con: sqlite3.Connection, run: dict, force: bool) -> list[str]:
    """Refuse (BadInput) when later rows build on the run's; with --force, what is left and why."""
    rid = run["run_id"]
    rows = con.execute(_DEPENDENTS).fetchall()
    later = sorted({r[3] for r in rows if r[3]} | {r[0] for r in con.execute(_OVERLAPS, {"run": rid})})
    if later:
        first = con.execute("SELECT run_id, command, started_at FROM lcm_etl_runs WHERE run_id IN "
                            f"({', '.join('?' * len(later))}) ORDER BY rowid DESC LIMIT 1", later).fetchone()
        raise BadInput(f"run {rid} cannot be undone: the later run {first[0]} ({first[1]}, started {first[2]}) "
                       f"changed or built on its rows; undo that run first")
    native = [r for r in rows if r[3] is None]
    if not native:
        return []
    counts = {k: len({r[1] for r in native if r[0] == k}) for k in _KINDS}
    sessions = sorted({r[2] for r in native})
    what = ", ".join(f"{n} {_KINDS[k][n != 1]}" for k, n in counts.items() if n)
    where = f"session{'s' if len(sessions) > 1 else ''} {', '.join(sessions[:3])}" + (" ..." if len(sessions) > 3 else "")
    if not force:
        raise BadInput(f"run {rid} cannot be undone: Remnic wrote rows after it that depend on it ({what}; {where}); "
                       "--force removes the run's rows and leaves those")
    if counts["child"]:
        con.execute("UPDATE lcm_summary_nodes SET parent_id = NULL WHERE parent_id IN "
                    "(SELECT id FROM _u_sums WHERE inserted) AND id NOT IN (SELECT id FROM _u_sums)")
    return [f"{n} Remnic {_KINDS[k][n != 1]}{_KINDS[k][2].format(where=where)}" for k, n in counts.items() if n]


def _restore(con: sqlite3.Connection, rid: str) -> dict[str, int]:
    """Rows the run changed in place get the values they had before it. The before-images are rows of SQL
    literals made by SQLite's quote() (provenance.install_triggers), so they are put back as SQL."""
    restored: dict[str, int] = {}
    for table in KEYED:
        cols, pk = columns(con, table)
        where = " AND ".join(f"{c} = ?" for c in pk)
        n = 0
        for key, before in con.execute("SELECT key, before FROM lcm_etl_run_rows WHERE run_id = ? AND tbl = ? "
                                       "AND before IS NOT NULL", (rid, table)).fetchall():
            keys, values = orjson.loads(key), orjson.loads(before)
            if table == "lcm_summary_nodes":   # external-content FTS: out with the text now, in with the old
                con.execute("INSERT INTO lcm_summaries_fts (lcm_summaries_fts, rowid, summary_text) "
                            f"SELECT 'delete', rowid, summary_text FROM lcm_summary_nodes WHERE {where}", keys)
            if table in ROW_NAMES:   # Remnic's rows are changed in place: their rowids are referenced
                sets = ", ".join(f"{c} = {v}" for c, v in zip(cols, values))
                con.execute(f"UPDATE {table} SET {sets} WHERE {where}", keys)
            else:
                con.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({', '.join(values)})")
            if table == "lcm_summary_nodes":
                con.execute("INSERT INTO lcm_summaries_fts (rowid, summary_text) "
                            f"SELECT rowid, summary_text FROM lcm_summary_nodes WHERE {where}", keys)
            n += 1
        name = ROW_NAMES.get(table, "provenance_rows")
        restored[name] = restored.get(name, 0) + n
    return restored


def _remove(con: sqlite3.Connection, rid: str) -> dict[str, int]:
    removed = {"messages": 0, "parts": 0, "summaries": 0, "boundary_events": 0, "provenance_rows": 0}
    ranges = {t: con.execute("SELECT lo, hi FROM lcm_etl_run_ranges WHERE run_id = ? AND tbl = ?", (rid, t)).fetchall()
              for t in RANGED}
    for lo, hi in ranges["lcm_message_parts"]:
        removed["parts"] += con.execute("DELETE FROM lcm_message_parts WHERE id BETWEEN ? AND ?", (lo, hi)).rowcount
    for lo, hi in ranges["lcm_messages"]:
        con.execute("INSERT INTO lcm_messages_fts (lcm_messages_fts, rowid, content) "
                    "SELECT 'delete', id, content FROM lcm_messages WHERE id BETWEEN ? AND ?", (lo, hi))
        # what ON DELETE CASCADE would do (foreign keys are off): parts Remnic added to these messages
        removed["parts"] += con.execute("DELETE FROM lcm_message_parts WHERE message_id BETWEEN ? AND ?", (lo, hi)).rowcount
        removed["messages"] += con.execute("DELETE FROM lcm_messages WHERE id BETWEEN ? AND ?", (lo, hi)).rowcount
    for lo, hi in ranges["lcm_compaction_events"]:
        removed["boundary_events"] += con.execute("DELETE FROM lcm_compaction_events WHERE id BETWEEN ? AND ?",
                                                  (lo, hi)).rowcount
    for table, ops in KEYED.items():
        if "insert" not in ops:
            continue
        _, pk = columns(con, table)
        keys = ", ".join(f"json_extract(key, '$[{i}]')" for i in range(len(pk)))
        mine = (f"({', '.join(pk)}) IN (SELECT {keys} FROM lcm_etl_run_rows WHERE run_id = ? AND tbl = ? "
                "AND before IS NULL)")
        if table == "lcm_summary_nodes":
            con.execute("INSERT INTO lcm_summaries_fts (lcm_summaries_fts, rowid, summary_text) "
                        f"SELECT 'delete', rowid, summary_text FROM lcm_summary_nodes WHERE {mine}", (rid, table))
        removed[ROW_NAMES.get(table, "provenance_rows")] += con.execute(f"DELETE FROM {table} WHERE {mine}",
                                                                        (rid, table)).rowcount
    removed["fts_rows"] = removed["messages"] + removed["summaries"]
    return removed


def _rewind_sequences(con: sqlite3.Connection, rid: str) -> None:
    """Nothing was inserted after the run (the sequence still ends at its last id): the sequence goes back
    to where the run found it, so undo then re-run hands out the same ids. Otherwise it stays: an id is
    never given twice."""
    for table, lo, hi in con.execute("SELECT tbl, min(lo), max(hi) FROM lcm_etl_run_ranges WHERE run_id = ? "
                                     "GROUP BY tbl", (rid,)).fetchall():
        con.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ? AND seq = ?", (lo - 1, table, hi))
