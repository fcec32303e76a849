"""Which source conversations own the rows on the pages that differ between the kept snapshot and the source
(lcm_etl/read/snapshot/pages.py places a page; this reads its rows). The kept snapshot (snapshot/snapcache.py) asks it twice,
of the copy before the changed pages are written and after, and re-plans the owners of every row that differs.
"""
from __future__ import annotations

import hashlib
from lcm_etl.sqlite_runtime import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Mapping, NamedTuple

from lcm_etl import sqlite_runtime
from lcm_etl.read.snapshot import pages

_LOWEST, _HIGHEST = -(1 << 63), (1 << 63) - 1


class Owned(NamedTuple):
    """A table whose changed rows are placed (as lcmdb/source_tables.SourceTable is): `alias` in `joins`, and the
    row's one or two owners as two SQL columns."""
    alias: str
    owners: str
    joins: str


def _owner_query(t, values: bool, by_range: bool = True) -> str:
    """The rows of a rowid range (lo, hi], or the row of one rowid, with the one or two owners of each
    (lcmdb/source_tables.SourceTable.owners: NULL for a row of no conversation): (rowid, owner, owner[, the row's own
    columns...]); with their values or without. `t`: a table's alias, owners and joins (a SourceTable)."""
    where = f"{t.alias}.rowid > ? AND {t.alias}.rowid <= ?" if by_range else f"{t.alias}.rowid = ?"
    return f"SELECT {t.alias}.rowid, {t.owners}{f', {t.alias}.*' if values else ''} {t.joins} WHERE {where}"


def owners(db: Path, changed: set[int], tables: Mapping, index_cells: bool = False, memo: dict | None = None,
           against: dict | None = None, known: dict[int, bytes] | None = None) -> tuple[dict, set[int]]:
    """In one copy: the owners of rows on the changed pages (what `tables` says: the tables whose rows are placed,
    by name, each an Owned: lcm.db's conversations, a store's windows), and the changed pages accounted
    for (b-tree pages, free pages, overflow pages of rows on changed table leaves and, with `index_cells`,
    of index entries on changed index pages, the lock-byte page). `against`: the other copy's rows; a row
    not among them is changed whatever it holds, so it is not digested (most rows of a grown source). `known`: the
    copy's pages read already, by number, and where the pages read here go (pages.PageFile.known): of an
    auto-vacuum file only (OpenClaw's stores); a walk of every b-tree (lcm.db) keeps its memo instead."""
    con = sqlite_runtime.connect(db)
    try:
        roots, table_of = _trees(con, tables)
        with pages.PageFile(db, known) as pf:
            lay = pages.layout(pf, roots, changed, memo)
            explained = {n for n in changed if n in lay.btree or n in lay.free or n > pf.pages or pages.is_ptrmap(pf, n)}
            explained.add(pages.LOCK_BYTE_OFFSET // pf.page_size + 1)
            for n in changed & set(lay.btree):
                if n in lay.leaves or (index_cells and not roots.get(lay.btree[n], False)):
                    explained |= pages.overflow_pages(pf, n)
        ranges: dict[str, list[tuple[int, int]]] = {}
        for n in changed:
            leaf = lay.leaves.get(n)
            name = table_of.get(leaf.tree) if leaf else None
            if leaf is not None and name is not None and name in tables:
                lo = _LOWEST if leaf.lo is None else leaf.lo
                ranges.setdefault(name, []).append((lo, _HIGHEST if leaf.hi is None else leaf.hi))
        rows: dict[tuple[str, int], tuple] = {}
        for name, spans in ranges.items():
            for lo, hi in _merged(spans):
                # beside a sealed copy's rows, only the keys: the values of a row the other copy lacks are not
                # digested, and are most of a grown source's (its new messages' content, its parts' payloads)
                for row in con.execute(_owner_query(tables[name], values=against is None), (lo, hi)):
                    rows[(name, row[0])] = (row[1], row[2], None if against is not None else _digest(row[3:]))
        for name, rowid in rows.keys() & (against or {}).keys():   # rows on both sides: digested, one by one
            row = con.execute(_owner_query(tables[name], values=True, by_range=False), (rowid,)).fetchone()
            rows[(name, rowid)] = (row[1], row[2], _digest(row[3:]))
        return rows, explained & changed
    finally:
        con.close()


def of_changed_rows(old: dict, new: dict) -> set:
    """The conversations owning a row that differs between the two copies (None: a row of no conversation).
    A row on a changed page may be unchanged itself (its neighbour grew): the rows are compared."""
    out: set = set()
    for key in old.keys() | new.keys():
        was, now = old.get(key), new.get(key)
        if was != now:
            for row in (was, now):
                if row is not None:
                    out.update(row[:2])
    return out


def _trees(con: sqlite3.Connection, tables: Mapping) -> tuple[dict[int, bool], dict[int, str]]:
    """Every b-tree's root page (-> is it a rowid table), and the tables' names by root page."""
    objects = con.execute("SELECT type, name, tbl_name, rootpage, coalesce(sql, '') FROM sqlite_master "
                          "WHERE rootpage > 0").fetchall()
    roots = {1: True}
    table_of: dict[int, str] = {}
    for kind, name, _tbl, root, sql in objects:
        without_rowid = kind == "table" and "WITHOUT ROWID" in sql.upper().replace("\n", " ")
        if name in tables and without_rowid:
            raise pages.NotComparable(f"{name} is a WITHOUT ROWID table")
        roots[root] = kind == "table" and not without_rowid
        if kind == "table":
            table_of[root] = name
    return roots, table_of


def interior_pages(db: Path, tables: Mapping) -> dict | None:
    """pages.layout's memo for a copy: every interior page parsed (None when the copy cannot be walked)."""
    memo: dict = {}
    try:
        with closing(sqlite_runtime.connect(db)) as con:
            roots = _trees(con, tables)[0]
        with pages.PageFile(db) as pf:
            pages.layout(pf, roots, set(), memo)
    except (pages.NotComparable, sqlite3.Error, OSError):
        return None
    return memo


def _digest(values: tuple) -> bytes:
    """A row's values, typed: repr() tells 1 from '1' from b'1' from 1.0 (as they differ to the plan) and
    round-trips floats, in one C call per row."""
    return hashlib.blake2b(repr(values).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
