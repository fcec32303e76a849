"""The previous run's snapshot, kept so that a re-run copies and re-reads only what changed.

A first `migrate` of a source into a target copies the source whole (sources.take_snapshot). lcm-etl
keeps that copy in a cache folder, one per (source, target) pair, and seals it with the id of the run that
read it once the run has committed. The next run of the pair compares the source with the copy page by
page: it writes only the pages that differ into the copy, which is then the new snapshot, and it knows
which source conversations own a row on a differing page (lcm_etl/read/pages.py): everything else is proved
unchanged by its bytes. The copy is trusted only when the target's ledger names the sealing run as the
last complete migrate of the source with marks (lcm_etl/sync/lcm_db.py) and the copy's file is the one sealed
(inode, size, mtime and ctime: a ctime cannot be set back). Before the copy is changed its seal is removed,
so a run that dies leaves no copy that could be trusted.

Where: lcm_etl/cachedir.py (LCM_ETL_CACHE_DIR=off keeps no copy: every run copies the source whole); the size
of the source per pair, within LCM_ETL_CACHE_SIZE (lcm_etl/read/cache_bounds.py). A cache folder that cannot
take the copy (full, unwritable) is a `warning` and a run without a kept snapshot, never a failure; a kept copy
that cannot be used is `dropped`, with the reason, and the source is copied whole.
"""
from __future__ import annotations

import hashlib
import marshal
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import orjson

from lcm_etl.cachedir import cache_bound, cache_root, write_atomically
from lcm_etl.read import cache_bounds, page_owners, pages, runfolder, snapcheck
from lcm_etl.errors import RunFailed
from lcm_etl.read.sources import (DIGEST_CHUNK, CacheUnwritable, KnownDigests, Snapshot, SourceRead, file_signature,
                                  fold_wal, real_path, take_snapshot, unchanged_but_appended, why_failed)

# more differing pages than this share of the source (or than 1 MB of pages on a small one): not worth
# proving page by page (their bytes wait in a file until written); the source is copied whole
MAX_CHANGED_SHARE, MIN_CHANGED_LIMIT = 0.1, 256


@dataclass
class Changes:
    """What differs between the sealed copy and the source now: the conversations owning a changed row,
    or None when the pages cannot be placed (`why`): then nothing is proved and the run plans everything."""
    conversations: set[str] | None
    pages: int
    why: str = ""
    # the main file was compared with the copy page by page; False: it was proved untouched since the copy was
    # read (SourceRead), and only the pages in its WAL were looked at
    compared: bool = True


