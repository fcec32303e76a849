"""A DuckDB connection with the sqlite_scanner extension loaded from the pinned pip package.

The machines this runs on cannot download extensions, so the binary shipped in
`duckdb-extension-sqlite-scanner` is LOADed by path and autoinstall/autoload are switched off: an
accidental `INSTALL` would fail, never silently reach the network.
"""
from __future__ import annotations

import glob
import os

import duckdb

from .errors import RunFailed


def sqlite_scanner_path() -> str:
    import duckdb_extension_sqlite_scanner as pkg

    pattern = os.path.join(os.path.dirname(pkg.__file__), "extensions", f"v{duckdb.__version__}",
                           "sqlite_scanner.duckdb_extension")
    found = glob.glob(pattern)
    if not found:
        raise RunFailed(f"sqlite_scanner extension for duckdb {duckdb.__version__} not found in "
                        f"{os.path.dirname(pkg.__file__)}; reinstall with "
                        f"`pip install duckdb-extension-sqlite-scanner=={duckdb.__version__}`")
    return found[0]


def connect(threads: int | None = None, memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(config={
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "memory_limit": memory_limit,
    })
    con.execute("SET TimeZone='UTC'")
    if threads:
        con.execute(f"SET threads={int(threads)}")
    return con


def ensure_sqlite_scanner(con: duckdb.DuckDBPyConnection) -> None:
    """LOAD costs about a third of a second (signature check), so only connections that attach pay it."""
    loaded = con.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'").fetchone()
    if not (loaded and loaded[0]):
        con.execute(f"LOAD '{sqlite_scanner_path()}'")


def attach_sqlite(con: duckdb.DuckDBPyConnection, path: str, alias: str, read_only: bool = True) -> None:
    ensure_sqlite_scanner(con)
    mode = ", READ_ONLY" if read_only else ""
    con.execute(f"ATTACH '{_quote(path)}' AS {alias} (TYPE sqlite{mode})")


def _quote(text: str) -> str:
    return text.replace("'", "''")
