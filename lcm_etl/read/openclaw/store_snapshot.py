"""A session store's snapshot for one run (lcm_etl/read/openclaw/openclaw_store.py reads it): a private copy
(lcm_etl/read/snapshot/sqlite_copy.py: its -wal counts, nothing is created beside it), or, for a run that writes a
target, the copy kept for that target (lcm_etl/read/snapshot/snapcache.py: a re-run copies the pages that changed),
sealed once the run committed, with the windows' counts the next run starts from."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from lcm_etl.errors import BadInput
from lcm_etl.read.snapshot.page_owners import Owned
from lcm_etl.read.snapshot.snapcache import Changes, SnapshotCache
from lcm_etl.read.snapshot.sqlite_copy import Snapshot, take_snapshot

WHAT = "session store"
# the rows a kept snapshot of the store places when their pages change (snapcache.py): a window's events, by window
_OWNED = {"transcript_events": Owned("e", "e.session_id, e.session_id", "FROM transcript_events e")}
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")   # a rollback journal's header while its transaction is live

Counts = dict[str, tuple[int, int]]   # window id -> its last seq and its rows in transcript_events


def _refuse_a_hot_journal(path: Path) -> None:
    """A store in rollback-journal mode whose journal is hot is locked by a writer mid-transaction (or was left so
    by a crash): its main file may hold pages of a transaction that is not committed, and only a read-write open,
    which a source never gets, rolls them back. A WAL store (OpenClaw's mode) has no such state: a writer's
    uncommitted frames are never read, and the store is read as of its last commit."""
    journal = Path(f"{path}-journal")
    try:
        with open(journal, "rb") as fh:
            hot = fh.read(len(_JOURNAL_MAGIC)) == _JOURNAL_MAGIC
    except OSError:   # no journal (the usual case), or none readable: nothing says the store is mid-transaction
        return
    if hot:
        problem = (f"{WHAT} {path} is locked by a writer in the middle of a transaction (its rollback journal "
                   f"{journal.name} is live)")
        raise BadInput(f"{problem}; run again once OpenClaw is idle; nothing was written", problem)


class StoreSnapshot:
    """The store's copy (`copy`) this run reads, and the kept one's lifecycle. close() lets it go."""

    def __init__(self, path: Path, workdir: Path, target: Path | None):
        _refuse_a_hot_journal(path)
        # a run that writes `target` keeps the store's snapshot for it (sealed by close() once the run committed),
        # and the next run of the pair copies only the pages that changed and counts only the windows whose rows
        # changed (counts()); a dry run, or the cache off, copies the store whole every run
        self.cache = None if target is None else SnapshotCache.for_pair(path, target, _OWNED, WHAT)
        self.kept_bytes: int | None = None   # the copy this run made and kept for the next (SnapshotCache.kept_bytes)
        self.changes: Changes | None = None
        # the windows whose rows no page changed since the sealing run and whose record that run left settled
        # (close()), by window id: the --src key (held_by) the record was made under, its messages and parts
        self.unchanged: dict[str, tuple] = {}
        self.live: Counts = {}   # each window's counts as this run found them (counts()), sealed with the copy
        try:
            if self.cache is None:
                self.copy: Snapshot = take_snapshot(path, WHAT, tmp_root=str(workdir))
            else:
                self.copy, self.changes = self.cache.snapshot()
        except BaseException:
            self.close()
            raise

    def counts(self, count: Callable[[set[str] | None], Counts]) -> Counts:
        """Each window with rows in transcript_events: its last seq and its rows. With the kept snapshot's changed
        rows placed, only the windows owning one are counted (`count(those)`); every other window's rows are on
        pages of the same bytes as in the snapshot the last run sealed, so its counts are the ones that run kept
        (and so is whether it left the window's record settled: `unchanged`). Otherwise every window's rows are
        counted (`count(None)`), in proportion to the store."""
        sealed, c = self.cache.sealed if self.cache is not None else None, self.changes
        if c is None or c.owners is None or sealed is None:
            live = count(None)
        else:
            live = {sid: kept[:2] for sid, kept in sealed.items() if sid not in c.owners}
            self.unchanged = {sid: kept[2:] for sid, kept in sealed.items() if sid not in c.owners and len(kept) == 5}
            live.update(count(c.owners))
        if self.cache is not None:   # sealed with the copy, for the next run
            self.live = live
        return live

    def close(self, committed: str | None = None, settled: dict[str, tuple] | None = None) -> None:
        """`committed`: the run that read the store and committed (its kept snapshot is sealed for the next run,
        with each window's counts and, for the windows whose record it leaves settled, what `settled` says of it:
        the --src key it was made under, its messages and parts)."""
        try:
            if self.cache is not None:
                settled = settled or {}
                self.cache.keep = {sid: (*n, *settled.get(sid, ())) for sid, n in self.live.items()}
                self.cache.finish(committed)
                self.kept_bytes = self.cache.kept_bytes
                self.cache = None
        finally:
            if hasattr(self, "copy"):
                self.copy.close()

    def kept_note(self) -> str:
        """What the report says of the store's kept snapshot: how much of the store this run compared and counted."""
        c, cache = self.changes, self.cache
        if cache is None:
            return "none kept (a dry run, or the cache is off): copied whole, every window counted"
        if c is None:
            why = cache.warning or (f"the kept one was dropped: {cache.dropped}" if cache.dropped else "none kept yet")
            return f"copied whole ({why}), every window counted"
        way = f" ({c.way})" if c.way else ""
        if c.owners is None or cache.sealed is None:
            return (f"{c.pages} pages changed since run {c.since}{way} ({c.why or 'no window counts kept'}), "
                    "every window counted")
        return f"{c.pages} pages changed since run {c.since}{way}: {len(c.owners)} windows' rows changed"
