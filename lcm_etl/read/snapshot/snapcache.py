"""The previous run's snapshot, kept so that a re-run copies and re-reads only what changed.

A first `migrate` of a source into a target copies the source whole (sqlite_copy.take_snapshot). lcm-etl
keeps that copy in a cache folder, one per (source, target) pair, and seals it with the id of the run that
read it once the run has committed. The next run of the pair compares the source with the copy page by
page: it writes only the pages that differ into the copy, which is then the new snapshot, and it knows
which source conversations own a row on a differing page (lcm_etl/read/snapshot/pages.py): everything else is proved
unchanged by its bytes. Every page is compared, unless the source's files are in the state the sealing run
found them in (wal.file_state, the no-op shortcut's proof) or the source's WAL proves it holds the whole change
(lcm_etl/read/snapshot/wal.py: then only the frames added since are read, and the copy's other pages are vouched
for by the seal as the no-op vouches for all of them); the copy is used only when its file is the one sealed (inode, size, mtime and ctime: a ctime cannot be set back), and what the
changed pages prove counts only when the target's ledger names the sealing run as the last complete migrate
of the source with marks (lcm_etl/sync/lcm_db.py). Before the copy is changed its seal is removed, so a run
that dies leaves no copy that could be trusted.

Where: lcm_etl/cachedir.py (LCM_ETL_CACHE_DIR=off keeps no copy: every run copies the source whole); the size
of the source per pair, within LCM_ETL_CACHE_SIZE (lcm_etl/read/snapshot/cache_bounds.py). A cache folder that cannot
take the copy (full, unwritable) is a `warning` and a run without a kept snapshot, never a failure; a kept copy
that cannot be used is `dropped`, with the reason, and the source is copied whole.
"""
from __future__ import annotations

import hashlib
import marshal
from pathlib import Path
from typing import Callable, Mapping

import orjson

from lcm_etl.cachedir import cache_bound, cache_root, write_atomically
from lcm_etl.run_options import size_text
from lcm_etl.read.snapshot import cache_bounds, page_diff, page_owners, pages, runfolder, wal, wal_fold
from lcm_etl.read.snapshot.refresh import INCOMING, Changes, Refresh
from lcm_etl.file_identity import real_path
from lcm_etl.read.snapshot.sqlite_copy import CacheUnwritable, Snapshot, file_signature, take_snapshot, why_failed


