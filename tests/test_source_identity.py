"""One source identity (lcm_etl/file_identity.py real_path, lcm_etl/sync/identity.py): every command and table keys
a source and a transcript on its real path, so a symlink, a relative or `~` spelling of the same file is the same
source. The CLI on real files."""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from conftest import fetch, run_cli
from test_reconcile import build_pair, migrate, reconcile
from undolib import runs, undo


def ledger(target: Path) -> list[tuple]:
    return fetch(target, "SELECT run_id, command, status, source_path, source_size FROM lcm_etl_runs "
                         "ORDER BY rowid")


def held_by(target: Path) -> set[str]:
    con = sqlite3.connect(target)
    try:
        return {r[0] for r in con.execute("SELECT held_by FROM lcm_etl_transcript_files")}
    finally:
        con.close()


def a_pair_half_read(tmp_path: Path) -> tuple[Path, Path, list[bytes]]:
    """A state dir (lcm.db behind its transcript) whose transcript holds its first 20 lines; the lines it will grow by."""
    pair = build_pair("tool-heavy", tmp_path / "state")
    transcript = Path(pair["transcript"])
    lines = transcript.read_bytes().splitlines(keepends=True)
    transcript.write_bytes(b"".join(lines[:20]))
    return tmp_path / "state" / "lcm.db", transcript, lines


def test_a_symlink_to_the_src_of_the_last_run_reads_each_transcript_from_its_record(tmp_path):
    src, transcript, lines = a_pair_half_read(tmp_path)
    link = tmp_path / "link.db"
    link.symlink_to(src)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", transcript.parent, "--src", src, "--dest", target)
    transcript.write_bytes(b"".join(lines))
    # the transcript itself through a symlinked folder, and a relative --src: still the same files
    (tmp_path / "sessions-link").symlink_to(transcript.parent)
    proc = run_cli("reconcile", "--json", "--sessions", tmp_path / "sessions-link", "--src",
                   os.path.relpath(link), "--dest", target)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [(f["read"], f["why"]) for f in report["extra"]["files"]] == [("appended", None)]
    assert report["messages"]["inserted"] > 0
    # one key for the source: the one migrate gives it (its real path and the database there)
    keys = {r[3] for r in ledger(target)}
    assert len(keys) == 1 and keys == held_by(target)
    (key,) = keys
    assert key.startswith(f"{os.path.realpath(src)}#")


def test_migrate_after_reconcile_keys_the_source_as_reconcile_did_and_leaves_its_ledger_rows_alone(tmp_path):
    src, transcript, lines = a_pair_half_read(tmp_path)
    link = tmp_path / "link.db"
    link.symlink_to(src)
    target = tmp_path / "t.sqlite"
    for n in (20, 25, len(lines)):
        transcript.write_bytes(b"".join(lines[:n]))
        reconcile("--sessions", transcript.parent, "--src", link, "--dest", target)
    before = ledger(target)
    assert [r[1:3] for r in before] == [("reconcile", "complete")] * 3
    migrate(src, target)
    after = ledger(target)
    assert after[:3] == before   # reconcile's rows as they were
    assert after[3][1:3] == ("migrate", "complete")
    assert {r[3] for r in after} == {before[0][3]}   # one key: migrate's and reconcile's the same
    # runs and undo find every run by it
    listed = runs(target)
    assert [r["run_id"] for r in listed] == [r[0] for r in after]
    assert {r["source_key"] for r in listed} == {before[0][3]}
    undo(target, after[3][0])
    assert [r["status"] for r in runs(target)][:4] == ["complete"] * 3 + ["undone"]
    undo(target, after[2][0])
    assert [r["status"] for r in runs(target)][2] == "undone"
