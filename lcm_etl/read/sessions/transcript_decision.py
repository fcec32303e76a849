"""reconcile's re-run decision, per transcript (a JSONL file or a session store window): read it from where the last
complete run stopped, or whole, and why. Nothing else decides it: transcript_offsets.py and store_reads.py read
what it says, lcm_etl/sync/decision.py counts its causes into the report's `sync:` line (docs/design.md, "The
re-run decision").

A complete reconcile records each transcript it planned in the target (`lcm_etl_transcript_files`, by r95): what the
read left (transcripts.Mark: the tip an append continues from, a file's bytes and SHA-256, a window's seq and
watermark), the session it landed in, the run's --key-by and --src. The next run reads a transcript from its record
when each of these holds, checked in this order; the first that does not is the cause it is read whole:

- the target holds a record of it (`recorded`, `Records.start`) ............................ NEW / RECORDS_UNREAD
- the run that made it completed and no undo ran after it (it may have removed what it imported) ........ UNDONE
- it was made under this run's --key-by and --src (what counted as held then counts now) ......... OTHER_OPTIONS
- what was read then is unchanged: a file's first `size` bytes hash to the recorded SHA-256, the whole prefix,
  never assumed (OpenClaw rewrites files in place, at the same size too: `prefix_proved`) ......... PREFIX_CHANGED
  a window's rewrite watermark is the recorded one (OpenClaw moves it when it rewrites rows in place) . REWRITTEN
  and the window still reaches the recorded seq (one made again, shorter: `window_start`) ......... STARTED_OVER
- with a line or row past it, it names a tip: the last entry, with an id, on the active path (a v1 file has none;
  unchanged, nothing is read; not asked of an archive) .................................................. NO_TIP
- every later line or row extends the active branch from the tip: a canonical entry with a new id whose parent is
  the one before (`continue_path`); a branch, a `leaf` control, a reset, a side entry, an id-less, unknown or
  unreadable entry, a second header is not .................................................... NOT_APPEND

Then, under the run lock, per session (`settle`): the plan matches a session's appended messages by entry id alone,
so a session is read from records only when every transcript of it is, each from the record the target still
holds (RECORD_CHANGED), whose rows the target still holds as the last run left them (TARGET_LOST), and into the
session it was recorded under (OTHER_SESSION, sessions.json moved it); the others of a session with one read whole are read again whole (SESSION_WHOLE), and so is a session with new messages
whose held rows (the target's, or --src's) lack entry ids, which only a whole path can count (BY_IDENTITY).
An archive (a store's archive row, a published or the doctor's archive file) never grows: it is read from its record,
which is to say not read, while its bytes hash to the recorded SHA-256 (`archive_start`: a store row's own
`archive_sha256`, a file's bytes), else whole (ARCHIVE_CHANGED). A pending input is always read whole (PENDING), and
so, by the session rule, is its session, on every run until OpenClaw takes the input in.

The way a re-run takes (lcm_etl/commands/reconcile.py runs it; docs/design.md, "Reconcile: transcripts"): before the
lock the target's records are opened as a hint (`recorded`); each transcript's record is looked up by its key
(`transcript_key`) and checked as above, and the readers (transcript_offsets.py, store_reads.py) read it from its
record or whole into the run file (run_file.RunFile: `read`, `why`, the hint in `rec_*`, the read's mark); under the
lock `settle`'s answer is read again whole; `sessions_from_records` names the plan's `jsonl_appended` sessions
(matched by entry id alone: r05, r20), planned once; r95_record_offsets.sql records the planned sessions' transcripts.
"""
from __future__ import annotations

import hashlib
from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from lcm_etl import sqlite_runtime
from lcm_etl.file_identity import real_path
from lcm_etl.read.openclaw.openclaw_store import StoreWindow
from lcm_etl.read.transcript.transcripts import (_BLANK, CANONICAL_TYPES, MARK_COLUMNS, Mark, Transcript, TranscriptReport,
                                                _Node, message_of, parse_line)

