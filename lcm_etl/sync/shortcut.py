"""The no-op shortcut: skip reading and planning when neither the source nor the target changed since the last run.

The cheapest way of the sync decision (lcm_etl/sync/lcm_db.py): the source is not even copied, since its files
prove it unchanged. When the last run recorded in the target's ledger is a complete migrate of this source's path,
and its state (lcm_etl/store/sync_state.py) records

- the same source file, byte for byte unchanged: same inode, size, mtime and ctime of `lcm.db` and
  `lcm.db-wal` (ctime cannot be set back by any tool, so a rewrite or restore always changes it), and the same
  contents where a commit leaves its mark: the database header (a commit in rollback-journal mode increments
  its change counter) and the -wal's frames (a commit in WAL mode adds frames): wal.file_state. File times
  are stamped at the resolution of a clock tick (a second or two on some file systems), so a commit just after
  the last run read the source could keep every time and size (a WAL reset writes over frames in place, and a
  rollback-mode commit over pages); these marks do not depend on the clock;
- the same options that decide the content (session rule, session filter);
- a target that still holds exactly what that run left (sync_state.target_fingerprint),

then the full plan is known to find nothing, and the run reports the previous totals as already
present. `--full` disables the shortcut. The ledger is only consulted to skip work, never to decide
what a row's identity is.
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import dataclass
from pathlib import Path

from lcm_etl import sqlite_runtime
from lcm_etl.store import ledger, sync_state

# What a full re-plan of an unchanged source reports besides the per-kind totals; the state records it
# (migrate._totals), so that the shortcut reports it too.
REPLAN_FIELDS = ("source_schema", "skipped_summaries", "cross_session_links_in_skipped")


def source_fingerprint(path: str, files: list) -> str:
    """`path`: the source's real path (file_identity.real_path); `files`: its wal.file_state."""
    return sync_state.fingerprint([path, *files])


@dataclass
class Previous:
    """The last run, when it makes this one a no-op."""
    run_id: str
    source_path: str   # the source's key (lcm_etl/sync/identity.py), as that run stored it
    state: sync_state.SyncState


def previous_run(target: Path, path: str, state: sync_state.SyncState, dry_run: bool) -> Previous | None:
    """The last migrate of this source's path, when `state` (this run's, before it reads anything) finds what it
    left: the same source files and options, and the target as that run left it."""
    query = sqlite_runtime.before_lock(target, dry_run)
    if query is None:   # a dry run beside a -wal: the full plan runs
        return None
    try:
        con = sqlite_runtime.connect(target, query)
    except sqlite3.Error:
        return None
    try:
        if ledger.schema_version(con) == 0:
            return None
        last = ledger.last_migrate(con, path)
        latest = con.execute("SELECT run_id FROM lcm_etl_runs ORDER BY rowid DESC LIMIT 1").fetchone()
        if last is None or last[1] != "complete" or latest[0] != last[0]:   # no run of any command since
            return None
        recorded = sync_state.read(con, last[0])
        if recorded is None or (recorded.source_fingerprint, recorded.key_by, recorded.session_filter) != \
                (state.source_fingerprint, state.key_by, state.session_filter) \
                or recorded.target_fingerprint != sync_state.target_fingerprint(con):
            return None
        return Previous(last[0], last[2], recorded)
    except sqlite3.Error:
        return None
    finally:
        con.close()