class SnapshotCache:
    """The kept copy of one (source, target) pair."""

    def __init__(self, folder: Path, source: Path, target: Path, tables: Mapping, what: str = "source"):
        self.folder, self.source, self.target = folder, source, target
        # the tables whose changed rows are placed, and by what owner (page_owners.Owned: lcm.db's, a store's)
        self.tables, self.what = tables, what
        self.db, self.seal_file = folder / "snapshot.db", folder / "seal.json"
        # the copy's b-tree interior pages, parsed (pages.layout's memo): kept beside the seal, so a re-run
        # parses only the interior pages that changed, not the thousand above a 200k-message source's leaves
        self.memo_file = folder / "layout.marshal"
        self._memo: dict | None = None   # the memo for the copy as this run leaves it
        # what the reader knew of the copy, sealed with it (a store's windows' counts: openclaw_store.py): `sealed`
        # as the sealing run left it (None when not kept), `keep` as this run leaves it, for the next run
        self.facts_file = folder / "facts.marshal"
        self.sealed: dict | None = None
        self.keep: dict | None = None
        self.dropped: str | None = None   # why the kept copy this run would have used was not: said in the report
        self.warning: str | None = None   # why this run keeps no copy (the cache folder is full, unwritable...)
        self.whole = False                 # this run copied the source whole into the folder
        self.kept_bytes: int | None = None   # ... and kept that copy, of this size: said once, in the run's report
        self._hold: int | None = None     # this run holds the pair's folder (cache_bounds.hold)
        self._state: list | None = None   # the source's files as this run found them, before reading (wal.file_state)
        self._wal: wal.Mark | None = None  # the WAL frames the copy holds as this run leaves it (sealed with it)
        self._seen: wal_fold.Headers | None = None   # the -wal copied with a whole copy, before it was folded

    @classmethod
    def for_pair(cls, source: Path, target: Path, tables: Mapping, what: str = "source") -> SnapshotCache | None:
        """The pair's kept copy, named by the source's and the target's real paths: any spelling of them is the
        same pair, its seal and its `lcm-etl cache` entry."""
        root = cache_root()
        if root is None:
            return None
        source, target = Path(real_path(source)), Path(real_path(target))
        pair = f"{source}\0{target}".encode()
        return cls(root / hashlib.sha256(pair).hexdigest()[:24], source, target, tables, what)

    def _seal(self) -> tuple[dict | None, str]:
        """The seal, when it is of this copy (the file sealed) and this source; else None and why not."""
        seal, why = cache_bounds.read_seal(self.folder)
        if seal is None or seal.get("source") == str(self.source):
            return seal, why
        return None, f"it was kept for {seal.get('source')}"

    def unseal(self) -> None:
        self.seal_file.unlink(missing_ok=True)
        self.memo_file.unlink(missing_ok=True)
        self.facts_file.unlink(missing_ok=True)
        self.db.with_name(INCOMING).unlink(missing_ok=True)

    def finish(self, committed: str | None) -> str | None:
        """At the end of the run: when it committed, the cache brought within its bound and the copy sealed (the
        seal last: a fleet's worker is idle once it is written); else, or when the copy does not fit, the copy
        no seal vouches for removed. The pair let go. A warning line for the report, or None."""
        if self._hold is None:   # the copy was never made here (the cache folder could not be)
            return self.warning
        try:
            if committed and self._fits():
                cache_bounds.mark_used(self.folder, self.source, self.target)
                self.seal(committed)
                if self.whole and self.warning is None:
                    self.kept_bytes = self.db.stat().st_size
        finally:   # failed, interrupted (sealing too), too large: no copy of the source's size left for nothing
            self._let_go_of_folder()
        return self.warning

    def _let_go_of_folder(self) -> None:
        """An unsealed copy goes, and the pair's folder is this run's no longer (removed when empty)."""
        try:
            self.discard_unsealed()
        finally:
            cache_bounds.release(self._hold)
            self._hold = None
            _rmdir_if_empty(self.folder)

    def _fits(self) -> bool:
        """The least recently used other pairs evicted until this run's copy fits the bound; False (and a
        warning) when it does not fit alone."""
        bound, written = cache_bound()
        if not cache_bounds.evict(self.folder.parent, bound, self.folder)[1]:
            return True
        self.warning = (f"the snapshot of this run ({size_text(self.db.stat().st_size)}) is larger than the "
                        f"cache's bound, LCM_ETL_CACHE_SIZE={written}: not kept, the next run copies the source whole")
        return False

    def discard_unsealed(self) -> None:
        """At the end of a run that did not commit: a copy no seal vouches for (this run unsealed it before
        changing it) is of no use to any later run, which copies the source whole; its bytes (the source's
        size) go. A copy still sealed, by an earlier run, stays."""
        if self._seal()[0] is None:
            self.unseal()
            for suffix in ("", "-wal", "-journal"):
                Path(str(self.db) + suffix).unlink(missing_ok=True)
            (self.folder / cache_bounds.PAIR).unlink(missing_ok=True)

    def _sealed_memo(self) -> dict:
        """The interior pages of the sealed copy, parsed when it was sealed (empty when not kept)."""
        return self._sealed(self.memo_file) or {}

    def _sealed(self, file: Path) -> dict | None:
        """What was kept in `file` beside the sealed copy, when it is of the copy as it is now (else None)."""
        try:
            signature, kept = marshal.loads(file.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        return kept if isinstance(kept, dict) and signature == file_signature(self.db)[0] else None

    def seal(self, run_id: str) -> None:
        """The run that read the copy has committed: the copy is its snapshot.
        The run has landed whatever happens here: a seal that cannot be written only costs the next run a whole copy."""
        if self._memo is None:   # a whole copy: its interior pages, parsed once for every re-run after it
            self._memo = page_owners.interior_pages(self.db, self.tables)
        signature = file_signature(self.db)[0]
        if self._wal is not None:
            with pages.PageFile(self.db) as pf:
                self._wal.db_pages = pf.pages
        body = orjson.dumps({"run_id": run_id, "source": str(self.source), "target": str(self.target),
                             "signature": signature, "state": self._state,
                             "wal": self._wal.as_dict() if self._wal is not None else None})
        kept: dict | None
        for file, kept in ((self.memo_file, self._memo), (self.facts_file, self.keep)):
            if kept:
                write_atomically(file, marshal.dumps((signature, kept)))
        if not write_atomically(self.seal_file, body):
            self.warning = (f"the snapshot this run kept in {self.folder} could not be sealed (the cache folder "
                            "cannot be written): the next run copies the source whole")

    def snapshot(self, progress: Callable[[int, int], None] | None = None,
                 files: list | None = None) -> tuple[Snapshot, Changes | None]:
        """The source's snapshot, in the kept copy. With the copy sealed: only the differing pages are written,
        and what they hold is returned; otherwise the source is copied whole (None), its bytes told to
        `progress` (sqlite_copy.take_snapshot). `files`: the source's wal.file_state, when the caller took it
        before reading anything (the no-op shortcut's, read once: 46,000 frame headers at 1 % growth of a 2M lcm.db)."""
        cache_bound()   # a bound that is not a size is said before anything is read
        # before anything is read: any later commit shows next run
        self._state = files if files is not None else wal.file_state(self.source)
        try:
            cache_bounds.sweep(self.folder.parent, but=self.folder)   # the copies killed runs left, of other pairs
            self._hold = cache_bounds.hold(self.folder)
        except OSError as exc:
            return self._without_cache(why_failed(exc), progress), None
        seal, why = self._seal()
        if seal is None and self.db.exists():
            self.dropped = why
        if seal is not None:
            memo = self._sealed_memo()
            self.sealed = self._sealed(self.facts_file)
            self.unseal()
            folder, hold = runfolder.make(None)
            snap = Snapshot(self.source, self.db, folder, 0, hold=hold)   # closing it lets the run's folder go
            refresh = Refresh(self.db, self.source, self.what, self.tables)
            try:
                # the differing pages' bytes, past their first 4 MB, wait in a file of the run's folder until written
                with page_diff.SpilledPages(folder / "differing-pages") as spill:
                    refreshed = refresh.run(memo, spill, seal["run_id"], seal.get("state") == self._state,
                                            wal.Mark.of(seal.get("wal")))
            except OSError as exc:   # the copy is unsealed, half written: it goes, and the run goes on without
                snap.close()
                return self._without_cache(why_failed(exc), progress), None
            except BaseException:
                snap.close()
                raise
            self.dropped = refresh.dropped or self.dropped
            if refreshed is not None:
                self._memo, self._wal = refresh.memo, refresh.wal_mark
                snap.size = self.db.stat().st_size
                return snap, refreshed
            snap.close()
        self.unseal()
        self._memo = None
        try:
            snap = take_snapshot(self.source, self.what, None, into=self.db, progress=progress, wal_seen=self._saw_wal)
            self._wal = self._seen.mark(snap.folded) if self._seen is not None else None
        except CacheUnwritable as exc:
            return self._without_cache(exc.why, progress), None
        self.whole = True
        return snap, None

    def _without_cache(self, why: str, progress: Callable[[int, int], None] | None) -> Snapshot:
        """The cache folder cannot hold the copy: none is kept (what was written of it goes), this run copies
        the source where a run's copy goes, and says so once."""
        self.warning = (f"the cache folder {self.folder.parent} cannot hold a kept snapshot ({why}): this run keeps "
                        "none, and the next copies the source whole (free space there, point LCM_ETL_CACHE_DIR at "
                        "another folder, or set it to off)")
        self.dropped = None
        if self._hold is not None:
            self._let_go_of_folder()
        return take_snapshot(self.source, self.what, None, progress=progress)

    def _saw_wal(self, copied: Path, before: list) -> None:
        """The source's -wal as copied beside the copy (a copy of it at `copied`) before it is folded."""
        self._seen = wal_fold.Headers.of(copied, before[0])


def used(source: Path, target: Path, dry_run: bool) -> None:
    """A migrate of the pair found nothing changed: its kept snapshot is still wanted (eviction's order)."""
    cache = None if dry_run else SnapshotCache.for_pair(source, target, {})
    if cache is not None and cache._seal()[0] is not None:
        cache_bounds.mark_used(cache.folder, source, target)


def _rmdir_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()   # the pair's folder, when nothing else is in it
    except OSError:
        pass

