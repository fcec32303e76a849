"""A source's -wal copied beside the kept copy for SQLite to verify and fold in (refresh.py; sqlite_copy.fold_wal):
after the main file was compared whole, and when the WAL holds many new frames of the generation the copy holds
frames of (wal._FOLD: a bulk import, 190 MB of frames at a 2M-message lcm.db's 1 % growth). SQLite checks each
frame's checksum chain up to the last commit, as it does opening the database, in C: 0.5 s for 46,000 frames, where
verifying them in Python and writing their pages one by one took 1.4 s. What it folded is the copy's new mark."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lcm_etl.read.snapshot.sqlite_copy import copy_file
from lcm_etl.read.snapshot.wal import Fold, Mark, WalFile, boot_id, main_holds

_HEADER, _FRAME = 32, 24


@dataclass
class Headers:
    """The frame headers of a -wal copied beside a copy before SQLite folds it in (those carrying the header's salts,
    in order); SQLite then says how many it folded, and those are the copy's mark."""
    salts: str
    seq: int
    main: list | None
    frames: list[bytes]

    @classmethod
    def of(cls, wal: Path, main: list | None) -> Headers:
        w = WalFile(wal)
        try:
            frames: list[bytes] = []
            if w.ok:
                while (h := w.header(len(frames) + 1)) and h[8:16] == w.salts:
                    frames.append(h)
            return cls(w.salts.hex() if w.ok else "", w.seq if w.ok else -1, main, frames)
        finally:
            w.close()

    def mark(self, folded: int) -> Mark:
        """The mark of the copy SQLite folded the first `folded` frames into (its own chain check and last commit)."""
        if folded > len(self.frames):   # not the frames read here: no mark the next run could trust
            return Mark("", -1, "", main=None, boot="")
        taken = self.frames[:folded]
        return Mark(self.salts, self.seq, b"".join(h[16:24] for h in taken).hex(),
                    sorted({int.from_bytes(h[:4], "big") for h in taken}),
                    int.from_bytes(taken[-1][4:8], "big") if taken else 0, self.main, boot_id())

    def pages(self, first: int, end: int) -> set[int]:
        """The pages of frames first+1..end."""
        return {int.from_bytes(h[:4], "big") for h in self.frames[first:end]}


def copy(wal: Path, incoming: Path, fold: Fold, kept: Mark, page_size: int) -> tuple[Headers | None, str]:
    """The -wal's frames up to the generation's end copied to `incoming` (a writer's later checkpoint or restart
    cannot change what is folded; an older generation's frames beyond it are not read), and their headers; None and
    why when the copy is not of that generation or lacks the checksums of the frames the kept copy holds."""
    copy_file(wal, incoming, size=_HEADER + fold.end * (_FRAME + page_size))
    seen = Headers.of(incoming, fold.main)
    want = bytes.fromhex(kept.checksums)
    if (seen.salts, seen.seq) != (fold.salts, fold.seq) or len(seen.frames) < fold.read or \
            any(h[16:24] != want[i * 8:(i + 1) * 8] for i, h in enumerate(seen.frames[:fold.read])):
        incoming.unlink()
        return None, "the WAL restarted, or the frames the last sync read were written again"
    return seen, ""


def contradicted(source: Path, copy: Path, page_size: int, fold: Fold, folded: int, mark: Mark) -> str:
    """'' when the copy SQLite folded `folded` frames into (its new `mark`) is the source: it folded at least the
    frames the copy held, and a main file a checkpoint wrote holds the copy's bytes on every page the generation's
    folded frames name, at the size their last commit says (what a checkpoint writes); else why not."""
    if folded < fold.read:
        return f"SQLite folded {folded} of the WAL's frames, fewer than the {fold.read} the kept copy held"
    if not mark.salts:   # more than were copied (Headers.mark): pages this sync did not place
        return f"SQLite folded {folded} of the WAL's frames, more than were copied"
    if not fold.main_changed:
        return ""
    try:
        why = main_holds(source, copy, page_size, set(mark.pages), mark.db_pages, None)
    except OSError as exc:
        why = f"it cannot be read: {exc.strerror or exc}"
    return f"the main file changed otherwise than by a checkpoint of the WAL's frames: {why}" if why else ""
