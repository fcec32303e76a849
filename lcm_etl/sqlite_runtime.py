"""SQLite as lcm-etl uses it: which library every connection goes through (chosen once, here), one process-wide
setting (the CLI applies it first thing) and the helpers every connection of a run shares (attachments,
private-file pragmas, interruption).

Which SQLite. Every module opens its connections through `sqlite3` from here, never the standard library's
directly: the pysqlite3 wheel's SQLite (3.53.4 in pysqlite3 0.6.1) where it is installed — pyproject.toml installs
it where a wheel exists: Linux x86_64, macOS arm64, Windows amd64 — else Python's own module, which uses the
system's library (3.40.1 on Debian 12, 3.45 on Ubuntu 24.04). SQLite 3.7.0 to 3.51.2 has the WAL-reset bug (fixed in
3.51.3, backported to 3.50.7 and 3.44.6): two processes writing or checkpointing one WAL database can corrupt it,
which is lcm-etl writing a target a running Remnic holds open. One module object for every connection also keeps
one family of exception classes: pysqlite3's errors are not the standard library's. `LCM_ETL_SQLITE=system` uses
Python's own module even where pysqlite3 is installed (to compare the two, docs/benchmarks.md). DuckDB's SQLite
scanner embeds its own SQLite; it only reads lcm-etl's private snapshots and scratch files.

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
import importlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3
else:
    def _library():
        """pysqlite3's module where installed (unless LCM_ETL_SQLITE=system), else the standard library's."""
        if os.environ.get("LCM_ETL_SQLITE") != "system":
            try:
                from pysqlite3 import dbapi2
                return dbapi2
            except ImportError:
                pass
        import sqlite3 as standard
        return standard

    sqlite3 = _library()

SQLITE_OK = 0
SQLITE_CONFIG_MEMSTATUS = 9
UTF8_JSON = "lcm_etl_utf8_json"   # the SQL name of utf8_json(), on every connection attach_all gives views
_LONE_SURROGATE = re.compile("[\udc80-\udcff]")


def disable_memstatus() -> bool:
    """Turn SQLite's allocation counter off for this process. True if it is off now."""
    try:
        # the module's own symbols, or those of the libsqlite3 it links (dlsym searches its dependencies)
        lib = ctypes.CDLL(extension_module().__file__)
        lib.sqlite3_config.argtypes = [ctypes.c_int]   # the rest is variadic: passed as such
        if lib.sqlite3_shutdown() != SQLITE_OK:
            return False
        done = lib.sqlite3_config(SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0)) == SQLITE_OK
        return lib.sqlite3_initialize() == SQLITE_OK and done
    except (ImportError, OSError, AttributeError):
        return False


def extension_module():
    """The C extension of the module in use: pysqlite3._sqlite3 (SQLite linked in), or the standard _sqlite3."""
    return importlib.import_module("pysqlite3._sqlite3" if sqlite3.__name__.startswith("pysqlite3") else "_sqlite3")


def library() -> str:
    """The SQLite in use, as --version says it: its version, and which module brought it."""
    if sqlite3.__name__.startswith("pysqlite3"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            module = f"pysqlite3 {version('pysqlite3')}"
        except PackageNotFoundError:   # a pysqlite3 built in place, without metadata
            module = "pysqlite3"
    else:
        module = "Python's sqlite3 module, the system library"
    return f"SQLite {sqlite3.sqlite_version} ({module})"


def wal_reset_bug(version: tuple[int, ...]) -> bool:
    """Whether a SQLite version has the WAL-reset bug: 3.7.0 to 3.51.2, but for the backports (3.50.7 and later
    3.50 releases, 3.44.6 and later 3.44 releases)."""
    if not (3, 7, 0) <= version < (3, 51, 3):
        return False
    return not ((version[:2] == (3, 50) and version >= (3, 50, 7)) or (version[:2] == (3, 44) and version >= (3, 44, 6)))


def wal_reset_warning(target: Path) -> str | None:
    """The report's warning when the SQLite in use has the WAL-reset bug and `target` is in WAL mode (its header's
    read and write versions are 2), None otherwise: a run writing it while Remnic has it open can corrupt it."""
    if not wal_reset_bug(sqlite3.sqlite_version_info):
        return None
    try:
        with open(target, "rb") as fh:
            header = fh.read(20)
    except OSError:
        return None
    if header[18:20] != b"\x02\x02":
        return None
    return (f"the target is in WAL mode and this lcm-etl writes with SQLite {sqlite3.sqlite_version}, which has the "
            "WAL-reset bug (fixed in 3.51.3, 3.50.7, 3.44.6): writing it while Remnic has it open can corrupt it; "
            "stop Remnic first, or install lcm-etl where pysqlite3 has a wheel (docs/cli.md, \"Which SQLite\")")


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


def before_lock(target: Path, dry_run: bool) -> str | None:
    """How a run reads lcm-etl's tables of its target before it writes: reconcile's records, before the run lock;
    migrate's no-op shortcut, under it but before the run's own transaction. As any reader, through its -wal and -shm (the run writes the target next); a dry run, which leaves
    nothing beside it, the main file alone, immutable, and not at all (None) when its -wal holds commits."""
    wal = Path(f"{target}-wal")
    return "mode=ro" if not dry_run else None if wal.exists() and wal.stat().st_size else "mode=ro&immutable=1"


def has_table(con: sqlite3.Connection, name: str, schema: str = "main") -> bool:
    """Whether the database attached as `schema` holds the table `name`."""
    return con.execute(f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() \
        is not None


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
