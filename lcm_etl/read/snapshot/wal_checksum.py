"""SQLite's WAL checksum (walChecksumBytes, https://www.sqlite.org/fileformat2.html "The Write-Ahead Log"), for
wal.py's verification of each frame before its page is trusted: one frame at a time in Python, or, for a WAL with
tens of thousands of frames to read (a bulk import into a source its writer holds open), a batch's frames summed
together in pyarrow, which the checksum's linearity allows (`_linear`). pyarrow is imported only then: its import adds
about 39 MB to the process, which a sync of a few hundred frames does not pay."""
from __future__ import annotations

import array
import functools
import struct
import sys

MASK = 0xFFFFFFFF
# the most bytes of frames read and summed at a time (63 frames of 4 KiB pages): a batch's arrays in pyarrow take about
# 12 MB at this size, 32 MB at 2 MiB, and a frame is summed faster (9 us against 16-18: the arrays stay in cache)
BATCH = 256 << 10
_FRAME = 24   # a frame's header; its first 8 bytes and its page are summed


def checksum(data: bytes, s1: int, s2: int, big: bool) -> tuple[int, int]:
    """SQLite's WAL checksum (walChecksumBytes) of `data`, continuing from (s1, s2)."""
    words = struct.unpack(f"{'>' if big else '<'}{len(data) // 4}I", data)
    for a, b in zip(words[0::2], words[1::2]):
        s1 = (s1 + a + s2) & MASK
        s2 = (s2 + b + s1) & MASK
    return s1, s2


def step(page_size: int) -> tuple[int, int, int, int]:
    """M^P (_linear): what one frame does to the running (s1, s2) before its own words' sums are added."""
    return _linear(page_size)[0]


def frame_sums(frames: list[bytes], page_size: int, big: bool, bulk: bool) -> list[tuple[int, int]]:
    """Each frame's (v1, v2) (_linear), so that a frame takes (s1, s2) to step·(s1, s2) + (v1, v2): one by one, or,
    when `bulk` and the batch holds dozens, as one multiply and running sum over all their words (pyarrow:
    0.008-0.017 ms a frame where Python's loop takes 0.08, 3.7 s of a 2M lcm.db's 1 % growth)."""
    if not bulk or len(frames) < 32:
        return [checksum(f[:8] + f[_FRAME:], 0, 0, big) for f in frames]
    import pyarrow as pa
    import pyarrow.compute as pc
    words = array.array("I", b"".join(frames))
    if big != (sys.byteorder == "big"):
        words.byteswap()
    per = len(words) // len(frames)
    w = pa.Array.from_buffers(pa.uint32(), len(words), [None, pa.py_buffer(words)]).cast(pa.uint64())
    ends = pa.array(range(per - 1, len(words), per))
    out = []
    for coef in _tiled(page_size):
        # uint64 wraps modulo 2^64, a multiple of 2^32: the differences below are exact modulo 2^32
        totals = pc.cumulative_sum(pc.multiply(w, coef.slice(0, len(words)))).take(ends).to_pylist()
        out.append([(t - prev) & MASK for t, prev in zip(totals, [0] + totals)])
    return list(zip(*out))


@functools.lru_cache(maxsize=4)
def _linear(page_size: int) -> tuple[tuple[int, int, int, int], list[int], list[int]]:
    """The checksum is linear: a step (a, b) takes (s1, s2) to M·(s1, s2) + (a, a + b), M = [[1, 1], [1, 2]], so a
    frame of P word pairs (its header's first 8 bytes, then its page) takes it to M^P·(s1, s2) + (v1, v2), each v a
    sum of the frame's words times fixed coefficients (mod 2^32). Returns M^P and the coefficients of the words of
    a frame as the WAL lays it out (the header's other 16 bytes not summed)."""
    pairs = 1 + page_size // 8
    powers = [(1, 0, 0, 1)]
    for _ in range(pairs):
        p, q, r, t = powers[-1]
        powers.append(((p + q) & MASK, (p + 2 * q) & MASK, (r + t) & MASK, (r + 2 * t) & MASK))
    c1: list[int] = []
    c2: list[int] = []
    for j in range(pairs):
        p, q, r, t = powers[pairs - 1 - j]
        c1 += [(p + q) & MASK, q] + [0, 0, 0, 0] * (j == 0)
        c2 += [(r + t) & MASK, t] + [0, 0, 0, 0] * (j == 0)
    return powers[pairs], c1, c2


@functools.lru_cache(maxsize=4)
def _tiled(page_size: int) -> list:
    """_linear's coefficients of a batch's frames, as pyarrow arrays."""
    import pyarrow as pa
    frames = BATCH // (_FRAME + page_size)
    return [pa.concat_arrays([pa.array(coef, pa.uint64())] * frames) for coef in _linear(page_size)[1:]]
