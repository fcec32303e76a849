"""The kept snapshot brought up to date from the source's -wal alone, when the WAL proves it holds the whole change.

While a gateway holds a database open (journal_mode=WAL, SQLite's auto-checkpoint at 1000 pages, as
OpenClaw 2026.9.6 and lossless-claw open them), the main file changes only at a checkpoint; between two,
commits only append frames to the -wal. The database is the main file with the frames of the WAL's current
generation (the header's salts) laid over it, up to the last commit frame whose checksum chain, started by the
header, is intact: what SQLite itself reads (https://www.sqlite.org/fileformat2.html, "The Write-Ahead Log"). The kept copy is the
source as a sync read it: the main file then, with one generation's frames up to a commit folded in. Its `Mark`,
kept in the seal, says which: the generation (salts, checkpoint sequence), each frame read's checksum and page, the
main file's signature before the read, the machine's boot.

`follow` says how the copy is brought up to date, reading only frames whose checksum chain it verified:
- the same generation, every frame read still there (each checksum the same), the main file unchanged: the
  frames after them are the whole change;
- the same, the main file written since (a checkpoint): the same, and the main file must hold the copy's bytes on
  every page the generation names and be the size its last commit says (a checkpoint writes only those pages);
- the next generation (the WAL restarted once after a checkpoint: sequence + 1): the old generation's frames after
  the ones read must still be in the file beyond the new generation's (which starts again at the first frame) and
  the frames read must still be there; the main file checked on the pages the old generation names, as above;
- a WAL with no frame, the main file unchanged and the copy holding none: nothing changed;
- anything else is a generation missed (several restarts, a TRUNCATE, a reboot since, which may have lost frames
  the last sync read from memory, frames read that are no longer there): None and why, and the caller compares
  the main file whole.
"""
from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Generator
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lcm_etl.file_identity import file_signature
from lcm_etl.read.snapshot.page_diff import SpilledPages, same_page
from lcm_etl.read.snapshot.pages import NotComparable
from lcm_etl.read.snapshot.wal_checksum import BATCH, MASK, checksum, frame_sums, step

_MAGIC = (0x377F0682, 0x377F0683)   # the low bit: the checksums' words are big-endian
_HEADER, _FRAME = 32, 24
_BULK = 48 << 20   # a WAL with this many bytes left to read has its checksums summed in bulk (wal_checksum.frame_sums)
# new frames of the generation the copy holds frames of, this many bytes and at least as many as the frames read
# before: SQLite verifies and folds them (wal_fold.py); fewer (a watch's sync: a few hundred KB) are read here
_FOLD = 8 << 20


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _wal_headers(wal: Path) -> Generator[bytes, None, None]:
    """A WAL file's 32-byte header, then the 24-byte header of each whole frame, in file order (nothing when
    the file is missing or too short for a header)."""
    try:   # unbuffered: a buffered read of each 24-byte header read 8 KiB, twice the WAL at 4 KiB pages
        fh = open(wal, "rb", buffering=0)
    except FileNotFoundError:
        return
    with fh:
        head = fh.read(32)
        if len(head) < 32:
            return
        yield head
        at, page_size = 32, int.from_bytes(head[8:12], "big")
        while len(frame := os.pread(fh.fileno(), 24, at)) == 24:   # one call a frame
            yield frame
            at += 24 + page_size


def wal_pages(wal: Path, page_size: int) -> set[int]:
    """Every page a WAL file may hold a newer copy of: the frames that carry the header's salts (a superset
    of the frames SQLite will read, which is all a conservative comparison needs)."""
    with closing(_wal_headers(wal)) as headers:
        head = next(headers, None)
        if head is None:
            return set()
        if int.from_bytes(head[8:12], "big") != page_size:
            raise NotComparable("the WAL's page size differs from the database's")
        return {int.from_bytes(frame[0:4], "big") for frame in headers if frame[8:16] == head[16:24]}


def wal_frames(wal: Path) -> dict | None:
    """A WAL file's frames from its start as far as they carry its header's salts (the frames of its current
    cycle; SQLite writes them in order): how many, and a digest of the header and of each frame's header (the
    page it holds, the salts, and the running checksum over every frame before it and its own bytes). None
    when there is no WAL header."""
    with closing(_wal_headers(wal)) as headers:
        head = next(headers, None)
        if head is None:
            return None
        digest, n = hashlib.sha256(head), 0
        for frame in headers:
            if frame[8:16] != head[16:24]:
                break
            digest.update(frame)
            n += 1
    return {"frames": n, "headers": digest.hexdigest()}


