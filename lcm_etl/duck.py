"""A DuckDB connection with the sqlite_scanner extension loaded from the pinned pip package.

The machines this runs on cannot download extensions, so the binary shipped in
`duckdb-extension-sqlite-scanner` is LOADed by path and autoinstall/autoload are switched off: an
accidental `INSTALL` would fail, never silently reach the network.

DuckDB checks the extension's signature on every LOAD: a SHA-256 over its 34 MB, about 0.1 s, which held
the GIL while a sync re-run compared the source's pages on the main thread (0.1 s of a 1.3 s re-run). So the
check is made once per installed file: a LOAD that passed it is remembered in the cache folder
(lcm_etl/cachedir.py) with the file's identity (inode, size, mtime, ctime: file_identity.file_signature, as the kept
snapshot's seal; a ctime cannot be set back; the record is named after the file's real path), and while the file keeps that identity a connection loads it without checking it again
(`allow_unsigned_extensions`, which the connection uses for this one file only: nothing else is ever
LOADed, and autoloading is off). A file replaced, rewritten or touched since is checked again, and one
that fails the check is not loaded and not remembered. LCM_ETL_CACHE_DIR=off checks on every LOAD. A run that
writes nothing (a dry run, inspect, audit) uses a record but keeps none: it creates no file or folder, the
cache folder included (its connection says so in a DuckDB variable, KEEPS_NO_RECORD, which load_extension reads).

This module imports DuckDB only where it is used: `migrate` imports it before reading the source, and
Warmup imports DuckDB and the planning modules over it on its thread meanwhile (about 0.1 s of a sync
re-run; tests/test_import_graph.py checks that importing `migrate` does not import DuckDB).
"""
from __future__ import annotations

import glob
import hashlib
import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from lcm_etl.interrupts import Worker
from lcm_etl.cachedir import cache_root, write_atomically
from lcm_etl.errors import BadInput, LcmEtlError, RunFailed
from lcm_etl.file_identity import file_signature
from lcm_etl.run_options import DEFAULT_MEMORY_LIMIT

if TYPE_CHECKING:
    import duckdb

VERIFIED_FOLDER = "verified-extensions"   # in the cache folder: one record per extension file that passed the check
COMPRESSED_DB = "plan"   # connect(compressed=True): the default database, in memory, compressed at each checkpoint
KEEPS_NO_RECORD = "lcm_etl_keeps_no_record"   # a connection's DuckDB variable: set by connect(keeps_records=False)


def sqlite_scanner_path() -> str:
    import duckdb
    import duckdb_extension_sqlite_scanner as pkg

    pattern = os.path.join(os.path.dirname(pkg.__file__), "extensions", f"v{duckdb.__version__}",
                           "sqlite_scanner.duckdb_extension")
    found = glob.glob(pattern)
    if not found:
        raise RunFailed(f"sqlite_scanner extension for duckdb {duckdb.__version__} not found in "
                        f"{os.path.dirname(pkg.__file__)}; reinstall with "
                        f"`pip install duckdb-extension-sqlite-scanner=={duckdb.__version__}`")
    return found[0]


