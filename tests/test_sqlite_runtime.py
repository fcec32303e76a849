"""lcm_etl/sqlite_runtime.py: the SQLite every connection uses (pysqlite3's where it has a wheel), which --version names
and whose WAL-reset bug a run writing a WAL target reports; the CLI turns SQLite's allocation counter off before any
work; utf8_json makes JSON valid UTF-8."""
from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import sys
from importlib import metadata

import pytest

from conftest import FIXTURE_DIR, run_cli

# sqlite3_status(SQLITE_STATUS_MEMORY_USED) reads the counter: with it off, SQLite no longer counts
PROBE = """
import ctypes, sys
{setup}
from lcm_etl.sqlite_runtime import extension_module, sqlite3   # the library lcm-etl's connections use
lib = ctypes.CDLL(extension_module().__file__)
con = sqlite3.connect(":memory:")
con.execute("CREATE TABLE t AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
            "SELECT i, hex(randomblob(100)) AS x FROM n")
current, peak = ctypes.c_int(), ctypes.c_int()
lib.sqlite3_status(0, ctypes.byref(current), ctypes.byref(peak), 0)
print(current.value, con.execute("SELECT count(*) FROM t").fetchone()[0])
"""


def probe(setup: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.split()[-2:]]   # the probe's own line comes last


def test_sqlite_counts_its_memory_by_default_and_not_once_the_counter_is_off():
    used, rows = probe("")
    assert used > 1_000_000 and rows == 20000    # the counter sees the table's pages in the page cache
    used, rows = probe("from lcm_etl.sqlite_runtime import disable_memstatus; assert disable_memstatus()")
    assert used == 0 and rows == 20000           # off, and SQLite works as before


def test_the_cli_turns_the_counter_off_before_it_does_anything():
    setup = ("import lcm_etl.cli, lcm_etl.sqlite_runtime as r; calls = []; "
             "r_orig = lcm_etl.cli.disable_memstatus; "
             "lcm_etl.cli.disable_memstatus = lambda: calls.append(1) or r_orig(); "
             "sys.argv = ['lcm-etl', '--version']\n"
             "try:\n    lcm_etl.cli.main()\nexcept SystemExit:\n    pass\nassert calls == [1]")
    used, rows = probe(setup)
    assert used == 0 and rows == 20000


def test_utf8_json_returns_ascii_and_utf8_values_as_they_came_and_escapes_each_byte_that_is_not_utf8():
    from lcm_etl.sqlite_runtime import utf8_json

    ascii_json, utf8 = b'{"text_content":"plain"}', '{"text_content":"caf\u00e9 \u2603"}'.encode()
    assert utf8_json(ascii_json) is ascii_json and utf8_json(utf8) is utf8 and utf8_json(None) is None
    repaired = utf8_json(b'{"text_content":"caf\xe9 \xe2\x82"}')
    assert repaired == b'{"text_content":"caf\\udce9 \\udce2\\udc82"}'
    assert json.loads(repaired)["text_content"].encode("utf-8", "surrogateescape") == b"caf\xe9 \xe2\x82"


def test_version_names_lcm_etls_version_and_the_sqlite_every_connection_uses():
    from lcm_etl import __version__
    from lcm_etl.sqlite_runtime import sqlite3 as runtime

    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    library = (f"pysqlite3 {metadata.version('pysqlite3')}" if runtime.__name__ == "pysqlite3.dbapi2"
               else "Python's sqlite3 module, the system library")
    assert proc.stdout == f"lcm-etl, version {__version__}\nSQLite {runtime.sqlite_version} ({library})\n"


def test_lcm_etl_sqlite_system_makes_every_connection_use_pythons_own_module():
    proc = run_cli("--version", env=os.environ | {"LCM_ETL_SQLITE": "system"})
    assert proc.stdout.splitlines()[1] == (f"SQLite {sqlite3.sqlite_version} (Python's sqlite3 module, the "
                                           "system library)")


