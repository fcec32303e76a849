"""lcm_etl/duck.py: Python rows into DuckDB tables, whichever way they go in; the scanner's signature checked once per
installed file."""
from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing

import duckdb
import pytest
from hypothesis import given, settings, strategies as st

from lcm_etl import duck
from lcm_etl.duck import table_of_strings

TEXT = st.one_of(st.none(), st.text(max_size=12))


def _read(con, name: str) -> list[tuple]:
    return con.execute(f"SELECT * FROM {name}").fetchall()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(TEXT, TEXT), max_size=30))
def test_a_table_of_strings_holds_exactly_the_rows_given_quotes_nuls_and_nulls_included(rows):
    con = duck.connect()   # as a run has it: no extension autoloaded (the JSON reader is built in)
    table_of_strings(con, "t", ["a", "b"], rows)
    assert sorted(_read(con, "t"), key=repr) == sorted(rows, key=repr)


@pytest.mark.parametrize("n", [0, 1, 4999, 5000, 5001, 12000])
def test_a_table_of_strings_of_any_size_holds_every_row_once(n):
    con = duckdb.connect()
    rows = [(f"session-{i}", f"it's {i}:{i % 7}") for i in range(n)]
    table_of_strings(con, "t", ["session_id", "mark"], rows)
    assert con.execute("SELECT count(*), count(DISTINCT session_id) FROM t").fetchone() == (n, n)
    assert sorted(_read(con, "t")) == sorted(rows)
    assert [r[1] for r in con.execute("DESCRIBE t").fetchall()] == ["VARCHAR", "VARCHAR"]


def test_a_table_of_strings_replaces_the_table_of_the_same_name():
    con = duckdb.connect()
    table_of_strings(con, "t", ["a"], [("x",), ("y",)])
    table_of_strings(con, "t", ["a"], [("z",)])
    assert _read(con, "t") == [("z",)]


def test_a_table_of_strings_takes_integers_as_their_text():
    con = duckdb.connect()
    table_of_strings(con, "t", ["a", "b"], [(7, "x")])
    assert _read(con, "t") == [("7", "x")]


# the signature check of the sqlite_scanner extension, made once per installed file (lcm_etl/duck.py)

def _unsigned_allowed(con) -> bool:
    return con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone() == (True,)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LCM_ETL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def extension_copy(tmp_path) -> str:
    copy = tmp_path / "sqlite_scanner.duckdb_extension"
    shutil.copyfile(duck.sqlite_scanner_path(), copy)
    return str(copy)


def test_the_scanner_is_checked_on_its_first_load_and_then_loaded_unchecked_while_its_file_is_unchanged(cache, tmp_path):
    first = duck.connect()
    assert not _unsigned_allowed(first)
    duck.ensure_sqlite_scanner(first)
    assert duck.verified_before(duck.sqlite_scanner_path())
    later = duck.connect()
    assert _unsigned_allowed(later)
    with closing(sqlite3.connect(tmp_path / "s.db")) as lite:
        lite.execute("CREATE TABLE t (a TEXT)")
        lite.execute("INSERT INTO t VALUES ('held')")
        lite.commit()
    duck.attach_sqlite(later, str(tmp_path / "s.db"), "s")
    assert later.execute("SELECT a FROM s.t").fetchall() == [("held",)]


def test_an_extension_file_changed_since_its_check_is_checked_again(cache, extension_copy):
    con = duckdb.connect(config={"autoload_known_extensions": False})
    duck.load_extension(con, extension_copy)
    assert duck.verified_before(extension_copy)
    os.utime(extension_copy, ns=(1, 1))   # its mtime (and ctime) changed: another file, as far as trust goes
    assert not duck.verified_before(extension_copy)


def test_a_tampered_extension_is_refused_and_not_remembered(cache, extension_copy):
    with open(extension_copy, "r+b") as fh:
        fh.seek(10_000_000)
        byte = fh.read(1)
        fh.seek(10_000_000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    con = duckdb.connect(config={"autoload_known_extensions": False})
    with pytest.raises(duckdb.IOException, match="signature is either missing or invalid"):
        duck.load_extension(con, extension_copy)
    assert not duck.verified_before(extension_copy)
    assert not (cache / duck.VERIFIED_FOLDER).exists()


def test_with_the_cache_off_every_load_checks_the_signature(monkeypatch):
    monkeypatch.setenv("LCM_ETL_CACHE_DIR", "off")
    for _ in range(2):
        con = duck.connect()
        duck.ensure_sqlite_scanner(con)
        assert not _unsigned_allowed(con)


def test_a_missing_extension_file_fails_as_duckdb_says_and_records_nothing(cache, tmp_path):
    con = duckdb.connect(config={"autoload_known_extensions": False})
    with pytest.raises(duckdb.IOException):
        duck.load_extension(con, str(tmp_path / "gone.duckdb_extension"))
    assert not (cache / duck.VERIFIED_FOLDER).exists()