def connect(workdir: Path | None = None, memory_limit: str = DEFAULT_MEMORY_LIMIT,
            keeps_records: bool = True, compressed: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB for one run: an in-memory database whose buffer manager keeps memory within memory_limit
    by spilling to a temporary folder inside workdir (the run's private folder), whatever the source's
    size. Measured on the generated sources: 2.9 s to plan 200k messages against 5.0 s with the plan in a
    database file (every plan statement there is a committed, fsynced transaction), and the same peak
    RSS (190 MB on 2M messages). keeps_records=False: a run that may write nothing (see the module's docstring).
    compressed=True: the tables go to a compressed in-memory database (`plan`, made the default one), whose rows
    are compressed when checkpoint() runs; DuckDB's own in-memory database keeps them uncompressed (a re-run's
    50,000 new messages of a 5,000,000-event store: jsonl_messages 18 MB, 3 MB compressed; docs/benchmarks.md)."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "memory_limit": memory_limit,
        "preserve_insertion_order": False,
        # one thread: two double some operators' working memory, and planning is a small part of a run
        "threads": 1,
    }
    if workdir is not None:
        config["temp_directory"] = str(workdir / "duckdb.tmp")
    if _scanner_verified_before():
        config["allow_unsigned_extensions"] = True
    import duckdb
    con = duckdb.connect(":memory:", config=config)
    con.execute("SET TimeZone='UTC'")
    if compressed:
        con.execute(f"ATTACH ':memory:' AS {COMPRESSED_DB} (COMPRESS)")
        con.execute(f"USE {COMPRESSED_DB}")
    if not keeps_records:   # on the connection itself: every attach of the run, wherever made, then knows
        con.execute(f"SET VARIABLE {KEEPS_NO_RECORD} = true")
    return con


class Warmup:
    """DuckDB's import and the planning modules' (about 0.1 s), connect() and the scanner's LOAD (about 0.15 s
    more), on a thread while the caller does other work: a sync re-run compares the source with its kept
    snapshot meanwhile (lcm_etl/read/snapshot/snapcache.py), which waits on reads; DuckDB releases the GIL while it loads."""

    def __init__(self, memory_limit: str = DEFAULT_MEMORY_LIMIT, imports: tuple[str, ...] = (),
                 keeps_records: bool = True):
        self._con: duckdb.DuckDBPyConnection | None = None
        self._error: BaseException | None = None
        self._thread = Worker(target=self._run, args=(memory_limit, imports, keeps_records), name="lcm-etl-duckdb")
        try:
            self._thread.start()
        except BaseException:   # a signal while it started: the caller never gets this Warmup to close
            self.close()
            raise

    def _run(self, memory_limit: str, imports: tuple[str, ...], keeps_records: bool) -> None:
        try:
            for name in ("duckdb", *imports):   # the caller's planning modules, loaded for it meanwhile
                importlib.import_module(name)
            self._con = connect(None, memory_limit, keeps_records)
            ensure_sqlite_scanner(self._con)
        except BaseException as exc:   # raised again by take(), in the caller's thread
            self._error = exc

    def take(self, workdir: Path) -> duckdb.DuckDBPyConnection:
        """The connection, spilling into workdir (the run's private folder) as connect(workdir) would."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        con, self._con = self._con, None
        assert con is not None
        con.execute(f"SET temp_directory = '{_quote(str(workdir / 'duckdb.tmp'))}'")
        return con

    def close(self) -> None:
        """Not taken (the run failed before planning): closed here."""
        self._thread.join()
        if self._con is not None:
            self._con.close()
            self._con = None


def checkpoint(con: duckdb.DuckDBPyConnection) -> None:
    """Compress the rows written since the last checkpoint (a connect(compressed=True) connection), and free
    what dropped tables held."""
    con.execute("CHECKPOINT")


def one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple:
    """The one row of an aggregate query (DuckDB's fetchone() may return None; an aggregate always has a row)."""
    row = con.execute(sql).fetchone()
    if row is None:
        raise RunFailed(f"no row from an aggregate query: {sql.strip().splitlines()[0]}")
    return row


def ensure_sqlite_scanner(con: duckdb.DuckDBPyConnection) -> None:
    """Only connections that attach pay the LOAD (and, the first time, the signature check)."""
    loaded = con.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'").fetchone()
    if not (loaded and loaded[0]):
        load_extension(con, sqlite_scanner_path())


def load_extension(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """LOAD the extension at path; a LOAD that checked its signature is remembered for the file, if the file
    kept one identity from before the LOAD to after it (one swapped in meanwhile is not what was checked)."""
    checked = con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone() != (True,)
    keeps = con.execute(f"SELECT getvariable('{KEEPS_NO_RECORD}')").fetchone() != (True,)
    before = _identity(path)
    con.execute(f"LOAD '{_quote(path)}'")   # a file gone meanwhile fails here, as it always did
    if checked and keeps and before is not None and _identity(path) == before:
        remember_verified(path, before)


def _scanner_verified_before() -> bool:
    try:
        return verified_before(sqlite_scanner_path())
    except RunFailed:   # no scanner installed: said by the connection that needs it (ensure_sqlite_scanner)
        return False


def _trust_record(path: str) -> Path | None:
    root = cache_root()
    if root is None:
        return None
    return root / VERIFIED_FOLDER / (hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:24] + ".json")


def _identity(path: str) -> list | None:
    """The file's inode, size, mtime and ctime (the identity the kept snapshot's seal trusts too); None when
    it cannot be stat'ed."""
    return file_signature(Path(path))[0]


def verified_before(path: str) -> bool:
    """The file at path passed DuckDB's signature check in an earlier LOAD and has not changed since."""
    record, identity = _trust_record(path), _identity(path)
    if record is None or identity is None:
        return False
    try:
        return orjson.loads(record.read_bytes()) == identity
    except (OSError, orjson.JSONDecodeError):
        return False


def remember_verified(path: str, identity: list) -> None:
    """Best effort: a record that cannot be written means the next LOAD checks again."""
    record = _trust_record(path)
    if record is not None:
        write_atomically(record, orjson.dumps(identity))


def attach_sqlite(con: duckdb.DuckDBPyConnection, path: str, alias: str, read_only: bool = True) -> None:
    ensure_sqlite_scanner(con)
    mode = ", READ_ONLY" if read_only else ""
    con.execute(f"ATTACH '{_quote(path)}' AS {alias} (TYPE sqlite{mode})")


def _quote(text: str) -> str:
    return text.replace("'", "''")


def translate(exc: duckdb.Error, what: str) -> LcmEtlError:
    """The one mapping of DuckDB failures: resources are a runtime failure (exit 1), anything the data
    can cause (type mismatches, malformed files) is bad input (exit 2)."""
    import duckdb
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, duckdb.OutOfMemoryException):
        return RunFailed(f"planning ran out of its memory budget ({first}); raise --memory-limit; nothing was written")
    if isinstance(exc, duckdb.IOException):
        return RunFailed(f"planning could not use its temporary files ({first}); nothing was written")
    return BadInput(f"{what}: {first}")


def strings(values) -> str:
    """Strings as one bound parameter, for `unnest(from_json($p, '["VARCHAR"]'))`: a Python list bound as VARCHAR[]
    costs 53 µs a value (53 ms of a 1,000-window store's sync with nothing new), its JSON text 1 µs."""
    return orjson.dumps(list(values)).decode()


def table_of_strings(con: duckdb.DuckDBPyConnection, name: str, columns: list[str] | dict[str, str],
                     rows: list[tuple]) -> None:
    """CREATE OR REPLACE TABLE name of VARCHAR columns (or, given a dict, of those types) from Python rows. A
    few thousand rows (a source's conversations, a target's sessions, a store's windows) go in as one JSON text, a
    single bound parameter that DuckDB unpacks: 6 ms for 1,000 rows, 18 ms for 10,000, 0.15 s for 100,000, where a
    statement of literals took 45 ms, the first Arrow scan of a process costs 90 ms (DuckDB imports
    pyarrow.dataset) and one bound parameter per value 740 ms. More rows (1,000,000: 3.3 s), or a NUL (which a
    DuckDB string cannot hold), go through Arrow: one copy. Values travel
    as text and INSERT casts them to the column's type (an integer's text is exact)."""
    types = columns if isinstance(columns, dict) else dict.fromkeys(columns, "VARCHAR")
    columns = list(types)
    cols = ", ".join(f"{c} {t}" for c, t in types.items())
    con.execute(f"CREATE OR REPLACE TABLE {name} ({cols})")
    if not rows:
        return
    rows = [tuple(None if v is None else str(v) for v in r) for r in rows]
    if len(rows) <= _JSON_ROWS and not any("\x00" in v for r in rows for v in r if v):
        picked = ", ".join(f"r[{i}]" for i in range(1, len(columns) + 1))
        con.execute(f"INSERT INTO {name} SELECT {picked} FROM (SELECT unnest(from_json($rows, '[[\"VARCHAR\"]]')) AS r)",
                    {"rows": orjson.dumps(rows).decode()})
        return
    import pyarrow as pa   # here: most runs never need it (28 MB, 40 ms to import)
    table = pa.table({c: pa.array(v, pa.string()) for c, v in zip(columns, zip(*rows))})
    con.register(f"{name}_rows", table)
    try:
        con.execute(f"INSERT INTO {name} SELECT * FROM {name}_rows")
    finally:
        con.unregister(f"{name}_rows")


_JSON_ROWS = 50_000   # as JSON, about what the first Arrow scan's imports cost alone