# why a transcript was read whole: the report's fixed vocabulary (per file `why`, the `sync:` line's counts), in
# the order the line lists them
NEW = "new"
FULL = "--full: every transcript read whole"
RECORDS_UNREAD = "the target's records unread before the lock (a dry run beside its -wal, or unreadable)"
UNDONE = "its last run was undone or did not complete"
OTHER_OPTIONS = "recorded under another --key-by or --src"
NO_TIP = "nothing to continue from (no entry ids, or the leaf not the last entry)"
PREFIX_CHANGED = "the recorded prefix changed"
REWRITTEN = "rewritten in place (watermark changed)"
STARTED_OVER = "the window started over"
NOT_APPEND = "not a plain append"
RECORD_CHANGED = "re-read: the record changed under the lock"
OTHER_SESSION = "re-read: recorded under another session"
SESSION_WHOLE = "re-read: another transcript of its session read whole"
BY_IDENTITY = "re-read: its session holds rows without entry ids"
TARGET_LOST = "re-read: the target no longer holds its session's rows as recorded"
ARCHIVE_CHANGED = "the archive changed"
PENDING = "a pending input"
CAUSES = (NEW, FULL, RECORDS_UNREAD, UNDONE, OTHER_OPTIONS, PREFIX_CHANGED, REWRITTEN, STARTED_OVER, NO_TIP, NOT_APPEND,
          RECORD_CHANGED, OTHER_SESSION, TARGET_LOST, SESSION_WHOLE, BY_IDENTITY, ARCHIVE_CHANGED, PENDING)


@dataclass(frozen=True, slots=True)   # one per transcript, looked up as it is read
class FileRecord:
    """What the last reconcile that planned a transcript read of it (its mark), and under which options."""
    path: str
    mark: Mark
    header_id: str
    version: int | None
    session_id: str
    key_by: str
    held_by: str
    trusted: int       # 1: its run completed and no undo ran after it


# the record's columns: the run file's `rec_*` and the query below follow them (tests/test_transcript_record.py)
RECORD_COLUMNS = (*MARK_COLUMNS, "header_id", "version", "session_id", "key_by", "held_by", "trusted")
_RECORDED = f"""
SELECT f.path, {", ".join("f." + c for c in RECORD_COLUMNS[:-1])},
       coalesce(r.status = 'complete'
                AND NOT EXISTS (SELECT 1 FROM lcm_etl_runs u WHERE u.command = 'undo' AND u.rowid > r.rowid), 0) AS trusted
FROM lcm_etl_transcript_files f LEFT JOIN lcm_etl_runs r ON r.run_id = f.run_id"""


class Records:
    """A target's records, looked up one transcript key at a time (the table's primary key): a 10,000-window
    store's records are never all held (docs/benchmarks.md, 2026-11-26 22:21). `absent`: the cause for a transcript
    without one. A record that cannot be read now (the target changed under a dry run's immutable read) is absent,
    with RECORDS_UNREAD: the transcript is read whole, which is always correct. Close it when done."""

    def __init__(self, target: Path | None = None, how: str = "mode=ro", absent: str = NEW):
        self.absent = absent
        self._con: sqlite3.Connection | None = None
        if target is None:
            return
        self._con = con = sqlite_runtime.connect(target, how, check_same_thread=False)
        try:
            if not all(sqlite_runtime.has_table(con, name) for name in ("lcm_etl_transcript_files", "lcm_etl_runs")):
                self.close()
        except sqlite3.Error:
            self.close()
            raise

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def get(self, key: str) -> FileRecord | None:
        if self._con is None:
            return None
        try:
            row = self._con.execute(_RECORDED + " WHERE f.path = ?", (key,)).fetchone()
        except sqlite3.Error:
            self.close()
            self.absent = RECORDS_UNREAD
            return None
        return None if row is None else FileRecord(row[0], Mark(*row[1:len(MARK_COLUMNS) + 1]),
                                                   *row[len(MARK_COLUMNS) + 1:])

    def last_run(self) -> str | None:
        """The run whose records are the newest (last_records_run); None when unknown."""
        try:
            return last_records_run(self._con) if self._con is not None else None
        except sqlite3.Error:
            return None

    def start(self, key: str, key_by: str, held_by: str) -> FileRecord | str:
        """The record a transcript is read from, when its run completed and was made under these options; else why
        it is read whole. Without a tip it is still the start: unchanged, nothing is read (continue_path: NO_TIP)."""
        rec = self.get(key)
        if rec is None:
            return self.absent
        if not rec.trusted:
            return UNDONE
        if (rec.key_by, rec.held_by) != (key_by, held_by):
            return OTHER_OPTIONS
        return rec


