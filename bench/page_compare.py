#!/usr/bin/env python3
"""What comparing a source with its kept snapshot page by page costs, and what mapping the two files instead of
reading them would save (figures printed, nothing asserted; docs/benchmarks.md, "the page comparison").

A 2M-message source's re-run after growth compares 4.5 GB with 4.5 GB (lcm_etl/read/snapshot/page_diff.differing_pages). This
makes two files of --gb GB (random bytes, the second with --changed pages altered at random places, as a grown
source's leaves are), reads both into the page cache, and times, alternately:
- `preadv`: page_diff._differing as the product runs it (both files read into reused buffers, memcmp);
- `mapped`: both files mapped a window at a time (MAP_POPULATE) and compared in place by Arrow's Buffer.equals,
  with no copy into the process: the cheapest way Python has to compare two files without reading them.

usage: .venv/bin/python bench/page_compare.py [--gb 4.5] [--changed 4500] [--repeat 2] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import mmap
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lcm_etl.read.snapshot import page_diff  # noqa: E402

PAGE = 4096


class _Raw:
    """The part of pages.PageFile (lcm_etl/read/snapshot/pages.py) that _differing reads (these files have no SQLite header)."""
    def __init__(self, path: Path):
        self._fh = open(path, "rb", buffering=0)
        self.page_size = PAGE
        self.pages = os.fstat(self._fh.fileno()).st_size // PAGE


class _Found:
    def __init__(self):
        self.pages: set[int] = set()

    def add(self, n: int, _data) -> None:
        self.pages.add(n)

    def __len__(self) -> int:
        return len(self.pages)


def preadv(a: Path, b: Path) -> set[int]:
    found, new, old = _Found(), _Raw(a), _Raw(b)
    page_diff._differing(new, old, 0, new.pages * PAGE, 1 << 40, found)
    return found.pages


def mapped(a: Path, b: Path, window: int = 8 << 20) -> set[int]:
    found: set[int] = set()
    fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDONLY)
    try:
        stop = os.fstat(fa).st_size // PAGE * PAGE
        for at in range(0, stop, window):
            n = min(window, stop - at)
            flags = mmap.MAP_SHARED | mmap.MAP_POPULATE
            with mmap.mmap(fa, n, flags=flags, prot=mmap.PROT_READ, offset=at) as ma, \
                    mmap.mmap(fb, n, flags=flags, prot=mmap.PROT_READ, offset=at) as mb:
                x, y = pa.py_buffer(ma), pa.py_buffer(mb)
                if not x.equals(y):   # then by blocks of 16 pages, then pages, as _differing looks
                    block = 16 * PAGE
                    found |= {(at + q) // PAGE + 1 for lo in range(0, n, block)
                              if not x.slice(lo, min(block, n - lo)).equals(y.slice(lo, min(block, n - lo)))
                              for q in range(lo, min(lo + block, n), PAGE)
                              if not x.slice(q, PAGE).equals(y.slice(q, PAGE))}
                del x, y   # the maps close only once no buffer points into them
    finally:
        os.close(fa)
        os.close(fb)
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4.5)
    ap.add_argument("--changed", type=int, default=4500)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="page-compare-", dir=args.dir))
    try:
        a, b = folder / "new", folder / "old"
        size = int(args.gb * 1e9) // PAGE * PAGE
        with open(a, "wb") as fh:
            for _ in range(size // (64 << 20)):
                fh.write(os.urandom(64 << 20))
            fh.write(os.urandom(size % (64 << 20)))
        shutil.copyfile(a, b)
        rng = random.Random(1)
        fd = os.open(b, os.O_RDWR)
        for _ in range(args.changed):
            os.pwrite(fd, b"changed!", rng.randrange(size // PAGE) * PAGE + 100)
        os.close(fd)
        for path in (a, b):   # into the page cache, as a re-run finds both files
            with open(path, "rb") as fh:
                while fh.read(64 << 20):
                    pass
        print(f"two files of {size / 1e9:.2f} GB, {args.changed} pages altered in the second")
        for _ in range(args.repeat):
            for name, compare in (("preadv", preadv), ("mapped", mapped)):
                t = time.perf_counter()
                found = compare(a, b)
                print(f"  {name:7s} {time.perf_counter() - t:6.2f} s  {len(found)} pages differ")
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
