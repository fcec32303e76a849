"""What the reports say (issue 12, defect 7): reconcile's text report says what it did with each
transcript, cross-session links are counted in skipped summaries too, and the unchanged-source shortcut
reports what a full re-plan reports."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

from conftest import ROOT, copy_fixture, run_cli
from lcm_etl.run_options import size_text

SESSIONS = ROOT / "fixtures" / "sessions"
SESSION_A = "a08ff49b-6f77-4632-a16c-43069c43a8c3"


def report_lines(proc) -> list[str]:
    """stdout without the last line (elapsed time and run id differ from run to run)."""
    assert (proc.returncode, proc.stderr) == (0, "")
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("  elapsed ")
    return lines[:-1]


def test_the_reconcile_text_report_names_abandoned_branches_and_replays_and_no_summary_lines(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    branched = folder / "branched.jsonl"
    shutil.copyfile(SESSIONS / "branched.jsonl", branched)
    replayed = folder / "sess-1.jsonl"
    entries = [{"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-06-01T00:00:00.000Z"},
               {"type": "message", "id": "a1", "parentId": None, "timestamp": "2026-06-01T00:00:01.000Z",
                "message": {"role": "user", "content": "hello there", "timestamp": 1780272001000}},
               {"type": "message", "id": "a2", "parentId": "a1", "timestamp": "2026-06-01T00:00:02.000Z",
                "message": {"role": "assistant", "content": "hi", "timestamp": 1780272002000}}]
    replayed.write_text("".join(json.dumps(e) + "\n" for e in entries + entries[1:]))
    (folder / "sess-1.trajectory.jsonl").write_text("")
    target = tmp_path / "t.sqlite"
    proc = run_cli("reconcile", "--sessions", folder, "--dest", target)
    assert report_lines(proc) == [
        "lcm-etl reconcile: Done.",
        f"  target:  {target}",
        "  sync:    offsets: 0 of 2 transcripts read from where the last run stopped; 2 read whole: 2 new",
        "  messages   inserted        6   already present        0   skipped      0",
        "  parts      inserted        6   already present        0   skipped      0",
        "  transcripts read 2 (JSONL file 2), files left out 1",
        "  sessions touched 2: c191aa2e-d98a-49ec-b288-0758a6b87dfc, sess-1",
        "  boundary events written 2",
        f"  {branched}: 4 messages on the active path (4 imported, 0 already present); "
        "6 abandoned-branch entries not imported",
        f"  {replayed}: 2 messages on the active path (2 imported, 0 already present); "
        "entries replayed at lines 4, 5 (kept once)",
        f"  left out {folder / 'sess-1.trajectory.jsonl'}: trajectory file",
    ]
    again = run_cli("reconcile", "--sessions", folder, "--dest", target)
    assert report_lines(again)[2:9] == [
        "  sync:    offsets: 2 of 2 transcripts read from where the last run stopped",
        "  messages   inserted        0   already present        6   skipped      0",
        "  parts      inserted        0   already present        6   skipped      0",   # the records' parts
        "  transcripts read 2 (JSONL file 2), files left out 1; 2 read from where the last run stopped, 0 lines read",
        "  sessions touched 0",
        "  boundary events written 0",
        f"  {branched}: 4 messages on the active path (0 imported, 4 already present); "
        f"read from byte {branched.stat().st_size} (0 new lines)",
    ]


def nasty_source(folder):
    """shared-session-newest.db where one summary of session A links only the 4 messages of session '4'
    (skipped: every message beneath it belongs to another session) and another also links one message
    of session B (written; that link is ignored)."""
    src = copy_fixture("shared-session-newest.db", folder)
    con = sqlite3.connect(src)
    with con:
        con.execute("DELETE FROM summary_messages WHERE summary_id = 'sum_cda99741d02ff79f'")
        con.execute("INSERT INTO summary_messages (summary_id, message_id, ordinal) SELECT 'sum_cda99741d02ff79f', "
                    "message_id, row_number() OVER (ORDER BY seq) - 1 FROM messages WHERE conversation_id = 4")
        con.execute("INSERT INTO summary_messages (summary_id, message_id, ordinal) SELECT 'sum_7a37ef15e889a8e4', "
                    "min(message_id), 100 FROM messages WHERE conversation_id = 5")
    con.close()
    return src


SKIPPED = {"summary_id": "sum_cda99741d02ff79f", "session_id": SESSION_A,
           "reason": "every message beneath it belongs to another session", "foreign_messages": 4}


def test_cross_session_links_of_a_skipped_summary_are_counted_apart_from_those_of_written_ones(tmp_path):
    src = nasty_source(tmp_path / "src")
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "a" / "lcm.sqlite", "--json")
    assert (proc.returncode, proc.stderr) == (0, "")
    report = json.loads(proc.stdout)
    assert (report["cross_session_links"], report["cross_session_links_in_skipped"]) == (1, 4)
    assert report["skipped_summaries"] == [SKIPPED]
    text = report_lines(run_cli("migrate", "--src", src, "--dest", tmp_path / "b" / "lcm.sqlite"))
    assert "  parents collapsed 0 (dropped edges 0)   cross-session links ignored 1 in written summaries, "\
           "4 in skipped summaries" in text
    assert ("  skipped summary sum_cda99741d02ff79f (a08ff49b-6f77-4632-a16c-43069c43a8c3): every message beneath "
            "it belongs to another session (links 4 messages of other sessions)") in text


def test_the_shortcut_reports_what_a_full_replan_reports(tmp_path):
    src = nasty_source(tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"

    def migrate(*extra) -> dict:
        proc = run_cli("migrate", "--src", src, "--dest", dest, "--json", *extra)
        assert (proc.returncode, proc.stderr) == (0, "")
        report = json.loads(proc.stdout)
        for varying in ("elapsed_s", "run_id", "extra", "sync_decision"):   # the decision is how, not what
            report.pop(varying)
        return report

    first = migrate()
    shortcut = migrate()
    full = migrate("--full")
    assert shortcut == full
    assert shortcut["source_schema"] == first["source_schema"] == "0.15.2+"
    assert shortcut["skipped_summaries"] == first["skipped_summaries"] == [SKIPPED]
    assert shortcut["summaries"]["skipped"] == {SKIPPED["reason"]: 1}
    assert shortcut["cross_session_links_in_skipped"] == 4
    assert json.loads(run_cli("migrate", "--src", src, "--dest", dest, "--json").stdout)["sync_decision"]["how"] == "no-op"


HIDDEN = ROOT / "fixtures" / "openclaw-hidden"
STATES = [a for s in ("cold", "evicted", "archive-tier", "pending") for a in ("--sessions", HIDDEN / s / "state")]
DEMO_DB = ROOT / "fixtures" / "lossless-claw" / "multiparent-newest.db"


def fitted(*args, env: dict | None = None, code: int = 0) -> list[str]:
    """A command's text report as a terminal gets it: without LCM_ETL_WIDTH (tests/conftest.py sets it to 0)."""
    env = {k: v for k, v in os.environ.items() if k != "LCM_ETL_WIDTH"} | (env or {})
    proc = run_cli(*args, env=env)
    assert proc.returncode == code, proc.stderr
    return proc.stdout.splitlines()


