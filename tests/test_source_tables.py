"""Each thing said once (issue 23): the source tables lcm-etl reads are listed in lcm_etl/read/lcmdb/source_tables.py,
the target's in lcm_etl/store/target.py, the marks' figures in lcm_etl/store/marks.py. What reads those lists
follows them by construction; the SQL steps that name tables or figures themselves are checked against them
here, so a table added to one and not the other fails a test."""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import duckdb
import pytest

from conftest import FIXTURES, copy_fixture
from lcm_etl import duck
from lcm_etl.planning import delta
from lcm_etl.steps import engine as steps, pipeline
from lcm_etl.planning.plan import open_source
from lcm_etl.read.snapshot import page_owners
from lcm_etl.read.lcmdb import subset
from lcm_etl.read.lcmdb.source_schema import KNOWN_TABLES, REQUIRED_TABLES, detect_schema, normalized_views
from lcm_etl.read.lcmdb.source_tables import SOURCE_TABLES
from lcm_etl.store import marks
from lcm_etl.store.target import REMNIC_SCHEMA, REMNIC_TABLES

VIEWS = [t.view for t in SOURCE_TABLES]


def test_every_normalised_view_and_every_declared_source_input_is_one_of_the_registrys_tables(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path)
    schema = detect_schema(src, src)
    assert list(normalized_views(schema, "duckdb")) == VIEWS == list(normalized_views(schema, "sqlite"))
    assert list(pipeline.SOURCE_VIEWS) == VIEWS
    assert set(REQUIRED_TABLES) <= {t.name for t in SOURCE_TABLES} <= KNOWN_TABLES


def test_the_marks_steps_read_every_view_the_registry_lists():
    """03 digests every table of a conversation, 02 counts the rows of no conversation of every table marked
    `orphans`: a table added to the registry and not to them would change without changing a mark."""
    assert set(VIEWS) <= set(steps.step("03_source_marks").reads)
    assert {t.view for t in SOURCE_TABLES if t.orphans} <= set(steps.step("02_source_global").reads)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marks")
    src = copy_fixture("basic-0.15.3.db", folder)
    schema = detect_schema(src, src)
    con = open_source(src, schema, src, workdir=folder)
    delta.mark_source(con, schema, src)
    yield con, src
    con.close()


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {table}").fetchall()]


def test_the_marks_the_steps_compute_have_the_columns_and_types_the_marks_module_declares(planned):
    """08 compares whole rows and 95 stores them by position: 02, 03 and 04 must produce exactly the
    columns of lcm_etl/store/marks.py, in its order, with the types the recorded marks are loaded with."""
    con, _ = planned
    for table, kind in (("source_marks", marks.CONVERSATION), ("source_global", marks.SOURCE)):
        assert _columns(con, table) == list(kind.duck_types().items())
    figures = [f for t in SOURCE_TABLES if t.mark for f in (t.mark, f"{t.mark}_hash")]
    assert [c for c in marks.CONVERSATION.figures if c not in ("conversation_hash", "content_digest")] == figures
    empty = sqlite3.connect(":memory:")
    empty.executescript(REMNIC_SCHEMA)
    steps.run_stage(pipeline.TARGET_MARKS, empty)
    assert [d[0] for d in empty.execute("SELECT * FROM temp.target_marks").description] == list(marks.SESSION.columns)


def test_the_marks_tables_and_the_step_that_writes_them_name_the_same_tables():
    produces = steps.step("95_write_provenance").header_field("produces")
    assert all(k.table in produces for k in marks.KINDS)
    con = sqlite3.connect(":memory:")
    con.executescript(marks.SCHEMA)
    for k in marks.KINDS:
        assert [r[1] for r in con.execute(f"PRAGMA table_info({k.table})")] == ["source_path", "run_id", *k.columns]


def test_every_row_of_every_source_table_is_placed_with_its_conversation_and_copied_with_its_scope(planned, tmp_path):
    """page_owners places a changed row by the registry's owners; subset copies a scope's rows by its
    scope_rows: over every conversation, both see every row of every table (the fixture has no orphans)."""
    _, src = planned
    lite = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    conversations = {r[0] for r in lite.execute("SELECT conversation_id FROM conversations")}
    copy = subset.source_subset(src, tmp_path / "scope.sqlite", [str(c) for c in conversations])
    copied = sqlite3.connect(copy)
    for t in SOURCE_TABLES:
        rows = lite.execute(page_owners._owner_query(t, values=False), (-(1 << 63), (1 << 63) - 1)).fetchall()
        assert len(rows) == lite.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0]
        assert {owner for row in rows for owner in row[1:3]} <= conversations, t.name
        assert copied.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] == len(rows), t.name
    lite.close()
    copied.close()


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_table_lcm_etl_reads_is_in_the_registry_and_every_other_is_known(name, tmp_path):
    src = copy_fixture(name, tmp_path)   # a copy: even a read-only open may touch a WAL database's -shm
    schema = detect_schema(src, src)
    assert schema.unknown()["tables_not_kept"] == []


def test_the_target_tables_named_once_are_the_ones_remnics_schema_creates():
    created = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \(([^;]*)\)", REMNIC_SCHEMA)
    assert [name for name, _ in created if name != "lcm_meta"] == [t.name for t in REMNIC_TABLES]
    ranged = {name for name, ddl in created if "AUTOINCREMENT" in ddl}
    assert ranged == {t.name for t in REMNIC_TABLES if t.ranged}


def test_every_module_that_lists_the_target_tables_reads_them_from_the_one_list():
    """No other module of the package spells out two or more of Remnic's table names in one list."""
    names = [t.name for t in REMNIC_TABLES]
    listed = re.compile(r"[(\[{]\s*(?:\"lcm_(?:messages|message_parts|summary_nodes|compaction_events)\",\s*){2,}")
    package = Path(duck.__file__).parent
    found = [str(p.relative_to(package)) for p in package.rglob("*.py") if listed.search(p.read_text())]
    assert found == [] and len(names) == 4

