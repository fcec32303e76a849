"""The kept copy brought up to date page by page (lcm_etl/read/snapshot/snapcache.py keeps it): the pages that differ
from the source, found from the source's WAL (wal.follow) or by comparing the main file whole, written into the copy,
and the owners of the rows they hold placed (page_owners.py). What the changed pages prove is a `Changes`."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from lcm_etl.errors import RunFailed
from lcm_etl.read.snapshot import page_diff, page_owners, pages, wal, wal_fold
from lcm_etl.read.snapshot.sqlite_copy import file_signature, fold_wal, unchanged_but_appended
from lcm_etl.sqlite_runtime import sqlite3

# more differing pages than this share of the source (or than 1 MB of pages on a small one): not worth
# proving page by page (beyond their first 4 MB, their bytes wait in a file until written); the source is copied whole
MAX_CHANGED_SHARE, MIN_CHANGED_LIMIT = 0.1, 256
# the source's -wal copied beside the copy until SQLite folds it in (not in the run's folder: a rename from another
# file system, a tmpfs TMPDIR, fails); one a killed run left goes with the seal (snapcache.unseal)
INCOMING = "incoming-wal"


@dataclass
class Changes:
    """What differs between the copy run `since` sealed and the source now: the owners of a changed row (lcm.db's
    conversations, a store's windows: page_owners.Owned), or None when the pages cannot be placed (`why`): then
    nothing is proved and the run plans everything."""
    since: str
    owners: set[str] | None
    pages: int
    why: str = ""
    way: str = ""   # how the changed pages were found: from the WAL's frames, or the main file compared whole (why)


@dataclass
class Refresh:
    """One bringing up to date of the copy `db` of `source`; `tables`: the tables whose changed rows are placed. What
    it leaves: the copy's interior pages parsed (`memo`) and the WAL frames it holds (`wal`), or why the copy cannot be
    brought up to date (`dropped`)."""
    db: Path
    source: Path
    what: str
    tables: Mapping
    memo: dict | None = None
    wal_mark: wal.Mark | None = None
    dropped: str | None = None

    def run(self, memo: dict, spill: page_diff.SpilledPages, since: str, unchanged: bool,
            kept: wal.Mark | None) -> Changes | None:
        """Compare, then write the differing pages and fold the source's WAL into the copy: what changed since run
        `since` sealed it. None when the copy cannot be brought up to date page by page (then the caller copies the
        source whole; `dropped` says why). `unchanged`: the source's files are in the state that run found them in
        before it read them (the no-op shortcut's proof), so no page can differ and none is compared (a
        5,000,000-event store and its copy are 15 GB to read)."""
        if unchanged:
            self.memo, self.wal_mark = memo, kept
            return Changes(since, set(), 0, way="the source's files are as the last sync found them")
        incoming, source_wal = self.db.with_name(INCOMING), Path(str(self.source) + "-wal")
        seen: wal_fold.Headers | None = None
        try:
            with pages.PageFile(self.db) as old:
                page_size, copy_pages = old.page_size, old.pages
            followed, why = wal.follow(self.source, kept, self.db, page_size, spill)
            if followed is not None and followed.fold is not None and kept is not None:
                seen, why = wal_fold.copy(source_wal, incoming, followed.fold, kept, page_size)
                followed = followed if seen is not None else None
        except (OSError, pages.NotComparable) as exc:
            followed, why = None, f"the WAL cannot be read: {exc}"
        if followed is not None and followed.fold is not None:
            return self._place(memo, spill, copy_pages, page_size, incoming, seen, since, "", followed.fold)
        if followed is not None:
            self.wal_mark = followed.mark
            return self._place(memo, spill, followed.db_pages or copy_pages, page_size, None, None, since, followed.way)
        for _ in range(20):
            before = file_signature(self.source)
            try:
                with pages.PageFile(self.source) as new, pages.PageFile(self.db) as old:
                    limit = max(int(MAX_CHANGED_SHARE * max(new.pages, old.pages)), MIN_CHANGED_LIMIT)
                    if new.page_size != old.page_size:
                        raise pages.NotComparable("page size changed")
                    spill.reset()
                    diff = spill if page_diff.differing_pages(new, old, limit, spill) else None
                    page_size, new_pages = new.page_size, new.pages
            except pages.NotComparable as exc:
                self.dropped = f"it cannot be compared page by page: {exc}"
                return None
            incoming.unlink(missing_ok=True)
            if source_wal.exists():
                shutil.copyfile(source_wal, incoming)
            if unchanged_but_appended(before, file_signature(self.source)):
                break
        else:
            raise RunFailed(f"{self.what} kept changing while it was copied: {self.source}; retry when it is quieter")
        if diff is None:
            self.dropped = f"more than {limit} of its pages changed: a whole copy costs less"
            return None
        return self._place(memo, diff, new_pages, page_size, incoming, wal_fold.Headers.of(incoming, before[0]), since,
                           f"the main file compared whole: {why}")

    def _place(self, memo: dict, diff: page_diff.SpilledPages, new_pages: int, page_size: int, incoming: Path | None,
               seen: wal_fold.Headers | None, since: str, way: str, fold: wal.Fold | None = None) -> Changes | None:
        """Write the changed pages (and fold the copied -wal, `incoming`, its headers `seen`, when the main file was
        compared, or with `fold`, the many new frames SQLite folds) into the copy, and place the rows they hold: what
        changed since run `since`."""
        try:
            # with `fold`, the pages of every new frame (of a transaction SQLite leaves out too: they stay the same)
            changed = set(diff) | (seen.pages(fold.read, len(seen.frames)) if fold is not None and seen is not None
                                   else wal.wal_pages(incoming, page_size) if incoming and incoming.exists() else set())
            count = len(changed)
            # interior pages outside `changed` hold the same bytes in the sealed copy, the old one and the new (none
            # changed: no b-tree is walked, 0.06 s of a 500,000-event store's sync with nothing new)
            known: dict[int, bytes] = {}   # the copy's pages read in this sync, each read once (PageFile.known)
            old_owners, old_explained = (page_owners.owners(self.db, changed, self.tables, memo=memo, known=known)
                                         if changed else ({}, set()))
            for n in changed:   # the pages outside `changed` are the same bytes in the new copy: not read again
                known.pop(n, None)
        except (pages.NotComparable, sqlite3.Error) as exc:
            self.dropped = f"its changed pages cannot be read: {exc}"
            return None
        held = diff.held() if incoming is None else set()   # the new bytes of verified WAL frames, kept: not read back
        fd = os.open(self.db, os.O_RDWR)   # one pwrite a page (a buffered file's seek flushed it: two calls)
        try:
            for n, data in diff.items():   # in page order
                if data:
                    if n == 1 and incoming is None:   # a WAL frame's page 1 says WAL mode: the copy stays in rollback
                        data = data[:18] + b"\x01\x01" + data[20:]
                    os.pwrite(fd, data, (n - 1) * page_size)
                    if n in held:
                        known[n] = data
            os.truncate(fd, new_pages * page_size)
        finally:
            os.close(fd)
        if incoming is not None:
            if incoming.exists():
                os.replace(incoming, str(self.db) + "-wal")
            folded = fold_wal(self.db, self.source, self.what)
            self.wal_mark = seen.mark(folded) if seen is not None else None
            if fold is not None and seen is not None and self.wal_mark is not None:
                why = wal_fold.contradicted(self.source, self.db, page_size, fold, folded, self.wal_mark)
                if why:   # the copy now holds frames the source contradicts: it goes (a whole copy)
                    self.dropped = why
                    return None
                count = len(seen.pages(fold.read, folded))   # the pages of the frames folded
                way = f"{folded - fold.read} new WAL frames verified and folded by SQLite" + \
                    (f", the {len(self.wal_mark.pages)} pages a checkpoint wrote to the main file checked"
                     if fold.main_changed else "")
        for n in changed:   # parsed again from the new copy where it still is an interior page
            memo.pop(n, None)
        try:
            new_owners, new_explained = (page_owners.owners(self.db, changed, self.tables, memo=memo, against=old_owners,
                                                            known=known) if changed else ({}, set()))
        except (pages.NotComparable, sqlite3.Error) as exc:
            return Changes(since, None, count, f"cannot read the changed pages: {exc}", way)
        self.memo = memo
        unexplained = changed - old_explained - new_explained
        if unexplained:   # overflow pages of index entries (rare: an indexed value of over ~1000 bytes)
            unexplained -= page_owners.owners(self.db, changed, self.tables, index_cells=True, memo=memo,
                                              known=known)[1]
        if unexplained:
            return Changes(since, None, count, f"{len(unexplained)} changed pages are not rows lcm-etl can place", way)
        owners = page_owners.of_changed_rows(old_owners, new_owners)
        if None in owners:
            return Changes(since, None, count, "rows of no conversation changed", way)
        return Changes(since, {str(c) for c in owners}, count, way=way)