def last_records_run(con: sqlite3.Connection) -> str | None:
    """The newest run that wrote records (a complete reconcile) or could have voided them (an undo): while it is the
    run that sealed a store's kept snapshot, the records of that store's windows are the ones it left
    (tests/test_watch_unchanged.py)."""
    if not sqlite_runtime.has_table(con, "lcm_etl_runs"):   # a target replaced by one lcm-etl never wrote
        return None
    row = con.execute("SELECT run_id FROM lcm_etl_runs WHERE command = 'undo' OR (command = 'reconcile' AND "
                      "status = 'complete') ORDER BY rowid DESC LIMIT 1").fetchone()
    return row[0] if row else None


def archive_start(start: FileRecord | str, sha256: str) -> FileRecord | str:
    """An archive's record (Records.start) when the archive's bytes are still the recorded ones: it holds nothing
    the last run did not read, and nothing of it is read again (a folder of 1,000 archives re-parsed cost a sync
    2.5 s). No tip is needed: nothing continues an archive."""
    if isinstance(start, FileRecord) and start.mark.sha256 != sha256:
        return ARCHIVE_CHANGED
    return start


def recorded(target: Path | None, dry_run: bool = False) -> Records:
    """A target's records (none when there is no target or no such table), read before the run lock as migrate's
    shortcut reads its ledger (sqlite_runtime.before_lock): a hint, which `settle` checks against the records
    under the lock. Unreadable now (a dry run beside a -wal), every transcript is read whole."""
    if target is None or not target.exists():
        return Records()
    how = sqlite_runtime.before_lock(target, dry_run)
    try:
        return Records(target, how) if how else Records(absent=RECORDS_UNREAD)
    except sqlite3.Error:   # not readable now: the run reads every transcript whole, and check_target says why
        return Records(absent=RECORDS_UNREAD)


def transcript_key(t: Transcript) -> str:
    """A transcript's record key: a file's real path (lcm_etl/file_identity.py); a store window's
    `<store's real path>#<session id>`, an archive row's `<store's real path>#<archive name>`."""
    return (t.origin.record_key if t.origin is not None else None) or real_path(t.path)


def prefix_proved(f: BinaryIO, rec: Mark) -> Any:
    """The SHA-256 of the file's first `rec.size` bytes, read from `f`, when it is the recorded one (the caller reads
    on from there), else None: shorter, or changed."""
    digest = hashlib.sha256()
    left = rec.size or 0
    while left:
        chunk = f.read(min(left, 1 << 20))
        if not chunk:
            return None
        digest.update(chunk)
        left -= len(chunk)
    return digest if digest.hexdigest() == rec.sha256 else None


def window_start(rec: Mark, w: StoreWindow) -> str | None:
    """Why a window cannot be read past its record, or None when it can."""
    if rec.watermark != w.watermark:
        return REWRITTEN
    if not 0 < (rec.seq or 0) <= w.max_seq:
        return STARTED_OVER
    return None


