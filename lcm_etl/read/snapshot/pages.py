"""Which rows of a SQLite file changed between two copies of it, read from the file format itself.

A sync re-run must prove cheaply that what it does not re-read is unchanged. Two copies of one
database whose pages hold the same bytes hold the same rows, so comparing the previous run's snapshot with
the source page by page (memcmp speed) proves every row on an identical page unchanged. What remains is to
say which rows live on the pages that differ. A rowid table keeps its rows in the leaves of a b-tree, and
the interior pages above a leaf bound the rowids it can hold: a changed leaf names a rowid range of one
table, in the old copy (rows that were there: updated, moved away or deleted) and in the new one (rows that
are there now). A row too large for its leaf continues on overflow pages; those are accounted for by the
cells of the changed leaves that point to them. Any changed page that is not a b-tree page, a free page or
an overflow page of a changed cell cannot be explained, and the caller then plans everything: the proof is
never assumed. Format: https://www.sqlite.org/fileformat2.html (sections 1.3, 1.5, 1.6, 4).
"""
from __future__ import annotations

import os
import struct
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path


HEADER = b"SQLite format 3\x00"
LOCK_BYTE_OFFSET = 1 << 30
_TABLE_INTERIOR, _TABLE_LEAF, _INDEX_INTERIOR, _INDEX_LEAF = 0x05, 0x0D, 0x02, 0x0A
_CHUNK_PAGES = 256   # differing_pages compares this many pages at a time


class NotComparable(Exception):
    """The two copies cannot be compared page by page (page size, auto-vacuum, a damaged page)."""


def _varint(buf, i: int) -> tuple[int, int]:
    v = 0
    for k in range(8):
        b = buf[i + k]
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, i + k + 1
    return (v << 8) | buf[i + 8], i + 9


@dataclass
class Leaf:
    tree: int          # root page of the b-tree it belongs to
    lo: int | None     # rowids in (lo, hi]; None: unbounded (table trees only)
    hi: int | None


@dataclass
class Layout:
    """Where everything lives in one copy: each b-tree page, free pages, and the table leaves' rowid ranges."""
    page_size: int
    usable: int
    pages: int
    btree: dict[int, int] = field(default_factory=dict)       # page -> root of its tree
    leaves: dict[int, Leaf] = field(default_factory=dict)     # table leaves
    free: set[int] = field(default_factory=set)


