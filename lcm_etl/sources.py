"""Reading a lossless-claw lcm.db: validate the path, take a consistent snapshot, detect the schema.

Why a snapshot: lossless-claw keeps its database in WAL mode, and SQLite (and DuckDB's sqlite_scanner,
which embeds SQLite) creates `-wal`/`-shm` files beside any WAL database it opens, even read-only. The
source directory is the user's OpenClaw state: we must not add files there, and committed rows that
still live only in `lcm.db-wal` must be read. So the main file and its `-wal` are copied into a private
temporary folder (retrying while a live writer changes them under us), the copy is checkpointed there,
and every reader attaches the copy. `immutable=1` is never used: it silently ignores the WAL.

Schema generations differ by columns, never by a version number (lossless-claw never sets
user_version): `SourceSchema` records which columns exist and `normalized_views()` renders one fixed
column set per table, with NULL for columns an old release did not have. The same view SQL runs in
DuckDB (planning) and in SQLite (the bulk copy of content), so both see identical rows.
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import sqlite3
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .errors import BadInput, RunFailed

SQLITE_HEADER = b"SQLite format 3\x00"
REQUIRED_TABLES = ("conversations", "messages")


def default_source() -> Path:
    state = os.environ.get("OPENCLAW_STATE_DIR")
    return Path(state).expanduser() / "lcm.db" if state else Path("~/.openclaw/lcm.db").expanduser()


def expand(path: str | os.PathLike) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(path))))


def _one_line(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "its schema holds bytes that are not UTF-8: the file is damaged"
    return str(exc)


def _remedy(what: str) -> str:
    return ("point --src at lossless-claw's lcm.db" if what == "source"
            else "point --dest at a Remnic lcm.sqlite, or at a new path")


def check_sqlite_file(path: Path, what: str = "source") -> Path:
    """Stat the path ourselves: DuckDB attaches a missing path lazily and fails late with a vague error."""
    if not path.exists():
        raise BadInput(f"{what} not found: {path} (pass --src with the path of lossless-claw's lcm.db)")
    if path.is_dir():
        raise BadInput(f"{what} is a directory, not a database file: {path} (point --src at the lcm.db inside it)")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise BadInput(f"{what} cannot be read: {path}: {exc.strerror}") from None
    if head != SQLITE_HEADER:
        raise BadInput(f"{what} is not a SQLite database: {path} ({_remedy(what)})")
    return path


@dataclass
class Snapshot:
    """A private, consistent, single-file copy of a source database (WAL content folded in)."""
    original: Path
    path: Path
    folder: Path
    size: int
    _digest: threading.Thread | None = None
    _sha256: list = field(default_factory=list)
    _discard: threading.Thread | None = None
    _hash_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def sha256(self) -> str:
        """The snapshot's content hash (for the run ledger), computed in a background thread: hashlib
        releases the GIL, so hashing a large source overlaps with other work instead of adding to it."""
        self.hash_in_background().join()
        return self._sha256[0]

    def hash_in_background(self) -> threading.Thread:
        """Start hashing, once: whichever thread first has a core to spare calls it."""
        with self._hash_lock:
            if self._digest is None:
                self._digest = self._start_hashing()
            return self._digest

    def _start_hashing(self) -> threading.Thread:
        def work():
            h = hashlib.sha256()
            with open(self.path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
            self._sha256.append(h.hexdigest())
        digest = threading.Thread(target=work, name="lcm-etl-sha256", daemon=True)
        digest.start()
        return digest

    def discard_in_background(self) -> None:
        """Start deleting the folder (snapshot, plan, stage, scratch: gigabytes on a large source, seconds
        of unlinking) once nothing reads it any more, so it overlaps with the target's final fsync."""
        if self._digest is not None:
            self._digest.join()
        self._discard = threading.Thread(target=shutil.rmtree, args=(self.folder,), kwargs={"ignore_errors": True},
                                         name="lcm-etl-discard", daemon=True)
        self._discard.start()

    def close(self) -> None:
        if self._digest is not None:
            self._digest.join()
        if self._discard is not None:
            self._discard.join()
        shutil.rmtree(self.folder, ignore_errors=True)