def test_where_pysqlite3_has_a_wheel_it_is_installed_and_brings_a_sqlite_without_the_wal_reset_bug():
    """pyproject.toml's marker: Linux x86_64, macOS arm64, Windows amd64."""
    from lcm_etl.sqlite_runtime import sqlite3 as runtime, wal_reset_bug

    wheel = (sys.platform, platform.machine()) in {("linux", "x86_64"), ("darwin", "arm64"), ("win32", "AMD64")}
    assert (runtime.__name__ == "pysqlite3.dbapi2") == wheel
    if wheel:
        assert runtime.sqlite_version == "3.53.4" and not wal_reset_bug(runtime.sqlite_version_info)


@pytest.mark.parametrize("version, affected", [
    ((3, 6, 23), False), ((3, 7, 0), True), ((3, 40, 1), True), ((3, 44, 5), True), ((3, 44, 6), False),
    ((3, 44, 7), False), ((3, 45, 1), True), ((3, 50, 6), True), ((3, 50, 7), False), ((3, 51, 2), True),
    ((3, 51, 3), False), ((3, 53, 4), False), ((4, 0, 0), False)])
def test_the_wal_reset_bug_is_in_3_7_0_to_3_51_2_but_for_the_3_50_7_and_3_44_6_backports(version, affected):
    from lcm_etl.sqlite_runtime import wal_reset_bug

    assert wal_reset_bug(version) is affected


def test_a_run_writing_a_wal_target_with_an_affected_sqlite_says_so_once_in_its_report(tmp_path):
    """Through the CLI with Python's own module (LCM_ETL_SQLITE=system): the warning is there exactly when that
    library has the bug (3.40.1 here); never with the SQLite lcm-etl brings, never for a dry run."""
    from lcm_etl.sqlite_runtime import wal_reset_bug

    src, dest = FIXTURE_DIR / "multiparent-newest.db", tmp_path / "lcm.sqlite"
    system = os.environ | {"LCM_ETL_SQLITE": "system"}
    runs = [run_cli("migrate", "--src", src, "--dest", dest, "--json", env=env)
            for env in (system, system, None)]
    dry = run_cli("migrate", "--src", src, "--dest", dest, "--json", "--dry-run", env=system)
    warned = [[w for w in json.loads(p.stdout)["warnings"] if "WAL-reset bug" in w] for p in runs + [dry]]
    expected = (f"the target is in WAL mode and this lcm-etl writes with SQLite {sqlite3.sqlite_version}, which has "
                "the WAL-reset bug (fixed in 3.51.3, 3.50.7, 3.44.6): writing it while Remnic has it open can corrupt "
                "it; stop Remnic first, or install lcm-etl where pysqlite3 has a wheel (docs/cli.md, \"Which SQLite\")")
    affected = wal_reset_bug(sqlite3.sqlite_version_info)
    assert warned == [[expected] if affected else [], [expected] if affected else [], [], []]
    text = run_cli("migrate", "--src", src, "--dest", dest, env=system).stdout
    assert text.count("WAL-reset bug") == (1 if affected else 0)


def test_an_undo_writing_a_wal_target_with_an_affected_sqlite_says_so_once_on_stderr(tmp_path):
    """undo's report has no warnings: the line goes to stderr, exactly when Python's own SQLite has the bug."""
    from lcm_etl.sqlite_runtime import wal_reset_bug

    dest, system = tmp_path / "lcm.sqlite", os.environ | {"LCM_ETL_SQLITE": "system"}
    assert run_cli("migrate", "--src", FIXTURE_DIR / "multiparent-newest.db", "--dest", dest, "-q").returncode == 0
    run_id = json.loads(run_cli("runs", "--dest", dest, "--json").stdout)["runs"][0]["run_id"]
    assert run_cli("undo", run_id, "--dest", dest, "--dry-run", env=system).stderr == ""
    undone = run_cli("undo", run_id, "--dest", dest, env=system)
    assert undone.returncode == 0
    affected = wal_reset_bug(sqlite3.sqlite_version_info)
    assert undone.stderr == (f"lcm-etl: warning: the target is in WAL mode and this lcm-etl writes with SQLite "
                             f"{sqlite3.sqlite_version}, which has the WAL-reset bug (fixed in 3.51.3, 3.50.7, 3.44.6): "
                             "writing it while Remnic has it open can corrupt it; stop Remnic first, or install "
                             "lcm-etl where pysqlite3 has a wheel (docs/cli.md, \"Which SQLite\")\n" if affected else "")