def file_state(path: Path) -> list:
    """What any commit to a SQLite file changes, whatever the clock: its files' identity (file_signature), its
    header (a commit in rollback-journal mode increments its change counter) and its -wal's frames (a commit in WAL
    mode adds frames, a reset changes their salts). Two equal states are the same pages (lcm_etl/sync/shortcut.py
    says why file times alone are not)."""
    try:
        with open(path, "rb") as fh:
            header = fh.read(100).hex()
    except OSError:
        header = None   # the run reports the missing or unreadable source itself
    return [file_signature(path), header, wal_frames(Path(f"{path}-wal"))]


@dataclass
class Mark:
    """The WAL generation a kept copy holds frames of, as far as it holds them."""
    salts: str                      # hex of the header's salt-1, salt-2
    seq: int                        # the header's checkpoint sequence
    checksums: str                  # hex of each frame read's checksum pair (frame headers' bytes 16-24), in order
    pages: list[int] = field(default_factory=list)   # the pages those frames hold
    db_pages: int = 0               # the database's size in pages at the last commit read
    main: list | None = None        # the main file's signature (inode, size, mtime, ctime) before the read
    boot: str = ""

    @property
    def frames(self) -> int:
        return len(self.checksums) // 16

    @classmethod
    def of(cls, kept: object) -> Mark | None:
        try:
            return cls(**kept) if isinstance(kept, dict) else None
        except TypeError:   # kept by another version
            return None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Run:
    """Frames of one generation whose checksum chain verifies, up to the last commit among them."""
    checksums: bytes = b""
    pages: list[int] = field(default_factory=list)
    db_pages: int = 0