def continue_path(lines, tip: str | None, report: TranscriptReport) -> tuple[list, str | None] | str:
    """The messages of numbered lines (a file's tail, a window's new rows) that extend the active branch from
    `tip`, each line by one entry, and the new tip; NOT_APPEND when any line does not, NO_TIP when there is a line
    and no tip."""
    messages = []
    seen = {tip}
    for no, raw in lines:
        report.lines_total = no
        if raw is None:
            return NOT_APPEND
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        raw = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
        if _BLANK.match(raw):
            continue
        if tip is None:   # a v1 file, or a leaf not last: something new, and nothing it could extend
            return NO_TIP
        e, reason = parse_line(raw)
        if reason is not None or not isinstance(e, dict) or not _continues(e, tip, seen):
            return NOT_APPEND
        key = e["id"].strip()
        node = _Node(key, tip, tip, no, e, True)
        seen.add(key)
        tip = key
        try:
            message = message_of(node, report)
        except RecursionError:   # read whole, where the line is reported
            return NOT_APPEND
        if message is not None:
            messages.append(message)
    return messages, tip


def _continues(e: dict, tip: str | None, seen: set) -> bool:
    """An entry that extends the active branch by one: canonical, with a new id, whose parent is the tip."""
    eid, parent = e.get("id"), e.get("parentId")
    return (e.get("type") in CANONICAL_TYPES and e.get("appendMode") != "side"
            and isinstance(eid, str) and bool(eid.strip()) and eid.strip() not in seen
            and isinstance(parent, str) and parent.strip() == tip)


def settle(run: sqlite3.Connection, target: Path | None, target_rows: Path | None = None,
           source: tuple[Path, dict[str, str], list] | None = None, every: bool = True) -> dict[int, str]:
    """The transcripts read from a record (a hint, read before the lock: the run file's `rec_*` columns) that must
    be read again whole, by read order, with the cause: a record the target no longer holds as it was (`target`:
    under the lock, or the dry run's private copy), a transcript that lands in another session than it was
    recorded under, the others of a session with one read whole, and a session with new messages whose held rows
    (the target's, in `target_rows`: reconcile_plan.target_rows; or --src's: `source`, its snapshot, normalised views and
    each conversation's session as the plan keys it: reconcile_plan.source_sessions) lack entry ids. A query over the
    run file, the target and the source attached (lcm_etl/read/sessions/run_file.py). `every`: the target's rows of
    every session read from a record are compared with the record (_LOST); else only of those read past it, with
    something new (a watch's later syncs: the comparison reads the target's whole session index, which grows with
    the target, not with the change)."""
    same = " AND ".join(f"r.{c} IS t.rec_{c}" for c in RECORD_COLUMNS)
    for name, columns in (("records", ("path", *RECORD_COLUMNS)), ("lost", ("session_id",)), ("bare", ("session_id",))):
        run.execute(f"CREATE TEMP TABLE {name} ({', '.join(columns)})")
    try:
        if target is None:
            raise sqlite3.OperationalError("no target")
        for name, path in (("target", target), ("target_rows", target_rows or target)):
            run.execute(f"ATTACH ? AS {name}", (sqlite_runtime.uri(path),))
        run.execute(f"INSERT INTO records {_RECORDED} WHERE f.path IN "
                    "(SELECT record_key FROM main.transcripts WHERE read = 'appended')")
        for db, table, sql in (("target", "lcm_etl_session_marks", _LOST), ("target_rows", "lcm_messages", _BARE_TARGET)):
            if sqlite_runtime.has_table(run, table, db):
                run.execute(sql, {"every": every} if sql is _LOST else ())
    except sqlite3.Error:   # no record can be read (or the target lacks the rows' table): none of the hints holds
        run.execute("DELETE FROM records")
    finally:
        for name in [r[1] for r in run.execute("PRAGMA database_list") if r[1] in ("target", "target_rows")]:
            run.execute(f"DETACH {name}")
    if source is not None:
        run.execute("CREATE TEMP TABLE src_sessions (conversation_id, session_id)")
        run.executemany("INSERT INTO src_sessions VALUES (?, ?)", source[2])
        run.execute("ATTACH ? AS src", (sqlite_runtime.uri(source[0]),))
        try:
            run.execute(f"WITH src_messages AS ({source[1]['src_messages']}) {_BARE_SOURCE}")
        finally:
            run.execute("DETACH src")
            run.execute("DROP TABLE src_sessions")
    rows = run.execute(f"""
        WITH changed AS (
            SELECT t.file_order, t.session_id,
                   CASE WHEN r.path IS NULL OR NOT ({same}) THEN :changed
                        WHEN t.rec_session_id IS NOT t.session_id THEN :other
                        WHEN t.session_id IN (SELECT session_id FROM lost) THEN :lost END AS why
            FROM transcripts t LEFT JOIN records r ON r.path = t.record_key WHERE t.read = 'appended'),
        whole AS (SELECT session_id FROM transcripts WHERE read = 'whole'
                  UNION SELECT session_id FROM changed WHERE why IS NOT NULL)
        SELECT t.file_order, coalesce(c.why, iif(t.session_id IN whole, :whole, :bare))
        FROM transcripts t JOIN changed c USING (file_order)
        WHERE c.why IS NOT NULL OR t.session_id IN whole OR t.session_id IN (SELECT session_id FROM bare)""",
                       {"changed": RECORD_CHANGED, "other": OTHER_SESSION, "whole": SESSION_WHOLE,
                        "lost": TARGET_LOST, "bare": BY_IDENTITY}).fetchall()
    for name in ("records", "lost", "bare"):
        run.execute(f"DROP TABLE {name}")
    return dict(rows)


