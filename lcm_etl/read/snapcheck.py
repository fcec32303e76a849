"""Checking a kept snapshot's bytes against the chunk digests recorded when it was sealed (sources.chunk_digests).

The WAL-only path of a sync re-run (lcm_etl/read/snapcache.py) trusts every page of the kept copy that the
source's WAL does not hold: it neither compares them with the source nor reads them. The copy's file identity
(inode, size, mtime, ctime) vouches for them, but a disk that rots a block, or a copy restored or edited with
its identity kept, changes bytes under it. So each WAL-only run first hashes a rotating share of the copy's
chunks, and every chunk it is about to write into (a write would make a damaged neighbour's page part of the
recorded digest), and compares them with the record: any chunk is checked at least once in every CHECK_RUNS
WAL-only runs of a copy that does not shrink (a run checks ceil(chunks / CHECK_RUNS), at least MIN_CHECKED,
going on where the last run stopped). A page-compared run needs none of this: it compares every page with the
source. `lcm-etl audit` checks the whole copy, and against the source digest the target's ledger holds.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lcm_etl.read.sources import DIGEST_CHUNK, chunk_digests, snapshot_digest

CHECK_RUNS = 32     # every chunk is checked at least once in this many WAL-only runs
MIN_CHECKED = 16    # chunks (1 MiB) a run checks at least: a small copy is checked whole every run


def rotation(start: int, count: int) -> tuple[set[int], int]:
    """The chunks this run checks, from `start` on (wrapping), and where the next run starts."""
    if count <= 0:
        return set(), 0
    n = min(count, max(MIN_CHECKED, -(-count // CHECK_RUNS)))
    start %= count
    return {(start + k) % count for k in range(n)}, (start + n) % count


def first_damaged(path: Path, digests: list[bytes], size: int, chunks: set[int]) -> int | None:
    """The first of `chunks` whose bytes in the file differ from its recorded digest (`size`: the file's length
    as recorded; a file of another length is damaged at the chunk where they part), else None."""
    with open(path, "rb", buffering=0) as fh:
        now = os.fstat(fh.fileno()).st_size
        if now != size:
            return min(now, size) // DIGEST_CHUNK
        for i in sorted(c for c in chunks if c < len(digests)):
            data = os.pread(fh.fileno(), DIGEST_CHUNK, i * DIGEST_CHUNK)
            if hashlib.sha256(data).digest() != digests[i]:
                return i
    return None


def damage(path: Path, digests: list[bytes], size: int, sealed_sha256: str | None) -> str | None:
    """The whole copy checked: what differs from its recorded digests (and from the source digest the sealing
    run recorded in the target's ledger, when given), else None."""
    whole = chunk_digests(path)
    if os.stat(path).st_size != size or len(whole) != len(digests):
        return f"its length is not the {size} bytes recorded when it was sealed"
    bad = [i for i, (a, b) in enumerate(zip(whole, digests)) if a != b]
    if bad:
        return f"{len(bad)} of its {len(whole)} chunks differ from the digests recorded when it was sealed " \
               f"(the first: chunk {bad[0]})"
    if sealed_sha256 is not None and snapshot_digest(whole) != sealed_sha256:
        return "its digest is not the one the sealing run recorded in the target's ledger"
    return None