def test_every_line_of_every_report_on_the_bundled_fixtures_fits_100_columns_and_json_keeps_the_names_whole(tmp_path):
    target, cache = tmp_path / "remnic" / "state" / "lcm.sqlite", tmp_path / "c"
    env = {"LCM_ETL_CACHE_DIR": str(cache)}
    reports = {"inspect": fitted("inspect", "--src", DEMO_DB),
               "migrate": fitted("migrate", "--src", DEMO_DB, "--dest", target, env=env),
               "audit": fitted("audit", "--src", DEMO_DB, *STATES, "--dest", target, code=3),
               "reconcile": fitted("reconcile", "--src", DEMO_DB, *STATES, "--dest", target, env=env),
               "runs": fitted("runs", "--dest", target), "cache": fitted("cache", env=env)}
    for name, lines in reports.items():
        assert [line for line in lines if len(line) > 100] == [], name
    # reconcile names cold files by their 64-hex names: cut in the text, which says so, whole in --json
    cold = next(f["file"] for f in json.loads(run_cli("reconcile", "--src", DEMO_DB, *STATES, "--dest", target,
                                                      "--json", "--dry-run").stdout)["extra"]["files"]
                if "/cold/" in f["file"])
    digest = Path(cold).name.split(".")[0]
    assert len(digest) == 64 and digest not in "\n".join(reports["reconcile"])
    assert f"{digest[:12]}….jsonl.zst" in "\n".join(reports["reconcile"])
    assert reports["reconcile"][-1] == "  (names shortened with …: --json prints them whole)"


