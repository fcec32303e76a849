"""What `reconcile` makes of read transcripts: identity rows for the DuckDB plan, content rows for the stage.

The plan needs identities only (session, entry id, role, identity hash, order, token count), so only
those go to DuckDB, as Arrow tables with declared column types. Content, metadata and part payloads go
from Python straight into the stage file (SQLite), and only for the messages the plan decided to write:
a value of any size never passes through DuckDB's memory budget.

message_id = file_order << 32 | path_index: the position of a message among the transcripts read.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Sequence, cast
from pathlib import Path

from lcm_etl.read.content_spool import add_occurrences, open_stage, write_message
from lcm_etl.read.openclaw.openclaw_state import legacy_session_keys
from lcm_etl.read.openclaw.transcript_files import load_session_keys
from lcm_etl.read.transcript.transcripts import Transcript, TranscriptMessage

# Declared, not inferred from the data: a column with no value at all (an empty file, a header-only
# file, v1 files without entry ids) would be typed NULL or INTEGER and fail to bind in the plan.
MESSAGE_COLUMNS = {"message_id": "int", "file_order": "int", "path_index": "int", "file": "str", "session_id": "str",
                   "entry_id": "str", "role": "str", "token_count": "int", "identity_hash": "str",
                   "created_iso": "str", "inner_ts": "str"}
PART_COLUMNS = {"message_id": "int", "ordinal": "int"}
ABANDONED_COLUMNS = {"file_order": "int", "session_id": "str", "entry_id": "str", "role": "str", "inner_ts": "str"}
TABLES = ("jsonl_messages", "jsonl_parts", "jsonl_abandoned")
SPOOL_ROWS = 50_000   # messages gathered into one row group of the spool (IdentitySpool)
# and at most this many windows: a window's three small Arrow tables cost about 20 KB held whatever their rows (a
# re-run's window brings a few appended messages: 10,000 of them held 200 MB before SPOOL_ROWS was reached)
SPOOL_WINDOWS = 128
# a released transcript's emptied lists: one shared empty tuple (an append to it fails loudly, never shares a row);
# 10,000 windows' empty lists and their reports' were about 5 MB (docs/benchmarks.md, 2026-11-26 22:21)
NOTHING = cast(list, ())
_REPORT_LISTS = ("skipped_lines", "gaps", "replays", "extra_headers", "cycles", "non_persistable")


def _arrow():
    """pyarrow (imported here, not at the top: `audit` imports this module and rarely reads transcripts, 28 MB)
    and the memory pool the plan rows are built in: the C library's allocator, not Arrow's default (mimalloc).
    A store's windows make a few small tables each, gathered and freed every SPOOL_ROWS messages; mimalloc kept
    about 5 KB more per window read (a run's memory at the end of reading grew by 17 MB from 500 to 4,000
    windows, by 47 MB at 10,000), the system allocator none (docs/benchmarks.md, 2026-11-26)."""
    import pyarrow as pa

    return pa, pa.system_memory_pool()


@dataclass(slots=True)   # one per transcript, held for the whole run
class FileSession:
    session_id: str            # where the file's messages land
    session_key: str | None    # from the folder's sessions.json, kept in metadata


def file_sessions(transcripts: Sequence[Transcript], key_by: str) -> FileSessions:
    """Where each transcript's messages land: its session id (a file's header id, a store window's id), or with
    --key-by session-key its session key (the store's session_windows.session_key, a folder's sessions.json, or
    the doctor's legacy-store.sessions.json.imported-* beside its originals) when it has one."""
    return FileSessions(transcripts, key_by)


class FileSessions(Sequence[FileSession]):
    """file_session of each transcript, worked out when asked for, not held: a store's windows are shelved
    (window_shelf.py), and a list of their sessions held what shelving them saved (about 200 bytes a window)."""

    def __init__(self, transcripts: Sequence[Transcript], key_by: str):
        self.transcripts, self.key_by = transcripts, key_by
        self._keys_by_folder: dict[Path, dict[str, str]] = {}

    def __len__(self) -> int:
        return len(self.transcripts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return file_session(self.transcripts[i], self.key_by, self._keys_by_folder)


def file_session(t: Transcript, key_by: str, keys_by_folder: dict[Path, dict[str, str]]) -> FileSession:
    key = getattr(t.origin, "session_key", None)
    if key is None:
        folder = t.path.parent
        if folder not in keys_by_folder:
            keys_by_folder[folder] = {**legacy_session_keys(folder), **load_session_keys(folder)}
        key = keys_by_folder[folder].get(t.header_id)
    return FileSession(key.strip() if key_by == "session-key" and key and key.strip() else t.header_id, key)


class IdentitySpool:
    """The plan's rows of released transcripts, written to Parquet files in the run's private folder as each
    transcript is read (DuckDB reads them back: plan_transcripts). Python holds at most SPOOL_ROWS of them: a run's
    memory follows the largest window, not the store (measured: docs/benchmarks.md).

    Windows are gathered into row groups of about SPOOL_ROWS messages (or SPOOL_WINDOWS windows): a row group per
    window kept each one's footer metadata (statistics of every column) in the writer until it closed, about 10 KB
    a window, 100 MB for a 10,000-window store, and DuckDB parsed that footer again to read the spool back."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.paths = {name: folder / f"{name}.parquet" for name in TABLES}
        self._writers: dict = {}
        self._pending: list[tuple] = []
        self._pending_rows = 0
        self.rows = 0

    def add(self, tables) -> None:
        self._pending.append(tables)
        self._pending_rows += tables[0].num_rows
        self.rows += tables[0].num_rows
        if self._pending_rows >= SPOOL_ROWS or len(self._pending) >= SPOOL_WINDOWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow.parquet as pq

        if not self._pending:
            return
        pa, pool = _arrow()
        for k, name in enumerate(TABLES):
            table = pa.concat_tables([t[k] for t in self._pending], memory_pool=pool)
            if name not in self._writers:
                self._writers[name] = pq.ParquetWriter(self.paths[name], table.schema, compression="NONE",
                                                       memory_pool=pool)
            self._writers[name].write_table(table, row_group_size=max(table.num_rows, 1))
        self._pending, self._pending_rows = [], 0

    def close(self) -> None:
        self._flush()
        for w in self._writers.values():
            w.close()
        self._writers.clear()

    def sql(self, name: str) -> str | None:
        """A SELECT of a table's spooled rows, once the spool is closed (None when nothing was spooled)."""
        self.close()
        path = self.paths[name]
        return f"SELECT * FROM read_parquet('{str(path).replace(chr(39), chr(39) * 2)}')" if path.exists() else None


def release(t: Transcript, order: int, session: FileSession, fallback_time: str, spool: IdentitySpool | None) -> None:
    """Keep of a transcript only what the plan needs (its identity rows: in the spool, else as Arrow tables on
    the transcript) and drop its content, metadata and parts: they are in the stage file already (t.staged,
    content_spool.ContentSpool), or stage_content reloads them (t.reload) for the messages the plan writes. A
    store window is released as soon as it is read (a file may change between two reads, so a file keeps its
    content instead)."""
    if spool is not None and not t.messages and not t.abandoned:
        t.identities = "spooled"   # no rows to spool: a re-run's window with nothing new (10,000 of them: 1 s)
    elif spool is not None:
        spool.add(_tables([t], [session], fallback_time, first_order=order))
        t.identities = "spooled"
    else:
        t.identities = _tables([t], [session], fallback_time, first_order=order)
    t.read_count = len(t.messages)
    # a store window's header line is not read again (its id is the window's session id): 10,000 windows kept
    # theirs parsed, about 6 MB
    t.messages, t.abandoned, t.header = NOTHING, NOTHING, None
    r = t.report
    for name in _REPORT_LISTS:   # what a window's read found nothing of: one shared empty value, not a list each
        if not getattr(r, name):
            setattr(r, name, ())


def arrow_tables(in_memory: Iterable[tuple[int, Transcript]], sessions: Sequence[FileSession], fallback_time: str):
    """(messages, parts, abandoned) as Arrow tables: one row per active-path message, per part, per
    message off the path, of the transcripts held in memory, (read order, transcript) each (a shelved one is
    spooled: window_shelf.py). A released transcript brings the rows it was released with; a spooled one none
    (its rows are in the spool)."""
    pa, pool = _arrow()
    pairs = list(in_memory)
    held = [t.identities for _, t in pairs if isinstance(t.identities, tuple)]
    fresh = [(order, t, sessions[order]) for order, t in pairs if t.identities is None]
    own = _tables([t for _, t, _ in fresh], [s for _, _, s in fresh], fallback_time, orders=[o for o, _, _ in fresh])
    return tuple(pa.concat_tables([own[k], *(h[k] for h in held)], memory_pool=pool) for k in range(3))


def _tables(transcripts: list[Transcript], sessions: list[FileSession], fallback_time: str, first_order: int = 0,
            orders: list[int] | None = None):
    pa, pool = _arrow()
    m_cols: dict[str, list] = {k: [] for k in MESSAGE_COLUMNS}
    p_cols: dict[str, list] = {k: [] for k in PART_COLUMNS}
    a_cols: dict[str, list] = {k: [] for k in ABANDONED_COLUMNS}
    for n, (t, s) in enumerate(zip(transcripts, sessions)):
        order = orders[n] if orders is not None else first_order + n
        for i, m in enumerate(t.messages):
            mid = (order << 32) | i
            for k, v in (("message_id", mid), ("file_order", order), ("path_index", i), ("file", str(t.path)),
                         ("session_id", s.session_id), ("entry_id", m.entry_id), ("role", m.role),
                         ("token_count", m.token_count), ("identity_hash", m.identity_hash),
                         ("created_iso", m.created_at or fallback_time), ("inner_ts", _ts_text(m.inner_timestamp))):
                m_cols[k].append(v)
            for part in m.parts:
                p_cols["message_id"].append(mid)
                p_cols["ordinal"].append(part["ordinal"])
        for entry_id, role, inner in t.abandoned:
            for k, v in (("file_order", order), ("session_id", s.session_id), ("entry_id", entry_id), ("role", role),
                         ("inner_ts", _ts_text(inner))):
                a_cols[k].append(v)
    def table(cols: dict[str, list], schema):
        return pa.Table.from_arrays([pa.array(cols[f.name], type=f.type, memory_pool=pool) for f in schema],
                                    schema=schema)
    m_schema, p_schema, a_schema = _schemas()
    return table(m_cols, m_schema), table(p_cols, p_schema), table(a_cols, a_schema)


@functools.cache
def _schemas():
    """The three tables' Arrow schemas, made once: one each per window cost 4 KB a window held."""
    pa, _ = _arrow()
    return tuple(pa.schema([(n, pa.int64() if kind == "int" else pa.string()) for n, kind in spec.items()])
                 for spec in (MESSAGE_COLUMNS, PART_COLUMNS, ABANDONED_COLUMNS))


def stage_content(path: Path, transcripts: Sequence[Transcript], sessions: Sequence[FileSession],
                  to_write: Iterable[tuple[int, int]]) -> None:
    """Stage the content, metadata and parts of the given messages (the stage's plan_parts and jsonl_content
    tables, read by r80 and r72) into the stage file, which may already hold a store's windows' (spooled as they
    were read: content_spool.ContentSpool). `to_write`: (message_id, k) where the message is the k-th of its
    identity on its session's path (a row without an entry id keeps k: IDENTITY_OCCURRENCE), in message id
    order. A released transcript whose content was not spooled is reloaded, one at a time, for its messages."""
    con = open_stage(path)
    try:
        loaded: tuple[int, list[TranscriptMessage]] | None = None
        for mid, occurrence in to_write:
            order, index = mid >> 32, mid & 0xFFFFFFFF
            t = transcripts[order]
            if t.staged:
                # every row without an entry id has an occurrence (it is counted with its own identity)
                if occurrence is not None:
                    add_occurrences(con, [(mid, occurrence)])
                continue
            if t.identities is None:
                messages = t.messages
            else:
                if loaded is None or loaded[0] != order:
                    loaded = (order, t.reload().messages)
                messages = loaded[1]
            write_message(con, t, messages[index], mid, sessions[order].session_key, True, occurrence)
        con.execute("COMMIT")
    finally:
        con.close()


# Kept in the metadata of a row without an entry id (v1 files): the message is the k-th of its identity on its
# session's path (files in the order read). lossless-claw's backfill of the same file stores the same messages
# in the same order, so `migrate` can tell the k-th copy of a repeated message (a delivery mirror repeats the
# reply it follows, in the same second) from the others (transforms/20_turn_index.sql). Counted in the plan, only
# where a row without an entry id is (a store's rows all have one), into a table first and sorted after: a join
# of every message feeding the sort in one query held the join's hash table while the sort needed memory, and
# ran out of the budget at 3M messages (docs/benchmarks.md).
IDENTITY_OCCURRENCE = (
    """CREATE OR REPLACE TEMP TABLE write_occurrence AS
    SELECT w.message_id, o.occurrence FROM write_messages w LEFT JOIN (
        SELECT j.message_id, row_number() OVER (PARTITION BY j.session_id, j.identity_hash
                                                ORDER BY j.file_order, j.path_index) AS occurrence
        FROM jsonl_messages j
        JOIN (SELECT DISTINCT session_id, identity_hash FROM jsonl_messages WHERE entry_id IS NULL) k
          ON k.session_id = j.session_id AND k.identity_hash IS NOT DISTINCT FROM j.identity_hash) o
      ON o.message_id = w.message_id""",
    "SELECT message_id, occurrence FROM write_occurrence ORDER BY message_id")


def _ts_text(value) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)
