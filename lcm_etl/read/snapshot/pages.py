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
from dataclasses import dataclass, field
from pathlib import Path


HEADER = b"SQLite format 3\x00"
LOCK_BYTE_OFFSET = 1 << 30
_TABLE_INTERIOR, _TABLE_LEAF, _INDEX_INTERIOR, _INDEX_LEAF = 0x05, 0x0D, 0x02, 0x0A


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

    def __init__(self, path: Path, known: dict[int, bytes] | None = None):
        self.path = path
        self.known = known   # the pages read, kept by the caller to read each once (refresh.py); None: not kept
        # (_by_pointer_map keeps them for the one walk it makes: a dict of its own)
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
        if self.known is not None and n in self.known:
            return self.known[n]
        data = os.pread(self._fh.fileno(), self.page_size, (n - 1) * self.page_size)
        if len(data) != self.page_size:
            raise NotComparable(f"page {n} is outside the file")
        if self.known is not None:
            self.known[n] = data
        return data

    def next_page(self, n: int) -> int:
        """An overflow page's first 4 bytes, the next page of its chain: read alone and not kept (a chain is a
        large value's pages, which the placing needs only the numbers of)."""
        if self.known is not None and n in self.known:
            return int.from_bytes(self.known[n][:4], "big")
        if not 1 <= n <= self.pages:
            raise NotComparable(f"page {n} is outside the file")
        return int.from_bytes(os.pread(self._fh.fileno(), 4, (n - 1) * self.page_size), "big")

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
    pointers and kind, so the second walk, and the next run's, reads only the pages that changed. An auto-vacuum
    file (OpenClaw's stores) names each page's parent in its pointer map: only the wanted pages and the pages above
    them are read (_by_pointer_map), and no memo is kept."""
    if pf.auto_vacuum:
        if memo:
            memo.clear()   # one an earlier version kept: not sealed again
        return _by_pointer_map(pf, roots, wanted)
    pf.known = None   # the memo holds what a walk needs of the interior pages, parsed: not their bytes as well
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


def _by_pointer_map(pf: PageFile, roots: dict[int, bool], wanted: set[int]) -> Layout:
    """The wanted pages placed through the pointer map (file format, 1.6): a b-tree page's tree found up its
    chain of parents, each link checked against the parent's own child pointers (a map that disagrees is not
    trusted); a table leaf's rowids are its own first to last. Only those pages and the pointer-map pages are
    read, each once: the interior pages of a 5,000,000-event store, parsed and kept beside its copy, were 11 MB
    read and written each sync."""
    out = Layout(pf.page_size, pf.usable, pf.pages)
    if pf.known is None:
        pf.known = {}
    page = pf.page
    for n in sorted(wanted):
        if n > pf.pages or is_ptrmap(pf, n) or n == LOCK_BYTE_OFFSET // pf.page_size + 1:
            continue
        kind, parent = _pointer(page, pf, n)
        if kind == _FREE:
            out.free.add(n)
        elif kind in (_ROOT, _BTREE):
            chain = [n]   # n and its parents up to its root, or to a page placed already
            while kind == _BTREE and chain[-1] not in out.btree:
                up, at = page(parent), 100 if parent == 1 else 0
                if up[at] not in (_TABLE_INTERIOR, _INDEX_INTERIOR) or chain[-1] not in _children(up, at) \
                        or len(chain) > 40:
                    raise NotComparable(f"the pointer map's parent of page {chain[-1]} does not point to it")
                chain.append(parent)
                kind, parent = _pointer(page, pf, parent)
            root = out.btree.get(chain[-1], chain[-1])
            if kind not in (_ROOT, _BTREE) or root not in roots:
                raise NotComparable(f"page {n} is in no b-tree of the schema")
            out.btree.update(dict.fromkeys(chain, root))
            if page(n)[100 if n == 1 else 0] == _TABLE_LEAF:
                out.leaves[n] = Leaf(root, *_rowids(page(n), 100 if n == 1 else 0))
    return out


_ROOT, _FREE, _BTREE = 1, 2, 5   # pointer-map entry kinds (3, 4: overflow pages, placed by their cells)


def _pointer(page, pf: PageFile, n: int) -> tuple[int, int]:
    """Page n's pointer-map entry: its kind and its parent (page 1, sqlite_schema's root, has none)."""
    if n == 1:
        return _ROOT, 0
    per = pf.usable // 5 + 1
    first = 2 + (n - 2) // per * per
    first += first == LOCK_BYTE_OFFSET // pf.page_size + 1
    entry = page(first)[5 * (n - first - 1): 5 * (n - first)]
    return entry[0], int.from_bytes(entry[1:], "big")


def _children(page: bytes, at: int) -> set[int]:
    count = int.from_bytes(page[at + 3: at + 5], "big")
    return {int.from_bytes(page[o: o + 4], "big") for o in struct.unpack_from(f">{count}H", page, at + 12)} | \
        {int.from_bytes(page[at + 8: at + 12], "big")}


def _rowids(page: bytes, at: int) -> tuple[int | None, int | None]:
    """A table leaf's rowids as a range (lo, hi]: from just before its first cell's to its last's."""
    count = int.from_bytes(page[at + 3: at + 5], "big")
    if not count:
        return None, None
    cells = struct.unpack_from(f">{count}H", page, at + 8)
    first, last = (_varint(page, _varint(page, o)[1])[0] for o in (cells[0], cells[-1]))
    first, last = (v - (1 << 64) if v >= 1 << 63 else v for v in (first, last))   # a rowid is signed
    return (first - 1 if first > -(1 << 63) else None), last


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
        leafy = pf.page(children[0])[0] in (_TABLE_LEAF, _INDEX_LEAF)   # a child is never page 1
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
            nxt, remaining = pf.next_page(nxt), remaining - (u - 4)
    return out
