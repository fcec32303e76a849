"""The transcript record said once (issue 39): its columns are transcripts.Mark's fields (what a read leaves for the
next run) and the run's options (transcript_decision.RECORD_COLUMNS). The run file's `transcripts` table and the
record query are generated from them; the ledger's table and r95's INSERT are SQL of their own, tied here, so a
column added to one and not the others fails a test."""
from __future__ import annotations

import re
import sqlite3
from dataclasses import fields
from pathlib import Path

from lcm_etl.read.sessions.run_file import RunFile
from lcm_etl.read.transcript.transcripts import MARK_COLUMNS, Mark
from lcm_etl.read.sessions.transcript_decision import RECORD_COLUMNS
from lcm_etl.steps import engine as steps
from lcm_etl.store import ledger

# what the ledger keeps besides the record's own columns: its key, and the run that made it (trusted is computed)
RECORDED = ("path", *(c for c in RECORD_COLUMNS if c != "trusted"), "run_id")


def test_the_record_is_the_marks_fields_and_the_runs_options():
    assert MARK_COLUMNS == tuple(f.name for f in fields(Mark))
    assert RECORD_COLUMNS == (*MARK_COLUMNS, "header_id", "version", "session_id", "key_by", "held_by", "trusted")


def test_the_ledgers_table_holds_the_records_columns(tmp_path):
    con = sqlite3.connect(tmp_path / "t.sqlite")
    ledger.ensure(con)
    assert tuple(r[1] for r in con.execute("PRAGMA table_info(lcm_etl_transcript_files)")) == RECORDED


def test_r95_records_every_column_of_the_ledgers_table_from_the_run_files_own(tmp_path):
    sql = steps.step("r95_record_offsets").statements[0].sql
    inserted = re.search(r"lcm_etl_transcript_files \(([^)]*)\)", sql).group(1)
    assert tuple(c.strip() for c in inserted.split(",")) == RECORDED
    selected = re.search(r"SELECT (.*?)\s+FROM plan\.transcripts", sql, re.S).group(1)
    assert tuple(c.strip() for c in selected.split(",")) == (
        "record_key", *MARK_COLUMNS, "header_id", "version", "session_id", ":key_by", ":held_by", ":run_id")
    run = RunFile(Path(tmp_path / "run.sqlite"))
    columns = {r[1] for r in run.con.execute("PRAGMA table_info(transcripts)")}
    run.close()
    assert {"record_key", *MARK_COLUMNS, "header_id", "version", "session_id"} <= columns
    assert {f"rec_{c}" for c in RECORD_COLUMNS} <= columns
