"""lcm_etl/sqlite_runtime.py: the CLI turns SQLite's allocation counter off before any work; utf8_json makes JSON valid UTF-8."""
from __future__ import annotations

import json
import subprocess
import sys

# sqlite3_status(SQLITE_STATUS_MEMORY_USED) reads the counter: with it off, SQLite no longer counts
PROBE = """
import ctypes, sys, _sqlite3
{setup}
import sqlite3
lib = ctypes.CDLL(_sqlite3.__file__)
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
