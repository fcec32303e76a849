"""Which pages of a SQLite file differ from the kept copy's, and where their bytes wait until they are written
into it (lcm_etl/read/snapshot/pages.py says which rows live on them). Used when the main file changed in a way
the WAL does not account for (a missed WAL generation, a file copied over): the two files are compared page by
page, at memcmp speed; a WAL that continues from the frames read names its pages itself (wal.py)."""
from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO

from lcm_etl.read.snapshot.pages import NotComparable, PageFile

_CHUNK_PAGES = 256   # differing_pages compares this many pages at a time
HELD = 4 << 20   # bytes of differing pages SpilledPages keeps in memory (an auto-checkpoint's 1,000 pages of 4 KiB)


class SpilledPages:
    """The differing pages' bytes, kept in a file of the run's private folder rather than in memory: a re-run
    after 1 % growth of a 4.5 GB source holds about 190 MB of them from the comparison until they are written
    into the copy, and memory freed in 4 KiB pieces is not given back to the system, so the plan's DuckDB
    came on top of them (a re-run peaked at 525 MB, a first run at 240 MB). The first HELD bytes stay in memory (a
    watch's sync: its WAL frames, written and read back, were a tenth of what it read). Page number -> its bytes,
    or where they are in the file; a page past the end of `new` has none (b"")."""

    def __init__(self, path: Path):
        self.path = path
        self._fh: BinaryIO | None = None   # made when the pages outgrow HELD
        self._at: dict[int, bytes | tuple[int, int]] = {}   # page -> its bytes, or (offset, length) in the file
        self._held = 0
        self._undo: list | None = None   # since begin(): (page, where its bytes were before), for rollback()

    def reset(self) -> None:
        """Empty, for another comparison."""
        if self._fh is not None:
            self._fh.seek(0)
            self._fh.truncate()
        self._at.clear()
        self._held = 0
        self._undo = None   # a follow that failed mid-transaction leaves no undo for the comparison after it

    def begin(self) -> None:
        """Pages added from here on can be taken out again by rollback() (a WAL transaction without its commit)."""
        self._undo = []

    def rollback(self) -> None:
        for n, was in reversed(self._undo or []):
            if was is None:
                del self._at[n]
            else:
                self._at[n] = was
        self._undo = None

    def add(self, n: int, data) -> None:
        if self._undo is not None:
            self._undo.append((n, self._at.get(n)))
        if self._held + len(data) <= HELD:
            self._at[n] = bytes(data)   # a comparison's is a view of a buffer it reuses
            self._held += len(data)
            return
        if self._fh is None:
            self._fh = open(self.path, "w+b", buffering=1 << 20)   # a write a page (8 KiB buffers): 0.22 s of 46,000
        self._at[n] = (self._fh.tell(), len(data))   # only ever written at its end (read back with pread)
        self._fh.write(data)

    def __len__(self) -> int:
        return len(self._at)

    def get(self, n: int) -> bytes | None:
        at = self._at.get(n)
        return at if at is None or isinstance(at, bytes) else self._read(at)

    def _read(self, at: tuple[int, int]) -> bytes:
        assert self._fh is not None
        self._fh.flush()
        return os.pread(self._fh.fileno(), at[1], at[0]) if at[1] else b""

    def __iter__(self):
        return iter(self._at)

    def items(self) -> Generator[tuple[int, bytes], None, None]:
        """(page, bytes) in page order, read back one page at a time."""
        for n in sorted(self._at):
            at = self._at[n]
            yield n, at if isinstance(at, bytes) else self._read(at)

    def held(self) -> set[int]:
        """The pages whose bytes are in memory (no read brings them)."""
        return {n for n, at in self._at.items() if isinstance(at, bytes)}

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_FOLDED_HEADER = ((18, 20), (24, 28), (92, 100))


def same_page(n: int, a: bytes, b: bytes) -> bool:
    """Page n holds the same rows in both: its bytes are equal but for, on page 1, the header bytes folding
    rewrites (WAL/rollback, change counter, version-valid-for)."""
    if n != 1 or len(a) != len(b):
        return a == b
    theirs = bytearray(b)
    for lo, hi in _FOLDED_HEADER:
        theirs[lo:hi] = a[lo:hi]
    return a == theirs


def differing_pages(new: PageFile, old: PageFile, limit: int, spill: SpilledPages) -> bool:
    """Pages of `new` whose bytes differ from `old`'s, added to `spill` with their new bytes (pages past the end
    of `old` count, pages past the end of `new` have b""). False when more than `limit` differ. Read with
    preadv into reused buffers (bytearray equality is a memcmp): faster than touching mapped pages, and no
    RSS. One thread: comparing each half of the file on its own thread took 0.10 s, not 0.15 s, on 200k
    messages, but the second thread's malloc arena kept what it held, and a `--watch` grew by 13 % over 200
    syncs (tests/faults/test_watch_live.py; +0.7 % without it)."""
    if new.page_size != old.page_size:
        raise NotComparable("page size changed")
    if not _differing(new, old, 0, min(new.pages, old.pages) * new.page_size, limit, spill):
        return False
    for n in range(old.pages + 1, new.pages + 1):
        spill.add(n, new.page(n))
        if len(spill) > limit:
            return False
    for n in range(new.pages + 1, old.pages + 1):
        spill.add(n, b"")
    return len(spill) <= limit


def _differing(new: PageFile, old: PageFile, start: int, stop: int, limit: int, out: SpilledPages) -> bool:
    """differing_pages over the bytes [start, stop) that both files have: equal chunks of 256 pages are
    passed over by one memcmp; a differing chunk is looked into by blocks of 16 pages, then pages."""
    ps = new.page_size
    block = ps * 16
    chunk = _CHUNK_PAGES * ps
    a, b = bytearray(chunk), bytearray(chunk)
    same, theirs, ours = a.startswith, memoryview(b), memoryview(a)   # a.startswith(theirs[i:j], i): a memcmp
    fa, fb = new._fh.fileno(), old._fh.fileno()
    at = start
    while at < stop:
        n = min(os.preadv(fa, [a], at), os.preadv(fb, [b], at), stop - at)
        if n <= 0:
            break
        if at == 0:   # header bytes folding rewrites (WAL/rollback, change counter, version-valid-for): not data
            for lo, hi in _FOLDED_HEADER:
                b[lo:hi] = a[lo:hi]
        if n == chunk and a == b:
            at += n
            continue
        whole = n - n % ps
        for p in (q for lo in range(0, whole, block) if not same(theirs[lo: lo + block], lo)
                  for q in range(lo, min(lo + block, whole), ps) if not same(theirs[q: q + ps], q)):
            out.add((at + p) // ps + 1, ours[p: p + ps])
            if len(out) > limit:
                return False
        at += n
    return True