# the sessions read from records whose messages in the target are no longer what the last run left (its session mark,
# r95_record_offsets.sql: count and highest id): one query per run, over the session index; a row deleted or added
# since is read whole again. :every false: only the sessions with something new read past a record
_LOST = """
INSERT INTO lost WITH appended AS (SELECT DISTINCT session_id FROM main.transcripts WHERE read = 'appended' AND (:every OR lines_read > 0)),
     now AS (SELECT session_id, count(*) AS n, max(id) AS hi FROM target.lcm_messages
             WHERE session_id IN (SELECT session_id FROM appended) GROUP BY session_id)
SELECT r.session_id FROM target.lcm_etl_session_marks r LEFT JOIN now USING (session_id)
WHERE r.source_path = '' AND r.session_id IN (SELECT session_id FROM appended)
  AND (coalesce(now.n, 0) <> r.messages OR coalesce(now.hi, 0) <> r.max_message_id)"""
# BY_IDENTITY: the sessions every transcript of which was read from its record, with new messages, whose held rows
# (r05_target_state.sql's held_tgt, reconcile_plan.py's held_lcm) lack an entry id. The plan matches such a session's
# new messages by entry id alone (r20_match.sql): its id-less rows only the whole path can count
_CANDIDATES = ("(SELECT session_id FROM main.transcripts GROUP BY session_id "
               "HAVING min(read = 'appended') AND max(read_count) > 0)")
_BARE = "json_valid(metadata) AND json_extract(metadata, '$.transcript_entry_id') IS NULL"
_BARE_TARGET = f"INSERT INTO bare SELECT DISTINCT session_id FROM target_rows.lcm_messages WHERE session_id IN {_CANDIDATES} AND {_BARE}"
BARE_INDEX = f"CREATE INDEX bare_rows ON lcm_messages(session_id) WHERE {_BARE}"
# --src's conversations keyed as the plan keys them (10_sessions.sql, in DuckDB: src_sessions)
_BARE_SOURCE = f"""
INSERT INTO bare SELECT s.session_id FROM src_sessions s
WHERE s.session_id IN {_CANDIDATES} AND EXISTS (SELECT 1 FROM src_messages m WHERE m.conversation_id = s.conversation_id
                                                AND nullif(trim(m.transcript_entry_id), '') IS NULL)"""


def sessions_from_records(run: sqlite3.Connection) -> set[str]:
    """The sessions every transcript of which was read from its record: the plan matches their appended messages by
    entry id alone (r20_match.sql, `jsonl_appended`)."""
    return {r[0] for r in run.execute(
        "SELECT session_id FROM transcripts GROUP BY session_id HAVING min(read = 'appended')")}
