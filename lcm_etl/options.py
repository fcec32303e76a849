"""Option value types: a value no command can use is refused where the option is parsed (exit 2, one
line, the same for every command), never later by DuckDB or the writer as an internal error."""
from __future__ import annotations

import os
import re

import click

# DuckDB's memory units (1000^i and 1024^i), as its memory_limit parser accepts them
_UNITS = {"b": 1, "byte": 1, "bytes": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)
MIN_MEMORY = 10**6   # below a megabyte DuckDB cannot even open its in-memory database


def size_bytes(value: str, bare: bool = False) -> float | None:
    """A size such as 96MB, 2GB or 512MiB in bytes (None: not one); `bare`: a number alone is bytes."""
    if bare and value.strip().isdigit():
        return float(value)
    m = _SIZE.fullmatch(value)
    unit = _UNITS.get(m.group(2).lower()) if m else None
    return None if m is None or unit is None else float(m.group(1)) * unit


class MemorySize(click.ParamType):
    """A DuckDB memory budget such as 96MB; passed on as the user wrote it, once known to be one."""
    name = "size"

    def convert(self, value, param, ctx):
        size = size_bytes(value)
        if size is None or size < MIN_MEMORY:
            self.fail(f"{value!r} is not a memory size of at least 1MB such as 96MB, 2GB or 512MiB", param, ctx)
        return value.strip()


class TextPath(click.ParamType):
    """A path that is text: lcm-etl writes paths into reports, metadata and the ledger, which are UTF-8.
    A name with other bytes arrives as lone surrogates (PEP 383) and is refused here, shown as its bytes."""
    name = "path"

    def convert(self, value, param, ctx):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(value).decode("utf-8", "backslashreplace")
            self.fail(f"{shown} is not valid UTF-8; lcm-etl records paths as text: rename it or pass a path "
                      "without those bytes", param, ctx)
        return value


MEMORY_SIZE = MemorySize()
TEXT_PATH = TextPath()