class SnapshotCache:
    """The kept copy of one (source, target) pair."""

    def __init__(self, folder: Path, source: Path, target: Path):
        self.folder, self.source, self.target = folder, source, target
        self.db, self.seal_file = folder / "snapshot.db", folder / "seal.json"
        # the copy's b-tree interior pages, parsed (pages.layout's memo): kept beside the seal, so a re-run
        # parses only the interior pages that changed, not the thousand above a 200k-message source's leaves
        self.memo_file = folder / "layout.marshal"
        self._memo: dict | None = None   # the memo for the copy as this run leaves it
        # the copy's chunk digests (sources.chunk_digests): a re-run hashes only the chunks it writes
        self.digests_file = folder / "digests.marshal"
        self._written: set[int] = set()   # the chunks _refresh wrote
        # the target is as the sealing run left it (its marks are the recorded ones): set by snapshot()
        self.target_untouched = False
        self.read: SourceRead | None = None   # what this run's copy was read from, kept with the seal
        self.dropped: str | None = None   # why the kept copy this run would have used was not: said in the report
        self.warning: str | None = None   # why this run keeps no copy (the cache folder is full, unwritable...)
        self._hold: int | None = None     # this run holds the pair's folder (cache_bounds.hold)
        self._check_from = 0              # where the next WAL-only run's check of the copy starts (snapcheck)
        self._unsealed_why = ""           # why _seal() found none

    @classmethod
    def for_pair(cls, source: Path, target: Path) -> SnapshotCache | None:
        """The pair's kept copy, named by the source's and the target's real paths: any spelling of them is the
        same pair, its seal and its `lcm-etl cache` entry."""
        root = cache_root()
        if root is None:
            return None
        source, target = Path(real_path(source)), Path(real_path(target))
        pair = f"{source}\0{target}".encode()
        return cls(root / hashlib.sha256(pair).hexdigest()[:24], source, target)

    def sealed_run(self) -> str | None:
        return (self._seal() or {}).get("run_id")

    def _seal(self) -> dict | None:
        """The seal, when it is of this copy (the file sealed) and this source."""
        seal, self._unsealed_why = cache_bounds.read_seal(self.folder)
        # an older lcm-etl sealed the source as it was typed: the same file by its real path is the same source
        if seal is None or real_path(str(seal.get("source"))) == str(self.source):
            return seal
        self._unsealed_why = f"it was kept for {seal.get('source')}"
        return None

    def unseal(self) -> None:
        self.seal_file.unlink(missing_ok=True)
        self.memo_file.unlink(missing_ok=True)
        self.digests_file.unlink(missing_ok=True)

    def finish(self, committed: str | None, digests: list[bytes] | None) -> str | None:
        """At the end of the run: when it committed, the cache brought within its bound and the copy sealed (the
        seal last: a fleet's worker is idle once it is written); else, or when the copy does not fit, the copy
        no seal vouches for removed. The pair let go. A warning line for the report, or None."""
        if self._hold is None:   # the copy was never made here (the cache folder could not be)
            return self.warning
        try:
            if committed and self._fits():
                cache_bounds.mark_used(self.folder, self.source, self.target)
                self.seal(committed, digests)
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
        self.warning = (f"the snapshot of this run ({self.db.stat().st_size / 1e6:.1f} MB) is larger than the "
                        f"cache's bound, LCM_ETL_CACHE_SIZE={written}: not kept, the next run copies the source whole")
        return False

    def discard_unsealed(self) -> None:
        """At the end of a run that did not commit: a copy no seal vouches for (this run unsealed it before
        changing it) is of no use to any later run, which copies the source whole; its bytes (the source's
        size) go. A copy still sealed, by an earlier run, stays."""
        if self._seal() is None:
            self.unseal()
            for suffix in ("", "-wal", "-journal"):
                Path(str(self.db) + suffix).unlink(missing_ok=True)
            (self.folder / cache_bounds.PAIR).unlink(missing_ok=True)

    def _sealed_memo(self) -> dict:
        """The interior pages of the sealed copy, parsed when it was sealed (empty when not kept)."""
        try:
            signature, memo = marshal.loads(self.memo_file.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            return {}
        return memo if signature == file_signature(self.db)[0] and isinstance(memo, dict) else {}

    def sealed_digests(self) -> tuple[list[bytes], int] | None:
        """The sealed copy's chunk digests and size, when kept for this very file."""
        try:
            signature, size, digests = marshal.loads(self.digests_file.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        return (digests, size) if signature == file_signature(self.db)[0] and isinstance(digests, list) else None

    def seal(self, run_id: str, digests: list[bytes] | None = None) -> None:
        """The run that read the copy has committed: the copy is its snapshot. The run has landed whatever
        happens here: a seal that cannot be written only costs the next run a whole copy."""
        if self._memo is None:   # a whole copy: its interior pages, parsed once for every re-run after it
            self._memo = page_owners.interior_pages(self.db)
        signature = file_signature(self.db)[0]
        # a main file written just before it was read proves nothing by its signature: the next run compares it
        read = self.read.as_json() if self.read is not None and self.read.settled() else None
        body = orjson.dumps({"run_id": run_id, "source": str(self.source), "target": str(self.target),
                             "signature": signature, "target_signature": _target_signature(self.target),
                             "source_read": read, "check_from": self._check_from})
        if self._memo:
            write_atomically(self.memo_file, marshal.dumps((signature, self._memo)))
        if digests is not None and signature is not None:   # the snapshot's, hashed for the run's ledger row
            write_atomically(self.digests_file, marshal.dumps((signature, signature[1], digests)))
        if not write_atomically(self.seal_file, body):
            self.warning = (f"the snapshot this run kept in {self.folder} could not be sealed (the cache folder "
                            "cannot be written): the next run copies the source whole")

    def snapshot(self, since_run: str | None, tmp_root: str | None,
                 progress: Callable[[int, int], None] | None = None) -> tuple[Snapshot, Changes | None]:
        """The source's snapshot, in the kept copy. With the copy sealed by `since_run`: only the differing
        pages are written, and what they hold is returned; otherwise the source is copied whole (None), its
        bytes told to `progress` (sources.take_snapshot)."""
        cache_bound()   # a bound that is not a size is said before anything is read
        try:
            cache_bounds.sweep(self.folder.parent, but=self.folder)   # the copies killed runs left, of other pairs
            self._hold = cache_bounds.hold(self.folder)
        except OSError as exc:
            return self._without_cache(why_failed(exc), tmp_root, progress), None
        seal = self._seal() if since_run is not None else None
        if since_run is not None and seal is None and self.db.exists():
            self.dropped = self._unsealed_why
        elif seal is not None and seal.get("run_id") != since_run:
            self.dropped = f"it is run {seal.get('run_id')}'s, and the target's last run is another"
        if seal is not None and seal.get("run_id") == since_run:
            memo, digests = self._sealed_memo(), self.sealed_digests()
            sealed_target = seal.get("target_signature")
            self.target_untouched = sealed_target is not None and sealed_target == _target_signature(self.target)
            self.unseal()
            folder, hold = runfolder.make(tmp_root)
            try:
                # the differing pages' bytes wait in a file of the run's folder until written, not in memory
                with pages.SpilledPages(folder / "differing-pages") as spill:
                    changes = self._refresh(folder, memo, seal.get("source_read"), digests,
                                            seal.get("check_from", 0), spill)
            except OSError as exc:   # the copy is unsealed, half written: it goes, and the run goes on without
                _let_go(folder, hold)
                return self._without_cache(why_failed(exc), tmp_root, progress), None
            except BaseException:
                _let_go(folder, hold)
                raise
            if changes is not None:
                known = KnownDigests(digests[0], digests[1], self._written) if digests else None
                return Snapshot(self.source, self.db, folder, self.db.stat().st_size, known=known, hold=hold), changes
            _let_go(folder, hold)
        self.unseal()
        self._memo = None
        try:
            snap = take_snapshot(self.source, "source", tmp_root, into=self.db, progress=progress)
        except CacheUnwritable as exc:
            return self._without_cache(exc.why, tmp_root, progress), None
        self.read = snap.read
        return snap, None

    def _without_cache(self, why: str, tmp_root: str | None, progress: Callable[[int, int], None] | None) -> Snapshot:
        """The cache folder cannot hold the copy: none is kept (what was written of it goes), this run copies
        the source where a run's copy goes, and says so once."""
        self.warning = (f"the cache folder {self.folder.parent} cannot hold a kept snapshot ({why}): this run keeps "
                        "none, and the next copies the source whole (free space there, point LCM_ETL_CACHE_DIR at "
                        "another folder, or set it to off)")
        self.target_untouched, self.dropped = False, None
        if self._hold is not None:
            self._let_go_of_folder()
        return take_snapshot(self.source, "source", tmp_root, progress=progress)

    def _refresh(self, scratch: Path, memo: dict, sealed_read: dict | None, digests: tuple[list[bytes], int] | None,
                 check_from: int, spill: pages.SpilledPages) -> Changes | None:
        """Compare, then write the differing pages and fold the source's WAL into the copy. None when the
        copy cannot be brought up to date page by page (then the caller copies the source whole; `dropped` says
        why).

        The main file is not compared when it is the one the copy was read from (sealed_read: its signature,
        settled, and the WAL's frames then): every page the copy can differ in is then in the WAL. The copy is
        that main file with the WAL's frames committed then folded in; the main file has not been written
        since (no checkpoint), and those frames are still in the WAL, unchanged (pages.wal_keeps), with every
        frame committed since: folding the WAL as it is now writes each such page. The copy's other pages are
        then trusted unread: their digests are checked first, a share of them each run (snapcheck), so the copy
        needs its recorded digests for this path."""
        incoming = scratch / "incoming-wal"
        wal = Path(str(self.source) + "-wal")
        self._check_from = check_from
        trusted = sealed_read if isinstance(sealed_read, dict) and "wal" in sealed_read and digests else None
        for _ in range(20):
            at, before = time.time_ns(), file_signature(self.source)
            untouched = trusted is not None and before[0] == trusted.get("main")
            try:
                with pages.PageFile(self.source) as new, pages.PageFile(self.db) as old:
                    limit = max(int(MAX_CHANGED_SHARE * max(new.pages, old.pages)), MIN_CHANGED_LIMIT)
                    if new.page_size != old.page_size:
                        raise pages.NotComparable("page size changed")
                    spill.reset()
                    diff = spill if untouched or pages.differing_pages(new, old, limit, spill) else None
                    page_size, new_pages = new.page_size, new.pages
            except pages.NotComparable as exc:
                self.dropped = f"it cannot be compared page by page: {exc}"
                return None
            incoming.unlink(missing_ok=True)
            if wal.exists():
                shutil.copyfile(wal, incoming)
            if untouched and trusted and trusted["wal"] is not None and not pages.wal_keeps(incoming, trusted["wal"]):
                trusted = None   # frames the copy holds may be gone from the WAL (reset, lost): compare
                continue
            if unchanged_but_appended(before, file_signature(self.source)):
                break
        else:
            raise RunFailed(f"source kept changing while it was copied: {self.source}; retry when it is quieter")
        if diff is None:
            self.dropped = f"more than {limit} of its pages changed: a whole copy costs less"
            return None
        self.read = SourceRead(before[0], pages.wal_frames(incoming), at)
        try:
            changed = set(diff) | (pages.wal_pages(incoming, page_size) if incoming.exists() else set())
            # the chunks whose digests change: the pages written here or by folding the WAL, and page 1 (the
            # header SQLite rewrites when the folded copy leaves WAL mode); a change of length is chunk_digests'
            self._written = {(n - 1) * page_size // DIGEST_CHUNK for n in changed} | {0}
            if untouched and digests and not self._checked(digests, self._written):
                return None
            # interior pages outside `changed` hold the same bytes in the sealed copy, the old one and the new
            old_owners, old_explained = page_owners.owners(self.db, changed, memo=memo)
        except (pages.NotComparable, sqlite3.Error) as exc:
            self.dropped = f"its changed pages cannot be read: {exc}"
            return None
        with open(self.db, "r+b") as fh:
            for n, data in diff.items():   # in page order
                if data:
                    fh.seek((n - 1) * page_size)
                    fh.write(data)
            fh.truncate(new_pages * page_size)
        if incoming.exists():
            os.replace(incoming, str(self.db) + "-wal")
        fold_wal(self.db, self.source, "source")
        for n in changed:   # parsed again from the new copy where it still is an interior page
            memo.pop(n, None)
        try:
            new_owners, new_explained = page_owners.owners(self.db, changed, memo=memo, against=old_owners)
        except (pages.NotComparable, sqlite3.Error) as exc:
            return Changes(None, len(changed), f"cannot read the changed pages: {exc}", compared=not untouched)
        self._memo = memo
        unexplained = changed - old_explained - new_explained
        if unexplained:   # overflow pages of index entries (rare: an indexed value of over ~1000 bytes)
            unexplained -= page_owners.owners(self.db, changed, index_cells=True, memo=memo)[1]
        if unexplained:
            return Changes(None, len(changed), f"{len(unexplained)} changed pages are not rows lcm-etl can place",
                           compared=not untouched)
        owners = page_owners.of_changed_rows(old_owners, new_owners)
        if None in owners:
            return Changes(None, len(changed), "rows of no conversation changed", compared=not untouched)
        return Changes({str(c) for c in owners}, len(changed), compared=not untouched)


    def _checked(self, digests: tuple[list[bytes], int], written: set[int]) -> bool:
        """The copy's chunks this run trusts unread are as sealed: a rotating share of them, and those it is
        about to write into (snapcheck). Else the copy is dropped."""
        share, self._check_from = snapcheck.rotation(self._check_from, len(digests[0]))
        bad = snapcheck.first_damaged(self.db, digests[0], digests[1], share | written)
        if bad is not None:
            self.dropped = (f"chunk {bad} of its file differs from the digest recorded when it was sealed: the copy "
                            "was changed behind lcm-etl's back")
        return bad is None


def used(source: Path, target: Path, dry_run: bool) -> None:
    """A migrate of the pair found nothing changed: its kept snapshot is still wanted (eviction's order)."""
    cache = None if dry_run else SnapshotCache.for_pair(source, target)
    if cache is not None and cache._seal() is not None:
        cache_bounds.mark_used(cache.folder, source, target)


def _let_go(folder: Path, hold: int) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    os.close(hold)


def _rmdir_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()   # the pair's folder, when nothing else is in it
    except OSError:
        pass


def _target_signature(target: Path) -> list | None:
    """The target file as a committed run leaves it (its WAL checkpointed away), else None: any write since,
    by anyone, changes it. A WAL left empty by a reader's open is no write."""
    main, wal = file_signature(target)
    return main if wal is None or wal[1] == 0 else None