def file_signature(path: Path) -> list:
    """[inode, size, mtime_ns, ctime_ns] of the database and of its -wal (None when absent). Any write,
    checkpoint, WAL reset or restore changes it (ctime cannot be set back)."""
    out: list[list[int] | None] = []
    for p in (path, Path(str(path) + "-wal")):
        try:
            st = p.stat()
            out.append([st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
        except FileNotFoundError:
            out.append(None)
    return out


def take_snapshot(path: Path, what: str = "source", tmp_root: str | None = None, attempts: int = 20,
                  into: Path | None = None) -> Snapshot:
    """Copy db + -wal until an unchanged signature brackets the copy, then checkpoint the copy. The copy is
    made in a private temporary folder, or at `into` (the kept copy of lcm_etl/snapcache.py).

    A live writer appending to the WAL cannot hurt a copy: SQLite reads WAL frames only up to the last
    commit whose checksum chain is intact. A checkpoint or WAL reset during the copy changes the main
    file's or the WAL's signature and the copy is retried.
    """
    check_sqlite_file(path, what)
    folder = Path(tempfile.mkdtemp(prefix="lcm-etl-", dir=tmp_root))
    copy = into or folder / "snapshot.db"
    try:
        for _ in range(attempts):
            before = file_signature(path)
            for suffix in ("-wal", "-journal"):
                Path(str(copy) + suffix).unlink(missing_ok=True)
            shutil.copyfile(path, copy)
            wal = Path(str(path) + "-wal")
            if wal.exists():
                shutil.copyfile(wal, str(copy) + "-wal")
            if unchanged_but_appended(before, file_signature(path)):
                break
        else:
            raise RunFailed(f"{what} kept changing while it was copied: {path}; retry when it is quieter")
        fold_wal(copy, path, what)
        return Snapshot(original=path, path=copy, folder=folder, size=copy.stat().st_size)
    except OSError as exc:
        _remove(folder, into)
        why = ("disk full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc))
        where, remedy = ((f"the cache folder {into.parent}", "or set LCM_ETL_CACHE_DIR elsewhere, or to off") if into
                         else (f"the temporary folder {folder.parent}", "or point TMPDIR elsewhere"))
        raise RunFailed(f"cannot copy the {what} into {where}: {why} (free space there, {remedy}); "
                        "nothing was written") from None
    except BaseException:
        _remove(folder, into)
        raise


def _remove(folder: Path, into: Path | None) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    if into is not None:
        for suffix in ("", "-wal", "-journal"):
            Path(str(into) + suffix).unlink(missing_ok=True)


def unchanged_but_appended(before: list, after: list) -> bool:
    """The copy brackets one consistent state: the main file did not change, and the WAL is the same file and
    only grew. Frames appended to the WAL while it was copied cannot hurt: SQLite reads frames only up to the
    last commit whose checksum chain is intact (a torn last frame is ignored), so the copy is the state at
    some commit. A checkpoint (the main file changes) or a WAL reset or truncation (it shrinks, or a new file)
    is retried. Demanding an unchanged WAL as well made a copy under a steadily writing lossless-claw on a
    busy machine retry until it gave up."""
    (db0, wal0), (db1, wal1) = before, after
    if db0 != db1:
        return False
    if wal0 is None or wal1 is None:
        return wal0 == wal1
    return wal0[0] == wal1[0] and wal1[1] >= wal0[1]


def fold_wal(copy: Path, original: Path, what: str) -> None:
    try:
        con = sqlite3.connect(copy, isolation_level=None)
        try:
            # a private copy: a crash loses only the copy, so no fsync (on a freshly copied file, the first
            # fsync writes the whole file back to disk: 1.6 s of a 452 MB source's re-run)
            con.execute("PRAGMA synchronous=OFF")
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.execute("PRAGMA journal_mode=DELETE")
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:   # a damaged file can make SQLite's message undecodable
        raise BadInput(f"{what} is not a readable SQLite database: {original} ({_one_line(exc)}; "
                       f"{_remedy(what)})") from None


# --------------------------------------------------------------------------------------------------
# Schema detection


@dataclass
class SourceSchema:
    columns: dict[str, list[str]] = field(default_factory=dict)   # table -> columns in table_info order
    integer_ids: bool = False   # messages.message_id is an INTEGER PRIMARY KEY (every release; not the peer's shape)

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    @property
    def parts_shape(self) -> str | None:
        if not self.has("message_parts", "message_id"):
            return None
        return "lossless-claw" if self.has("message_parts", "part_type") else "peer-test"

    @property
    def generation(self) -> str:
        """The oldest lossless-claw release whose migrations produce these columns (see docs/mapping.md)."""
        h = self.has
        if self.parts_shape == "peer-test" or not h("conversations", "conversation_id"):
            return "peer test shape (TEXT ids, message_parts kind/payload)"
        if h("pending_summary_nodes"):
            return "1.0.0-beta line (beta.0+)" if not h("turn_advancements") else "1.0.0-beta line (beta.1+)"
        steps = [
            (h("messages", "openclaw_sender_metadata"), "0.15.2+"),
            (h("conversations", "archive_cause"), "0.14.x"),
            (h("messages", "transcript_entry_id"), "0.13.x"),
            (h("focus_briefs"), "0.11.x-0.12.x"),
            (h("messages", "large_content"), "0.10.x"),
            (h("messages", "identity_hash"), "0.9.x"),
            (h("lcm_migration_state"), "0.8.x"),
            (h("conversation_compaction_telemetry"), "0.7.x"),
            (h("conversations", "active"), "0.6.x"),
            (h("summaries", "model"), "0.5.x"),
            (h("conversations", "session_key"), "0.4.x"),
            (h("summaries", "descendant_token_count"), "0.2.x-0.3.x"),
        ]
        for present, label in steps:
            if present:
                return label
        return "0.1.x"


def detect_schema(db: Path, original: Path) -> SourceSchema:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table','view') ORDER BY name")]
        info = {n: con.execute(f'PRAGMA table_info("{n}")').fetchall() for n in names}
        schema = SourceSchema({n: [r[1] for r in rows] for n, rows in info.items()},
                              integer_ids=any(r[1] == "message_id" and r[5] == 1 and r[2].upper() == "INTEGER"
                                              for r in info.get("messages", [])))
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise BadInput(f"source is not a readable SQLite database: {original} ({_one_line(exc)}; "
                       f"{_remedy('source')})") from None
    finally:
        con.close()
    missing = [t for t in REQUIRED_TABLES if not schema.has(t)]
    if missing or not schema.has("messages", "seq"):
        raise BadInput(f"source is not a lossless-claw database: {original} lacks "
                       f"{', '.join(missing) or 'messages.seq'}; point --src at OpenClaw's lcm.db")
    return schema


# --------------------------------------------------------------------------------------------------
# Normalised views: one fixed column set per table whatever the generation.

CONVERSATION_COLS = ["conversation_id", "session_id", "session_key", "title", "active", "archived_at",
                     "archive_cause", "bootstrapped_at", "created_at", "updated_at"]
MESSAGE_COLS = ["message_id", "conversation_id", "seq", "role", "content", "token_count", "identity_hash",
                "transcript_entry_id", "openclaw_sender_metadata", "stable_event_key", "large_content",
                "created_at"]
SUMMARY_COLS = ["summary_id", "conversation_id", "kind", "depth", "content", "token_count", "earliest_at",
                "latest_at", "descendant_count", "descendant_token_count", "source_message_token_count",
                "created_at", "file_ids", "model"]
LARGE_FILE_COLS = ["file_id", "conversation_id", "file_name", "mime_type", "byte_size", "line_count",
                   "storage_uri", "exploration_summary", "created_at"]
# Part columns with a home in lcm_message_parts (or in the part's identity); every other column goes
# into the payload object so no source value is lost.
PART_MAPPED = {"message_id", "ordinal", "tool_name", "created_at", "kind", "payload", "file_path"}


# Columns an old release lacks are typed NULLs, so expressions over them bind the same in every generation.
_INTEGER_COLS = {"active", "depth", "descendant_count", "descendant_token_count", "source_message_token_count",
                 "byte_size", "line_count", "ordinal", "seq", "token_count"}


def _null(column: str) -> str:
    return f'CAST(NULL AS {"INTEGER" if column in _INTEGER_COLS else "TEXT"}) AS "{column}"'


def _select(schema: SourceSchema, table: str, wanted: list[str]) -> str:
    cols = [f'"{c}"' if schema.has(table, c) else _null(c) for c in wanted]
    return f"SELECT {', '.join(cols)} FROM src.\"{table}\""


def _empty(wanted: list[str]) -> str:
    return "SELECT " + ", ".join(_null(c) for c in wanted) + " WHERE 1=0"


def normalized_views(schema: SourceSchema, dialect: str) -> dict[str, str]:
    """name -> SELECT over the attached `src` schema. dialect is 'duckdb' or 'sqlite'."""
    views = {
        "src_conversations": _select(schema, "conversations", CONVERSATION_COLS),
        "src_messages": _select(schema, "messages", MESSAGE_COLS),
    }
    s = schema
    views["src_summaries"] = _select(s, "summaries", SUMMARY_COLS) if s.has("summaries") else _empty(SUMMARY_COLS)
    views["src_summary_messages"] = (_select(s, "summary_messages", ["summary_id", "message_id", "ordinal"])
                                     if s.has("summary_messages") else _empty(["summary_id", "message_id", "ordinal"]))
    views["src_summary_parents"] = (_select(s, "summary_parents", ["summary_id", "parent_summary_id", "ordinal"])
                                    if s.has("summary_parents") else _empty(["summary_id", "parent_summary_id", "ordinal"]))
    views["src_parts"] = _parts_view(schema, dialect)
    views["src_large_files"] = (_select(s, "large_files", LARGE_FILE_COLS) if s.has("large_files")
                                else _empty(LARGE_FILE_COLS))
    return views


def _json_object(dialect: str, pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        return "'{}'"
    body = ", ".join(f"'{k}', {v}" for k, v in pairs)
    return f"json_object({body})"


def _quoted_pairs(columns: list[str]) -> list[tuple[str, str]]:
    return [(c, '"' + c + '"') for c in columns]


def _json_object_of_non_null(columns: list[str]) -> str:
    """SQLite: a JSON object of the columns that are not NULL, in column order — the bytes
    json_patch('{}', json_object(...)) gives, built in one printf instead of a JSON text with every
    null parsed back and dropped (494,490 parts: 4.86 -> 4.08 s, bench/micro.py)."""
    if not columns:
        return "'{}'"
    terms = []
    for c in columns:
        key = orjson.dumps(c).decode().replace("'", "''")
        terms.append(f"CASE WHEN \"{c}\" IS NOT NULL THEN ',{key}:' || json_quote(\"{c}\") END")
    return f"printf('{{%s}}', substr(printf('{'%s' * len(terms)}', {', '.join(terms)}), 2))"


def _parts_view(schema: SourceSchema, dialect: str) -> str:
    """message_parts as (message_id, ordinal, source_kind, tool_name, file_path, created_at, payload).

    payload is a JSON object of every non-null source column without a target column. It is built
    only in the SQLite dialect (the bulk copy); DuckDB plans with keys only and gets payload NULL.
    """
    cols = schema.columns.get("message_parts")
    shape = schema.parts_shape
    if shape is None:
        return ("SELECT NULL AS message_id, NULL AS ordinal, NULL AS source_kind, NULL AS tool_name, "
                "NULL AS file_path, NULL AS created_at, NULL AS payload, NULL AS raw_type, 0 AS has_input, "
                "0 AS has_output, NULL AS src_rowid WHERE 1=0")
    if "ordinal" in cols:
        ordinal = '"ordinal"'
    else:  # peer-test shape without ordinal: position in insertion order, as the peer does
        order = "rowid" if dialect == "sqlite" else "message_id"
        ordinal = f"(row_number() OVER (PARTITION BY message_id ORDER BY {order}) - 1)"
    extra = [c for c in cols if c not in PART_MAPPED]
    if shape == "lossless-claw":
        kind = '"part_type"'
        file_path = ("coalesce(\"file_url\", \"file_name\", CASE WHEN json_valid(\"patch_files\") "
                     "THEN json_extract(\"patch_files\", '$[0]') END)") if dialect == "sqlite" else "NULL"
        created = '"created_at"' if "created_at" in cols else "NULL"
        payload = _json_object_of_non_null(extra)
    else:
        kind = '"kind"' if "kind" in cols else "'tool_call'"
        file_path = '"file_path"' if "file_path" in cols else "NULL"
        created = '"created_at"' if "created_at" in cols else "NULL"
        base = ("CASE WHEN json_valid(payload) AND json_type(payload) = 'object' THEN json(payload) "
                "WHEN json_valid(payload) THEN json_object('value', json(payload)) "
                "WHEN payload IS NULL THEN '{}' ELSE json_object('value', payload) END"
                if "payload" in cols else "'{}'")
        payload = f"json_patch({base}, {_json_object(dialect, _quoted_pairs(extra))})" if extra else base
    # what a `tool` part holds, read from the columns (not from payload: re-parsing it per row is slow)
    raw_type = ("CASE WHEN json_valid(\"metadata\") THEN json_extract(\"metadata\", '$.rawType') END"
                if "metadata" in cols and dialect == "sqlite" else "NULL")
    has_input = '"tool_input" IS NOT NULL' if "tool_input" in cols else "0"
    has_output = '"tool_output" IS NOT NULL' if "tool_output" in cols else "0"
    if dialect != "sqlite":
        payload = "NULL"
    tool_name = '"tool_name"' if "tool_name" in cols else "NULL"
    # the SQLite writers sort part keys, then read each row by its rowid (a huge payload never sorted)
    src_rowid = "rowid" if dialect == "sqlite" else "NULL"
    return (f"SELECT message_id, {ordinal} AS ordinal, {kind} AS source_kind, {tool_name} AS tool_name, "
            f"{file_path} AS file_path, {created} AS created_at, {payload} AS payload, {raw_type} AS raw_type, "
            f"{has_input} AS has_input, {has_output} AS has_output, {src_rowid} AS src_rowid FROM src.message_parts")
