"""What a lossless-claw lcm.db holds: its schema generation, and views that read every generation alike.

Schema generations differ by columns, never by a version number (lossless-claw never sets
user_version): `SourceSchema` records which columns exist and `normalized_views()` renders one fixed
column set per table, with NULL for columns an old release did not have. The same view SQL runs in
DuckDB (planning) and in SQLite (the bulk copy of content), so both see identical rows.
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from lcm_etl import sqlite_runtime
from lcm_etl.errors import BadInput
from lcm_etl.read.lcmdb.source_tables import BY_NAME, LEFT_OUT, SOURCE_TABLES
from lcm_etl.read.snapshot.sqlite_copy import unreadable
from lcm_etl.sqlite_runtime import UTF8_JSON

# what a session id or key is trimmed of (10_sessions.sql, transcript_decision.settle)
WHITESPACE = " \t\n\r\x0b\x0c\u00a0\ufeff"

# The one rule for every command (inspect, migrate, reconcile --src, audit): a table every lossless-claw release
# creates (0.1.0 on, and the peer importer's test shape too) must be there, or the file is not a lossless-claw
# database; a table a shape lcm-etl reads can lack (the peer's test shape has no message_parts or large_files)
# is read as empty (normalized_views). Which is which: lcm_etl/read/lcmdb/source_tables.py.
REQUIRED_TABLES = tuple(t.name for t in SOURCE_TABLES if t.required)


# Every table a lossless-claw release creates, read or deliberately left out; any other table is a newer
# release's, and is listed in the report as not kept (unknown()).
KNOWN_TABLES = frozenset(BY_NAME) | frozenset(LEFT_OUT)
_FTS_SHADOWS = ("_config", "_content", "_data", "_docsize", "_idx")


def _known_table(name: str) -> bool:
    if name in KNOWN_TABLES or name.startswith("sqlite_stat"):
        return True
    base, _, _ = name.rpartition("_")
    return name.endswith(_FTS_SHADOWS) and base in ("messages_fts", "summaries_fts", "summaries_fts_cjk")


@dataclass
class SourceSchema:
    columns: dict[str, list[str]] = field(default_factory=dict)   # table -> columns in table_info order
    integer_ids: bool = False   # messages.message_id is an INTEGER PRIMARY KEY (every release; not the peer's shape)
    views: frozenset[str] = frozenset()   # the names in `columns` that are views (they hold no rows of their own)

    def unknown(self) -> dict[str, list[str]]:
        """What lcm-etl's mapping does not name (a newer lossless-claw's tables and columns), said in every report
        rather than dropped without a word: the columns a mapped message has beyond MESSAGE_COLS are kept in its
        metadata (extra_message_columns), those of the other mapped rows are listed as not kept, and so are
        unknown tables. message_parts has none: its payload takes every column it has (_parts_view)."""
        tables = sorted(t for t in self.columns if t not in self.views and not _known_table(t))
        kept = {f"messages.{c}" for c in extra_message_columns(self)}
        unmapped = {f"{t}.{c}" for t, mapped in _MAPPED_COLUMNS.items() for c in self.columns.get(t, []) if c not in mapped}
        return {"tables_not_kept": tables, "columns_in_metadata": sorted(kept),
                "columns_not_kept": sorted(unmapped - kept)}

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
        return next((label for present, label in steps if present), "0.1.x")


def detect_schema(db: Path, original: Path) -> SourceSchema:
    con = sqlite_runtime.connect(db)
    try:
        kinds = dict(con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table','view') ORDER BY name"))
        info = {n: con.execute(f'PRAGMA table_info("{n}")').fetchall() for n in kinds}
        schema = SourceSchema({n: [r[1] for r in rows] for n, rows in info.items()},
                              integer_ids=any(r[1] == "message_id" and r[5] == 1 and r[2].upper() == "INTEGER"
                                              for r in info.get("messages", [])),
                              views=frozenset(n for n, kind in kinds.items() if kind == "view"))
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise unreadable("source", original, exc) from None
    finally:
        con.close()
    missing = [t for t in REQUIRED_TABLES if not schema.has(t)]
    if missing:
        raise BadInput(f"source is not a lossless-claw database: {original} lacks the "
                       f"{'table' if len(missing) == 1 else 'tables'} {', '.join(missing)}, which every lossless-claw "
                       "release has; point --src at OpenClaw's lcm.db")
    if not schema.has("messages", "seq"):
        raise BadInput(f"source is not a lossless-claw database: {original} lacks messages.seq; "
                       "point --src at OpenClaw's lcm.db")
    return schema


# --------------------------------------------------------------------------------------------------
# Normalised views: one fixed column set per table whatever the generation.

# the columns each view maps: lcm_etl/read/lcmdb/source_tables.py (message_parts maps every column, _parts_view)
MESSAGE_COLS = list(BY_NAME["messages"].columns or ())
_MAPPED_COLUMNS = {t.name: list(t.columns) for t in SOURCE_TABLES if t.columns is not None}
# the metadata keys 72_write_messages.sql writes from the mapped columns: a message column of a newer release
# with one of these names is not put in metadata (it would overwrite the mapped value) but listed as not kept
_METADATA_KEYS = {"conversation_id", "identity_hash", "source", "source_seq", "title", "session_key",
                  "source_message_id", "source_created_at", "transcript_entry_id", "openclaw_sender_metadata",
                  "stable_event_key", "large_content"}


def extra_message_columns(schema: SourceSchema) -> list[str]:
    """messages columns outside MESSAGE_COLS, in table order: each goes into metadata under its own name (docs/mapping.md:
    every source column without a target column is kept there)."""
    return [c for c in schema.columns.get("messages", []) if c not in MESSAGE_COLS and c not in _METADATA_KEYS]


# Part columns with a home in lcm_message_parts (or in the part's identity); every other column goes
# into the payload object so no source value is lost.
PART_MAPPED = {"message_id", "ordinal", "tool_name", "created_at", "kind", "payload", "file_path"}


# Columns an old release lacks are typed NULLs, so expressions over them bind the same in every generation.
_INTEGER_COLS = {"active", "depth", "descendant_count", "descendant_token_count", "source_message_token_count",
                 "byte_size", "line_count", "ordinal", "seq", "token_count"}


def _null(column: str) -> str:
    return f'CAST(NULL AS {"INTEGER" if column in _INTEGER_COLS else "TEXT"}) AS "{column}"'


def _select(schema: SourceSchema, table: str, wanted: list[str], more: tuple[str, ...] = (),
            nulled: tuple[str, ...] = ()) -> str:
    """`nulled`: columns read as NULL whatever the source holds (what one engine must never read)."""
    cols = [f'"{c}"' if schema.has(table, c) and c not in nulled else _null(c) for c in wanted]
    return f"SELECT {', '.join(cols + list(more))} FROM src.\"{table}\""


def _empty(wanted: list[str]) -> str:
    return "SELECT " + ", ".join(_null(c) for c in wanted) + " WHERE 1=0"


def normalized_views(schema: SourceSchema, dialect: str) -> dict[str, str]:
    """name -> SELECT over the attached `src` schema, one per table of source_tables.SOURCE_TABLES. dialect is
    'duckdb' or 'sqlite'."""
    views = {}
    for t in SOURCE_TABLES:
        if t.name == "messages":
            views[t.view] = _messages_view(schema, dialect)
        elif t.columns is None:
            views[t.view] = _parts_view(schema, dialect)
        elif t.required or schema.has(t.name):   # REQUIRED_TABLES: detect_schema checked them
            views[t.view] = _select(schema, t.name, list(t.columns))
        else:
            views[t.view] = _empty(list(t.columns))
    return views


def _messages_view(schema: SourceSchema, dialect: str) -> str:
    """MESSAGE_COLS, and extra_columns: a JSON object of the non-null values of a newer release's columns
    (extra_message_columns), NULL when the source has none. Built only in the SQLite dialect (the writer's);
    DuckDB plans without it, and without content: the plan decides by identity and order, and a value read
    into DuckDB counts against its memory budget whole (a sync re-run materialises the scope's rows, and an
    80 MB message ran it out of its 96 MB)."""
    extra = extra_message_columns(schema)
    obj = _json_object_of_non_null(extra) if extra and dialect == "sqlite" else "CAST(NULL AS TEXT)"
    return _select(schema, "messages", MESSAGE_COLS, (f"{obj} AS extra_columns",),
                   nulled=() if dialect == "sqlite" else ("content",))


def _json_object(columns: list[str]) -> str:
    return "json_object(" + ", ".join(f"'{c}', \"{c}\"" for c in columns) + ")"


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
    if shape is None or cols is None:   # a parts shape implies the table, hence its columns
        return ("SELECT NULL AS message_id, NULL AS ordinal, NULL AS source_kind, NULL AS tool_name, "
                "NULL AS file_path, NULL AS created_at, NULL AS payload, NULL AS raw_type, 0 AS has_input, "
                "0 AS has_output, NULL AS src_rowid WHERE 1=0")
    if "ordinal" in cols:
        ordinal = '"ordinal"'
    else:  # peer-test shape without ordinal: position in insertion order, as the peer does
        order = "rowid" if dialect == "sqlite" else "message_id"
        ordinal = f"(row_number() OVER (PARTITION BY message_id ORDER BY {order}) - 1)"
    extra = [c for c in cols if c not in PART_MAPPED]
    created = '"created_at"' if "created_at" in cols else "NULL"
    if shape == "lossless-claw":
        kind = '"part_type"'
        file_path = ("coalesce(\"file_url\", \"file_name\", CASE WHEN json_valid(\"patch_files\") "
                     "THEN json_extract(\"patch_files\", '$[0]') END)") if dialect == "sqlite" else "NULL"
        payload = _json_object_of_non_null(extra)
    else:
        kind = '"kind"' if "kind" in cols else "'tool_call'"
        file_path = '"file_path"' if "file_path" in cols else "NULL"
        base = ("CASE WHEN json_valid(payload) AND json_type(payload) = 'object' THEN json(payload) "
                "WHEN json_valid(payload) THEN json_object('value', json(payload)) "
                "WHEN payload IS NULL THEN '{}' ELSE json_object('value', payload) END"
                if "payload" in cols else "'{}'")
        payload = f"json_patch({base}, {_json_object(extra)})" if extra else base
    # what a `tool` part holds, read from the columns (not from payload: re-parsing it per row is slow)
    raw_type = ("CASE WHEN json_valid(\"metadata\") THEN json_extract(\"metadata\", '$.rawType') END"
                if "metadata" in cols and dialect == "sqlite" else "NULL")
    has_input = '"tool_input" IS NOT NULL' if "tool_input" in cols else "0"
    has_output = '"tool_output" IS NOT NULL' if "tool_output" in cols else "0"
    if dialect != "sqlite":
        payload = "NULL"
    else:   # SQLite's JSON functions copy text bytes that are not UTF-8 as they are: sqlite_runtime.utf8_json
        payload = f"CAST({UTF8_JSON}(CAST({payload} AS BLOB)) AS TEXT)"
    tool_name = '"tool_name"' if "tool_name" in cols else "NULL"
    # the SQLite writers sort part keys, then read each row by its rowid (a huge payload never sorted)
    src_rowid = "rowid" if dialect == "sqlite" else "NULL"
    return (f"SELECT message_id, {ordinal} AS ordinal, {kind} AS source_kind, {tool_name} AS tool_name, "
            f"{file_path} AS file_path, {created} AS created_at, {payload} AS payload, {raw_type} AS raw_type, "
            f"{has_input} AS has_input, {has_output} AS has_output, {src_rowid} AS src_rowid FROM src.message_parts")
