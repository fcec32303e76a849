"""The transcripts a run read, in read order, with each released store window kept on disk instead of in Python.

A store of 10,000 windows is read into 10,000 Transcripts. Released (transcript_rows.release: its rows spooled, its
parse dropped), a window still held about 1.5 KB in objects and strings: its window, read mark, report and reload.
That was the part of a run's peak memory that grew with the store: 10× the store, 10× the windows, +15 MB
(docs/benchmarks.md, 2026-11-26 22:21). `Transcripts` keeps each released window pickled in a SQLite file in the run's
private folder (`shelve`), and gives it back, an equal Transcript, when it is asked for by index or in iteration:
what Python holds of a shelved window is one list slot, whatever the store's size.

A transcript given back is read-only: it may be a copy (the last one given back is kept, so asking for the same index
twice gives the same object), so one that must change is replaced by index, as Reading.read_whole does. A
reload (transcript_rows.release) holds the open store, which no file can: it is kept as the read's arguments and
made again when the window is given back (`revive`).
"""
from __future__ import annotations

import pickle
import sqlite3
from collections.abc import MutableSequence
from pathlib import Path
from typing import Callable, Iterator, overload

from lcm_etl.read.transcript.transcripts import Transcript
from lcm_etl.sqlite_runtime import private_file

CACHE_KIB = 1024   # written once, read in order: SQLite's page cache need not hold the file


class Transcripts(MutableSequence[Transcript]):
    """A list of transcripts whose shelved entries live in `folder`/windows.sqlite until asked for."""

    def __init__(self, folder: Path | None = None, revive: Callable[[Transcript, object], None] | None = None):
        self._items: list[Transcript | None] = []   # None: shelved, its pickle in the file under its index
        self._folder = folder
        self.revive = revive       # (transcript, what shelve was given to remake it) -> None
        self._con: sqlite3.Connection | None = None
        self._last: tuple[int, Transcript] | None = None   # the one given back last: asked for again message by message
        self._paths: set[Path] = set()

    # ------------------------------------------------------------------------------------------
    # what a list does

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> Transcript: ...

    @overload
    def __getitem__(self, i: slice) -> list[Transcript]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        t = self._items[i]
        return t if t is not None else self._unshelve(i)

    def __setitem__(self, i, t) -> None:   # one index, one transcript
        i = range(len(self))[i]
        self._items[i] = t   # a replaced one is in memory from now on: the shelf's copy is never read again
        self._paths.add(t.path)

    def __delitem__(self, i) -> None:
        raise TypeError("transcripts are replaced or cleared, never deleted one at a time: their order is their id")

    def insert(self, index: int, t: Transcript) -> None:
        if index != len(self):
            raise TypeError("transcripts are only appended: their order is their id (message_id = order << 32 | index)")
        self._items.append(t)
        self._paths.add(t.path)

    def __iter__(self) -> Iterator[Transcript]:
        """In order; the shelved ones read from the file in one pass, not looked up one at a time."""
        rows: Iterator[tuple[int, bytes]] = iter(()) if self._con is None else \
            self._con.execute("SELECT i, t FROM shelf ORDER BY i")
        for i, t in enumerate(self._items):
            if t is None:
                for k, blob in rows:
                    if k == i:
                        t = self._given_back(i, blob)
                        break
                else:   # not reached: a shelved index has its row
                    t = self._unshelve(i)
            yield t

    def in_memory(self) -> Iterator[tuple[int, Transcript]]:
        """(index, transcript) of those not shelved: files, archives, windows read again whole."""
        return ((i, t) for i, t in enumerate(self._items) if t is not None)

    def paths(self) -> set[Path]:
        """The paths of the transcripts (a store's windows all name the store)."""
        return set(self._paths)

    def drop_content(self) -> None:
        """Drop what the transcripts held in memory keep of their messages (a run's stage holds what it writes by
        then), keeping what the report tells of each: its count, read mark and report."""
        for t in self._items:
            if t is not None:
                t.read_count = t.count()
                t.messages, t.abandoned = [], []
                t.identities = "dropped"

    def clear(self) -> None:
        self._items.clear()
        self._paths.clear()
        self._last = None
        self.close()

    # ------------------------------------------------------------------------------------------
    # the shelf

    def shelve(self, t: Transcript, remake: object = None) -> None:
        """Append a released transcript, kept in the file. `remake`: what `revive` needs to give it back its reload."""
        # only a transcript whose plan rows are in the spool: one that holds them (Arrow tables) must stay in memory,
        # where plan_transcripts finds it (in_memory)
        assert t.identities == "spooled", "only a spooled transcript is shelved"
        if self._folder is None:
            self.append(t)
            return
        if self._con is None:
            self._con = sqlite3.connect(self._folder / "windows.sqlite", isolation_level=None, check_same_thread=False)
            private_file(self._con, cache_kib=CACHE_KIB)
            self._con.execute("CREATE TABLE IF NOT EXISTS shelf (i INTEGER PRIMARY KEY, t BLOB NOT NULL)")
            self._con.execute("BEGIN")   # never committed: the file is the run's, removed with its folder
        reload, t.reload = t.reload, None
        try:
            self._con.execute("INSERT OR REPLACE INTO shelf VALUES (?, ?)",
                              (len(self._items), pickle.dumps((t, remake), pickle.HIGHEST_PROTOCOL)))
        finally:
            t.reload = reload
        self._items.append(None)
        self._paths.add(t.path)

    def shelved(self) -> int:
        return sum(t is None for t in self._items)

    def _unshelve(self, i: int) -> Transcript:
        if self._last is not None and self._last[0] == i:
            return self._last[1]
        assert self._con is not None
        return self._given_back(i, self._con.execute("SELECT t FROM shelf WHERE i = ?", (i,)).fetchone()[0])

    def _given_back(self, i: int, blob: bytes) -> Transcript:
        t, remake = pickle.loads(blob)
        if remake is not None and self.revive is not None:
            self.revive(t, remake)
        self._last = (i, t)
        return t

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
