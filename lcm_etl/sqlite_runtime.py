"""SQLite as lcm-etl's threads use it: one process-wide setting (the CLI applies it first thing) and the
helpers every connection of a run shares (attachments, private-file pragmas, interruption).

SQLite counts every allocation for sqlite3_status() under one global mutex (SQLITE_CONFIG_MEMSTATUS, on
by default). A run drives SQLite from two threads at once — a new target's builder beside the writer, or
the parts flattener beside an existing target's writer — and both allocate per row: two threads
flattening every part of the 200k-message source took 11.2 s each with the counter on, 3.6 s each with
it off, against 4.3 s for one thread alone (`bench/micro.py`). lcm-etl never reads
sqlite3_status(), so its processes turn the counter off.

SQLite takes configuration only between sqlite3_shutdown() and sqlite3_initialize(), with no connection
open. So this is done by the CLI before any work, never on import: a program that imports lcm_etl may
have connections open. Where it cannot be done (a Python whose SQLite hides these symbols), runs are
merely slower.
"""
from __future__ import annotations

import ctypes
import re
import sqlite3
from pathlib import Path

SQLITE_OK = 0
SQLITE_CONFIG_MEMSTATUS = 9
UTF8_JSON = "lcm_etl_utf8_json"   # the SQL name of utf8_json(), on every connection attach_all gives views
_LONE_SURROGATE = re.compile("[\udc80-\udcff]")


def disable_memstatus() -> bool:
    """Turn SQLite's allocation counter off for this process. True if it is off now."""
    try:
        import _sqlite3

        # the module's own symbols, or those of the libsqlite3 it links (dlsym searches its dependencies)
        lib = ctypes.CDLL(_sqlite3.__file__)
        lib.sqlite3_config.argtypes = [ctypes.c_int]   # the rest is variadic: passed as such
        if lib.sqlite3_shutdown() != SQLITE_OK:
            return False
        done = lib.sqlite3_config(SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0)) == SQLITE_OK
        return lib.sqlite3_initialize() == SQLITE_OK and done
    except (ImportError, OSError, AttributeError):
        return False


def attach_all(con: sqlite3.Connection, attachments: dict[str, Path], views: dict[str, str]) -> None:
    """ATTACH each database under its alias, then create the TEMP views that read them (and utf8_json, which
    the source's part view and the message writers call)."""
    for alias, path in attachments.items():
        con.execute(f"ATTACH '{quote_path(path)}' AS {alias}")
    con.create_function(UTF8_JSON, 1, utf8_json, deterministic=True)
    for name, sql in views.items():
        con.execute(f"CREATE TEMP VIEW {name} AS {sql}")


def utf8_json(value: bytes | None) -> bytes | None:
    """JSON text SQLite built from source values (a part's payload, a message's metadata; as bytes) made valid
    UTF-8. SQLite keeps whatever bytes a text value is given, and its JSON functions copy them into the JSON as
    they are, where no JSON parser takes them. Each byte that is not UTF-8 (they can only be inside JSON
    strings) becomes the escape of the lone surrogate Python's surrogateescape gives it (\\udc80-\\udcff): the
    JSON is valid and the bytes can be told back (`.encode("utf-8", "surrogateescape")`). UTF-8 text, nearly
    always, is returned as it came: ASCII without decoding it (isascii() allocates nothing, where decode() builds
    a str of the whole value: 0.06 s of the 0.33 s CPU SQLite's calls cost on the 200k source's parts).

    SQLite calls this for every row: no check SQLite 3.40 or DuckDB can make finds the rows that need it for less
    than the call costs (docs/benchmarks.md, "The UTF-8 repair's cost")."""
    if value is None or value.isascii():
        return value
    try:
        value.decode("utf-8")
        return value
    except UnicodeDecodeError:
        text = value.decode("utf-8", "surrogateescape")
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def uri(path: Path | str, query: str = "mode=ro") -> str:
    """SQLite's URI of a file, read-only unless `query` says otherwise. as_uri() percent-encodes a path's `#`,
    `?`, `%` and spaces, which `file:{path}` would read as URI syntax (another file, or none). A plain path stays
    right where no URI is read: attach_all's ATTACH on a connection opened without one, DuckDB's ATTACH."""
    return f"{Path(path).absolute().as_uri()}?{query}"


def connect(path: Path | str, query: str = "mode=ro", **kwargs) -> sqlite3.Connection:
    """The one way lcm-etl opens a file through a URI (`query`: mode=ro, immutable=1, ...)."""
    return sqlite3.connect(uri(path, query), uri=True, **kwargs)


def quote_path(path: Path) -> str:
    return str(path).replace("'", "''")


def private_file(con: sqlite3.Connection, cache_kib: int = 16384) -> None:
    """Pragmas for a file nobody reads before it is finished (a scratch file, a new target being built):
    no journal (a crash leaves a file the next run deletes), no syncs (one fsync before a link), foreign
    keys checked once at the end (aside.BuiltAside)."""
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute(f"PRAGMA cache_size=-{cache_kib}")
    con.execute("PRAGMA foreign_keys=OFF")


def interrupt(con: sqlite3.Connection | None) -> None:
    """Interrupt a connection another thread may be closing this very moment."""
    if con is not None:
        try:
            con.interrupt()
        except sqlite3.ProgrammingError:   # closed meanwhile: nothing left to interrupt
            pass