class PageFile:
    """Read-only pages of one database file, read one by one with pread. Not mapped: the kernel's readahead
    around every mapped page a walk touches counted in the process's RSS (613 MB for the interior pages of a
    4.5 GB source), where a read leaves those neighbours in the page cache only."""

    def __init__(self, path: Path):
        self.path = path
        self._fh = open(path, "rb", buffering=0)
        size = Path(path).stat().st_size
        head = os.pread(self._fh.fileno(), 100, 0)
        if len(head) < 100 or head[:16] != HEADER:
            self.close()
            raise NotComparable(f"{path} is not a SQLite database")
        ps = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if ps == 1 else ps
        self.usable = self.page_size - head[20]
        self.pages = size // self.page_size
        self.auto_vacuum = int.from_bytes(head[52:56], "big") != 0
        self.freelist = (int.from_bytes(head[32:36], "big"), int.from_bytes(head[36:40], "big"))

    def page(self, n: int) -> bytes:
        if not 1 <= n <= self.pages:
            raise NotComparable(f"page {n} is outside the file")
        data = os.pread(self._fh.fileno(), self.page_size, (n - 1) * self.page_size)
        if len(data) != self.page_size:
            raise NotComparable(f"page {n} is outside the file")
        return data

    def close(self) -> None:
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def layout(pf: PageFile, roots: dict[int, bool], wanted: set[int], memo: dict | None = None) -> Layout:
    """Walk every b-tree (root page -> is it a rowid table) and the free list. Interior pages are all read
    and recorded; of the leaves, only the `wanted` ones are recorded (with their rowid range), and none is
    read: a million-leaf table costs the few hundred interior pages above its leaves. `memo`, shared by the
    walks of two copies whose pages outside `wanted` hold the same bytes, keeps each interior page's child
    pointers and kind, so the second walk, and the next run's, reads only the pages that changed."""
    out = Layout(pf.page_size, pf.usable, pf.pages)
    cells: dict = {} if memo is None else memo
    for root in roots:
        _walk(pf, root, root, None, None, out, wanted, 0, cells)
    trunk, count = pf.freelist
    seen = 0
    while trunk and seen <= pf.pages:
        page = pf.page(trunk)
        out.free.add(trunk)
        n = int.from_bytes(page[4:8], "big")
        out.free.update(int.from_bytes(page[8 + 4 * k: 12 + 4 * k], "big") for k in range(min(n, pf.usable // 4)))
        trunk, seen = int.from_bytes(page[0:4], "big"), seen + 1 + n
    return out


def is_ptrmap(pf: PageFile, n: int) -> bool:
    """A pointer-map page of an auto-vacuum file (OpenClaw's stores are incremental): it holds each page's parent,
    no row. Auto-vacuum may move a page; the rows on a moved page are compared at its new place as any changed
    page's are (file format, 1.6: ptrmapPageno)."""
    if not pf.auto_vacuum or n < 2:
        return False
    per = pf.usable // 5 + 1
    first = 2 + (n - 2) // per * per
    return n == (first + 1 if first == LOCK_BYTE_OFFSET // pf.page_size + 1 else first)


def _kind(pf: PageFile, n: int) -> int:
    return pf.page(n)[100 if n == 1 else 0]


def _walk(pf: PageFile, n: int, root: int, lo, hi, out: Layout, wanted: set[int], depth: int, memo: dict) -> None:
    if depth > 40 or n in out.btree:
        raise NotComparable(f"b-tree of root {root} loops or is too deep")
    out.btree[n] = root
    # a page's memo: its cell pointers, its children's page numbers, its kind, as the page's bytes hold them, and
    # whether its children are leaves (else each walk read a child of every interior page: 16 MB of a 500k store).
    # Bytes, not tuples of ints: the 4,584 interior pages of a 4.5 GB source held 83 MB as Python ints, 11 MB so.
    # A page kept there is not read again unless a child's bounds are wanted from it
    parsed, page = memo.get(n) if n not in wanted else None, b""
    if parsed is None or len(parsed) != 4:   # not kept, or kept by an earlier version
        page = pf.page(n)
        at = 100 if n == 1 else 0
        if page[at] in (_TABLE_LEAF, _INDEX_LEAF):        # a root that is a leaf
            if page[at] == _TABLE_LEAF:
                out.leaves[n] = Leaf(root, lo, hi)
            return
        if page[at] not in (_TABLE_INTERIOR, _INDEX_INTERIOR):
            raise NotComparable(f"page {n} is not a b-tree page")
        count = int.from_bytes(page[at + 3: at + 5], "big")
        pointers = page[at + 12: at + 12 + 2 * count]
        children_at = b"".join([page[o: o + 4] for o in struct.unpack(f">{count}H", pointers)])
        parsed = memo[n] = (pointers, children_at + page[at + 8: at + 12], page[at], None)
    kind, count = parsed[2], len(parsed[0]) // 2
    children = struct.unpack(f">{count + 1}I", parsed[1])

    def key(k: int):   # the upper bound of child k (the parent's bound for the right-most child)
        nonlocal page
        if kind != _TABLE_INTERIOR:
            return None
        page = page or pf.page(n)
        return _varint(page, struct.unpack_from(">H", parsed[0], 2 * k)[0] + 4)[0] if k < count else hi

    # a b-tree is balanced: when one child is a leaf, all are, and unwanted leaves need not be read. A child's kind
    # is a byte of the child: what the memo says of it holds while no child is among the pages that changed
    leafy = parsed[3]
    if leafy is None or not wanted.isdisjoint(children):
        leafy = _kind(pf, children[0]) in (_TABLE_LEAF, _INDEX_LEAF)
        memo[n] = (*parsed[:3], leafy)
    if leafy:
        for child in wanted.intersection(children):
            k = children.index(child)
            out.btree[child] = root
            if kind == _TABLE_INTERIOR:
                out.leaves[child] = Leaf(root, key(k - 1) if k else lo, key(k))
        return
    for k, child in enumerate(children):
        _walk(pf, child, root, key(k - 1) if k else lo, key(k), out, wanted, depth + 1, memo)


def overflow_pages(pf: PageFile, n: int) -> set[int]:
    """The overflow pages of every cell on b-tree page n (cells whose payload does not fit on the page)."""
    page = pf.page(n)
    at = 100 if n == 1 else 0
    kind = page[at]
    if kind == _TABLE_INTERIOR:
        return set()                          # a table's interior cells hold only child pointers and keys
    ncells = int.from_bytes(page[at + 3: at + 5], "big")
    header = 8 if kind in (_TABLE_LEAF, _INDEX_LEAF) else 12
    u = pf.usable
    most = u - 35 if kind == _TABLE_LEAF else ((u - 12) * 64 // 255) - 23
    least = ((u - 12) * 32 // 255) - 23
    skip = 4 if kind == _INDEX_INTERIOR else 0
    out: set[int] = set()
    for off in struct.unpack_from(f">{ncells}H", page, at + header):
        i = off + skip
        if page[i] < 0x80 or (page[i + 1] < 0x80 and ((page[i] & 0x7F) << 7 | page[i + 1]) <= most):
            continue                             # a payload of at most 16383 bytes that fits: most cells
        size, i = _varint(page, i)
        if size <= most:
            continue
        if kind == _TABLE_LEAF:
            i = _varint(page, i)[1]            # the rowid
        local = least + (size - least) % (u - 4)
        if local > most:
            local = least
        nxt = int.from_bytes(page[i + local: i + local + 4], "big")
        remaining = size - local
        while nxt and remaining > 0:
            if nxt in out or len(out) > pf.pages:
                raise NotComparable(f"overflow chain from page {n} loops")
            out.add(nxt)
            nxt, remaining = int.from_bytes(pf.page(nxt)[0:4], "big"), remaining - (u - 4)
    return out


class SpilledPages:
    """The differing pages' bytes, kept in a file of the run's private folder rather than in memory: a re-run
    after 1 % growth of a 4.5 GB source holds about 190 MB of them from the comparison until they are written
    into the copy, and memory freed in 4 KiB pieces is not given back to the system, so the plan's DuckDB
    came on top of them (a re-run peaked at 525 MB, a first run at 240 MB). Page number -> where its bytes are
    in the file; a page past the end of `new` has none (b"")."""

    def __init__(self, path: Path):
        self.path = path
        self._fh = open(path, "w+b")
        self._at: dict[int, tuple[int, int]] = {}   # page -> (offset, length)
        self._undo: list | None = None   # since begin(): (page, where its bytes were before), for rollback()

    def reset(self) -> None:
        """Empty, for another comparison."""
        self._fh.seek(0)
        self._fh.truncate()
        self._at.clear()
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
        self._at[n] = (self._fh.tell(), len(data))   # only ever written at its end (read back with pread)
        self._fh.write(data)

    def __len__(self) -> int:
        return len(self._at)

    def get(self, n: int) -> bytes | None:
        if n not in self._at:
            return None
        self._fh.flush()
        at, length = self._at[n]
        return os.pread(self._fh.fileno(), length, at)

    def __iter__(self):
        return iter(self._at)

    def items(self) -> Generator[tuple[int, bytes], None, None]:
        """(page, bytes) in page order, read back one page at a time."""
        self._fh.flush()
        for n in sorted(self._at):
            at, length = self._at[n]
            yield n, os.pread(self._fh.fileno(), length, at) if length else b""

    def close(self) -> None:
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