def test_fit_wraps_a_long_line_under_itself_cuts_hex_names_and_keeps_a_long_words_head_and_tail():
    from lcm_etl.report import fit

    assert fit("short\n  also short", 40) == "short\n  also short"
    assert fit("  one two three four five six seven eight nine", 20).splitlines() == [
        "  one two three four", "      five six seven", "      eight nine"]
    hexed = fit("  file " + "ab" * 32 + ".jsonl.zst is a cold file of a window", 50).splitlines()
    assert hexed == ["  file " + "ab" * 6 + "….jsonl.zst is a cold file of a", "      window",
                     "  (names shortened with …: --json prints them whole)"]
    long_word = fit("/" + "x" * 200, 60).splitlines()
    assert len(long_word[0]) == 60 and long_word[0].startswith("/xxx") and "…" in long_word[0]


def test_counts_take_the_singular_when_one_and_sizes_are_written_as_the_options_take_them(tmp_path):
    target, cache = tmp_path / "t" / "lcm.sqlite", tmp_path / "c"
    env = {"LCM_ETL_CACHE_DIR": str(cache), "LCM_ETL_WIDTH": "0"}   # the lines whole, whatever tmp_path's length
    text = fitted("reconcile", "--src", DEMO_DB, *STATES, "--dest", target, "--dry-run", env=env)
    stores = {line.split(" (agent")[0].rsplit("/", 6)[1]: line.split(": ", 1)[1] for line in text
              if line.startswith("  session store ")}
    assert stores == {"cold": "9 windows (5 cold), 0 archives", "evicted": "5 windows, 1 archive",
                      "archive-tier": "5 windows, 0 archives", "pending": "2 windows, 0 archives, 1 pending input"}
    migrated = fitted("migrate", "--src", DEMO_DB, "--dest", target, env=env)
    size = sum(p.stat().st_size for p in (cache).rglob("snapshot.db"))
    assert (f"  kept snapshot of the source for the next run: {size_text(size)} (`lcm-etl cache` lists the kept "
            "snapshots)") in migrated
    again = fitted("migrate", "--src", DEMO_DB, "--dest", target, env=env)
    assert not any("for the next run:" in line for line in again)   # said once: by the run that made it
    held = json.loads(run_cli("cache", "--json", env={**os.environ, **env}).stdout)["total_bytes"]   # and its records
    assert fitted("cache", env=env)[0] == (f"lcm-etl cache: {cache}: 1 kept snapshot, {size_text(held)} of 20GB "
                                          "(LCM_ETL_CACHE_SIZE=20GB)")
    first = json.loads(run_cli("migrate", "--src", DEMO_DB, "--dest", tmp_path / "u" / "lcm.sqlite", "--json",
                               env={**os.environ, **env}).stdout)
    assert first["extra"] == {"kept_snapshot_bytes": size}
    assert [size_text(n) for n in (20e9, 451e6, 1.5e9, 315_392, 999)] == ["20GB", "451MB", "1.5GB", "315kB", "999B"]


def test_the_session_index_reconcile_reads_the_keys_from_is_not_a_file_left_out(tmp_path):
    state = HIDDEN / "archive-tier" / "state"
    assert list(state.rglob("legacy-store.sessions.json.imported-*"))   # the doctor's copy, read for the keys
    report = json.loads(run_cli("reconcile", "--sessions", state, "--dest", tmp_path / "t.sqlite", "--dry-run",
                                "--json").stdout)
    assert report["extra"]["files_skipped"] == []


def test_a_reconcile_that_keeps_copies_of_session_stores_says_their_size_once(tmp_path):
    cache, target = tmp_path / "c", tmp_path / "t" / "lcm.sqlite"
    env = {**os.environ, "LCM_ETL_CACHE_DIR": str(cache)}
    first = json.loads(run_cli("reconcile", *STATES, "--dest", target, "--json", env=env).stdout)
    size = sum(p.stat().st_size for p in cache.rglob("snapshot.db"))
    assert size and first["extra"]["kept_snapshot_bytes"] == size
    again = run_cli("reconcile", *STATES, "--dest", target, env=env)
    assert again.returncode == 0 and "for the next run:" not in again.stdout
    text = run_cli("reconcile", *STATES, "--dest", tmp_path / "u" / "lcm.sqlite", env=env).stdout
    assert (f"  kept snapshot of the session stores for the next run: {size_text(size)} (`lcm-etl cache` lists "
            "the kept snapshots)\n") in text
