"""lcm_etl/duck.py: Python rows into DuckDB tables, whichever way they go in."""
from __future__ import annotations

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
