"""lcm_etl/load/loader.py: the staged plan handed to the write strategy, and a failure on the way."""
from __future__ import annotations

import sqlite3

import pytest

from conftest import copy_fixture, migrate_api
from undolib import digest
from lcm_etl.commands import migrate as migrate_module
from lcm_etl.errors import RunFailed
from lcm_etl.load import loader

APPEND = ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
          "SELECT conversation_id, max(seq) + 1, 'user', 'one more', 5, '2026-11-23 09:00:00' "
          "FROM messages WHERE conversation_id = 2")


def test_a_stage_that_cannot_be_indexed_fails_with_the_disk_full_line_and_the_target_as_it_was(tmp_path, monkeypatch):
    """The stage is indexed before the report is filled (loader.staged), outside load's error handling: a
    full temporary folder there is still the one-line disk-full error, not an internal error."""
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    migrate_api(src, target)
    con = sqlite3.connect(src)
    with con:
        con.execute(APPEND)
    con.close()
    before = digest(target)

    def full(stage):
        from lcm_etl.sqlite_runtime import sqlite3 as runtime   # the error class of the SQLite lcm-etl uses

        raise runtime.OperationalError("database or disk is full")

    monkeypatch.setattr(loader, "index_stage", full)
    with pytest.raises(RunFailed) as failed:
        migrate_module.migrate(migrate_module.MigrateOptions(src=src, target=target))
    assert str(failed.value).startswith(f"disk full while writing {target}; batches committed before this")
    assert digest(target) == before
    monkeypatch.undo()
    assert migrate_api(src, target)["messages"]["inserted"] == 1