class WalFile:
    """A -wal read frame by frame (pread); `ok` False when it has no valid header (SQLite then ignores it)."""

    def __init__(self, path: Path):
        self.ok, self.page_size, self.seq, self.salts = False, 0, 0, b""
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._fd = None
            return
        head = os.pread(self._fd, _HEADER, 0)
        if len(head) < _HEADER:
            return
        magic, version, self.page_size, self.seq = struct.unpack(">4I", head[:16])
        self.big = magic & 1 == 1
        self.salts, self.start = head[16:24], struct.unpack(">2I", head[24:32])
        self.ok = magic in _MAGIC and version == 3007000 and checksum(head[:24], 0, 0, self.big) == self.start

    def header(self, slot: int) -> bytes:
        """Frame `slot`'s (1-based) 24-byte header, b"" past the end."""
        assert self._fd is not None
        data = os.pread(self._fd, _FRAME, _HEADER + (slot - 1) * (_FRAME + self.page_size))
        return data if len(data) == _FRAME else b""

    def chain(self, slot: int, salts: bytes, cksum: tuple[int, int], into: SpilledPages) -> Run:
        """The frames from `slot` on that carry `salts` and whose checksums continue from `cksum`, up to the last
        commit frame among them (what SQLite reads). Their pages go `into` the spill (a later frame's bytes over an
        earlier's), each as it is verified; a transaction without its commit frame is taken out again at the end."""
        run, pending, checksums = Run(), [], bytearray()
        into.begin()
        for frame in self._verified(slot, salts, cksum):
            page, commit = struct.unpack(">2I", frame[:8])
            checksums += frame[16:24]
            pending.append(page)
            into.add(page, frame[_FRAME:])
            if commit:
                run.checksums, run.db_pages = bytes(checksums), commit
                run.pages += pending
                pending = []
                into.begin()
        into.rollback()
        return run

    def _verified(self, slot: int, salts: bytes, cksum: tuple[int, int]) -> Generator[bytes, None, None]:
        """Each frame from `slot` on, as long as it carries `salts` and its checksum continues the chain; read
        in batches of up to BATCH bytes (fewer frames first: frames of an earlier generation may follow the last new
        one). A WAL with _BULK bytes or more left has each batch's checksums summed together (frame_sums)."""
        assert self._fd is not None
        size, want, a = _FRAME + self.page_size, 32, step(self.page_size)
        bulk = os.fstat(self._fd).st_size - _HEADER - (slot - 1) * size >= _BULK
        while True:
            data = os.pread(self._fd, want * size, _HEADER + (slot - 1) * size)
            frames = [data[i:i + size] for i in range(0, len(data) - size + 1, size)]
            n = next((i for i, frame in enumerate(frames) if frame[8:16] != salts), len(frames))
            for frame, (v1, v2) in zip(frames[:n], frame_sums(frames[:n], self.page_size, self.big, bulk)):
                cksum = ((a[0] * cksum[0] + a[1] * cksum[1] + v1) & MASK,
                         (a[2] * cksum[0] + a[3] * cksum[1] + v2) & MASK)
                if frame[:4] == bytes(4) or struct.pack(">2I", *cksum) != frame[16:24]:
                    return
                yield frame
            if n < want:
                return
            slot, want = slot + n, max(1, min(2 * want, BATCH // size))

    def generation_end(self) -> int:
        """How many slots from the first carry the header's salts (a generation's frames are written from the first
        slot on, over an older one's): a binary search, a few reads."""
        assert self._fd is not None
        lo, hi = 0, max(0, (os.fstat(self._fd).st_size - _HEADER) // (_FRAME + self.page_size))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.header(mid)[8:16] == self.salts else (lo, mid - 1)
        return lo

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _mark(w: WalFile, run: Run, main: list | None) -> Mark:
    return Mark(w.salts.hex(), w.seq, run.checksums.hex(), sorted(set(run.pages)), run.db_pages, main, boot_id())


@dataclass
class Fold:
    """Many new frames for SQLite to verify and fold (wal_fold.py): the generation's (`salts`, `seq`) slots 1..`end`,
    of which the copy holds the first `read`; `main` the main file's signature before the read, `main_changed`
    whether a checkpoint may have written it since the last sync."""
    salts: str
    seq: int
    read: int
    end: int
    main: list | None
    main_changed: bool


@dataclass
class Followed:
    """The change, read from the WAL: its pages' bytes are in the spill; the copy is then `db_pages` long. Or, with
    `fold`, many new frames left to SQLite (and `way`, `mark` said once it folded them)."""
    way: str
    db_pages: int
    mark: Mark | None
    fold: Fold | None = None


@dataclass
class _Reading:
    source: Path
    copy: Path
    w: WalFile
    mark: Mark
    main: list | None
    spill: SpilledPages

    def intact(self, salts: bytes, first: int) -> bool:
        """Frames `first`..mark.frames still carry `salts` and the checksums the copy's frames had (a commit lost
        in a power cut and written again under the same salts has another chain)."""
        want = bytes.fromhex(self.mark.checksums)
        return all(self.w.header(s)[8:24] == salts + want[(s - 1) * 8: s * 8]
                   for s in range(first, self.mark.frames + 1))

    def last_checksum(self) -> tuple[int, int]:
        return struct.unpack(">2I", bytes.fromhex(self.mark.checksums[-16:])) if self.mark.frames else self.w.start

    def main_holds(self, check: set[int], db_pages: int) -> str:
        return main_holds(self.source, self.copy, self.w.page_size, check, db_pages, self.spill)


def main_holds(source: Path, copy: Path, ps: int, check: set[int], db_pages: int, spill: SpilledPages | None) -> str:
    """'' when the source's main file is `db_pages` long and holds, on every page of `check`, the bytes the
    copy will hold (the spill's, else the copy's); else what differs. A checkpoint writes only pages the WAL
    names, so the pages outside `check` are those the last sync left."""
    size = os.stat(source).st_size
    if size != db_pages * ps:
        return f"{size} bytes, where the WAL's last commit says {db_pages * ps}"
    with open(source, "rb", buffering=0) as src, open(copy, "rb", buffering=0) as cp:
        for n in sorted(p for p in check if p <= db_pages):
            ours = spill.get(n) if spill is not None else None
            if ours is None:
                ours = os.pread(cp.fileno(), ps, (n - 1) * ps)
            if not same_page(n, os.pread(src.fileno(), ps, (n - 1) * ps), ours):
                return f"its page {n} is not the one the WAL's frames hold"
    return ""


def follow(source: Path, mark: Mark | None, copy: Path, page_size: int,
           spill: SpilledPages) -> tuple[Followed | None, str]:
    """How the copy (whose frames `mark` says) becomes the source: from the WAL's frames, or (None, why) compared
    whole. The source's main-file signature is taken before anything is read, and kept in the returned mark."""
    main = file_signature(source)[0]
    if mark is None:
        return None, "the kept snapshot does not say which WAL frames it holds"
    if mark.boot != boot_id():
        return None, "the machine restarted since the last sync (WAL frames it read may have been lost)"
    w = WalFile(Path(f"{source}-wal"))
    try:
        if w.ok and w.page_size != page_size:
            return None, "the WAL's page size is not the copy's"
        if not w.ok or w.header(1)[8:16] != w.salts:   # no frame of this header
            if main == mark.main and mark.frames == 0:
                return Followed("the WAL holds no frame and the main file is unchanged", mark.db_pages,
                                Mark(mark.salts, mark.seq, "", [], mark.db_pages, main, mark.boot)), ""
            if mark.frames == 0:
                return None, "the main file changed and no WAL frame says how (a checkpoint, or a rollback-mode commit)"
            return None, "a WAL generation was missed (the WAL was checkpointed and truncated, or removed)"
        r = _Reading(source, copy, w, mark, main, spill)
        same = w.salts.hex() == mark.salts and w.seq == mark.seq
        if same or (mark.frames == 0 and main == mark.main):
            read, end = (mark.frames if same else 0), w.generation_end()
            # ending in a commit frame: not the tail of a transaction rolled back or being written (whose frames a
            # fold would copy on every sync, where the frame-by-frame way stops at them)
            if (end - read) * (_FRAME + page_size) >= _FOLD and end - read >= read and w.header(end)[4:8] != bytes(4):
                return Followed("", 0, None, Fold(w.salts.hex(), w.seq, read, end, main, main != mark.main)), ""
        if same:
            return _same_generation(r)
        if mark.frames == 0 and main == mark.main:   # the copy is the main file: the whole generation is new
            run = w.chain(1, w.salts, w.start, spill)
            return Followed(f"{len(run.checksums) // 8} WAL frames read over an unchanged main file",
                            run.db_pages or mark.db_pages, _mark(w, run, main)), ""
        if w.seq == mark.seq + 1 and mark.frames:
            return _next_generation(r)
        if not mark.salts:
            return None, "the main file was checkpointed from a WAL the last sync did not see (it found none)"
        return None, (f"a WAL generation was missed (checkpoint sequence {mark.seq} then {w.seq}, "
                      f"{mark.frames} frames read)")
    finally:
        w.close()


def _same_generation(r: _Reading) -> tuple[Followed | None, str]:
    if not r.intact(r.w.salts, 1):
        return None, "the WAL frames the last sync read were rewritten (the same salts, another checksum chain)"
    run = r.w.chain(r.mark.frames + 1, r.w.salts, r.last_checksum(), r.spill)
    db_pages = run.db_pages or r.mark.db_pages
    pages = sorted(set(r.mark.pages) | set(run.pages))
    new = Mark(r.mark.salts, r.mark.seq, r.mark.checksums + run.checksums.hex(), pages, db_pages, r.main, r.mark.boot)
    way = f"{len(run.checksums) // 8} new WAL frames read"
    if r.main != r.mark.main:
        why = r.main_holds(set(pages), db_pages)
        if why:
            return None, f"the main file changed otherwise than by a checkpoint of the WAL's frames: {why}"
        way += f", the {len(pages)} pages a checkpoint wrote to the main file checked"
    return Followed(way, db_pages, new), ""


def _next_generation(r: _Reading) -> tuple[Followed | None, str]:
    """The WAL restarted once: slots 1..K hold the new generation; the old one's frames read, and those after them
    up to its last commit, must still be beyond K."""
    k = 0
    while (h := r.w.header(k + 1)) and h[8:16] == r.w.salts:
        k += 1
    if k >= r.mark.frames:
        return None, (f"a WAL generation was missed (the restarted WAL's {k} frames cover the {r.mark.frames} "
                      "the last sync read)")
    old = bytes.fromhex(r.mark.salts)
    if not r.intact(old, k + 1):
        return None, "the WAL frames the last sync read before the restart are not there"
    tail = r.w.chain(r.mark.frames + 1, old, r.last_checksum(), r.spill)
    checked = set(r.mark.pages) | set(tail.pages)
    why = r.main_holds(checked, tail.db_pages or r.mark.db_pages)
    if why:
        return None, f"the WAL restarted and the main file is not the checkpoint of the frames read: {why}"
    run = r.w.chain(1, r.w.salts, r.w.start, r.spill)
    new = _mark(r.w, run, r.main)
    new.db_pages = run.db_pages or tail.db_pages or r.mark.db_pages
    return Followed(f"{len(tail.checksums) // 8} WAL frames of the generation before a restart and "
                    f"{len(run.checksums) // 8} of the new one read, the {len(checked)} pages the checkpoint wrote "
                    "to the main file checked", new.db_pages, new), ""
