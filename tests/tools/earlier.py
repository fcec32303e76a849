# Copied unchanged from ../shared/tools/earlier.py (the contract's independent checker, written apart from lcm-etl),
# so that the project's tests run from a clone that has no ../shared.
#!/usr/bin/env python3
"""Write a lossless-claw database as it was before it grew, to test that a re-run converges.

usage: earlier.py SRC OUT [--shape tail|condense] [--share 0.33]
  tail      the last SHARE of the messages (by message_id) and every summary above them did not exist yet
  condense  the top condensed summaries (those no other summary condenses) did not exist yet: lossless-claw
            condensed summaries that an earlier run had already imported

migrate(OUT) then migrate(SRC) into one target must leave it as the rules give for SRC (lcmcheck.py SRC TARGET,
without --fresh: 0 problems) and `audit` must exit 0. SRC is only read (with its -wal); OUT is a new file.
Prints how many messages and summaries were left out.
"""
import os
import shutil
import sqlite3
import sys


def tables(con):
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def earlier(src: str, out: str, shape: str = "tail", share: float = 1 / 3) -> tuple[int, int]:
    for side in ("", "-wal"):
        if os.path.exists(src + side):
            shutil.copyfile(src + side, out + side)
    con = sqlite3.connect(out)
    con.execute("PRAGMA foreign_keys=OFF")
    have = tables(con)
    con.execute("CREATE TEMP TABLE gone_m(message_id INTEGER PRIMARY KEY)")
    con.execute("CREATE TEMP TABLE gone_s(s TEXT PRIMARY KEY)")
    if shape == "tail":
        n = con.execute("SELECT count(*) FROM messages").fetchone()[0]
        con.execute("INSERT INTO gone_m SELECT message_id FROM messages ORDER BY message_id DESC LIMIT ?",
                    (max(1, int(n * share)),))
        if "summary_messages" in have:
            con.execute("INSERT OR IGNORE INTO gone_s SELECT summary_id FROM summary_messages "
                        "WHERE message_id IN (SELECT message_id FROM gone_m)")
    elif shape == "condense":
        if "summary_parents" in have:
            con.execute("INSERT INTO gone_s SELECT summary_id FROM summaries WHERE kind='condensed' AND summary_id "
                        "NOT IN (SELECT parent_summary_id FROM summary_parents)")
    else:
        raise SystemExit(f"unknown shape {shape!r}")
    if "summary_parents" in have:   # everything that condenses a removed summary did not exist either
        while con.execute("INSERT OR IGNORE INTO gone_s SELECT sp.summary_id FROM summary_parents sp "
                          "WHERE sp.parent_summary_id IN (SELECT s FROM gone_s)").rowcount:
            pass
        con.execute("DELETE FROM summary_parents WHERE summary_id IN (SELECT s FROM gone_s) "
                    "OR parent_summary_id IN (SELECT s FROM gone_s)")
    if "summary_messages" in have:
        con.execute("DELETE FROM summary_messages WHERE summary_id IN (SELECT s FROM gone_s) "
                    "OR message_id IN (SELECT message_id FROM gone_m)")
    if "context_items" in have:
        cols = {r[1] for r in con.execute("PRAGMA table_info(context_items)")}
        if {"message_id", "summary_id"} <= cols:
            con.execute("DELETE FROM context_items WHERE message_id IN (SELECT message_id FROM gone_m) "
                        "OR summary_id IN (SELECT s FROM gone_s)")
    gone = con.execute("SELECT (SELECT count(*) FROM gone_m), (SELECT count(*) FROM gone_s)").fetchone()
    if "summaries" in have:
        con.execute("DELETE FROM summaries WHERE summary_id IN (SELECT s FROM gone_s)")
    if "message_parts" in have:
        con.execute("DELETE FROM message_parts WHERE message_id IN (SELECT message_id FROM gone_m)")
    con.execute("DELETE FROM messages WHERE message_id IN (SELECT message_id FROM gone_m)")
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return gone


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2 or args[0].startswith("-"):
        raise SystemExit(__doc__)
    opts = dict(zip(args[2::2], args[3::2]))
    m, s = earlier(args[0], args[1], opts.get("--shape", "tail"), float(opts.get("--share", 1 / 3)))
    print(f"earlier.py: left out {m} messages and {s} summaries")
