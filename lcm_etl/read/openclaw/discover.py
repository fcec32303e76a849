"""`migrate --discover ROOT --dest-root DIR`: a fleet's manifest from a tree of OpenClaw state folders.

An OpenClaw state folder holds `lcm.db` (beside its `agents/*/sessions/` transcripts). Every folder under
ROOT, ROOT included, that holds a file named `lcm.db` is one pair, by this rule:

    ROOT/<rel>/lcm.db  ->  DIR/<rel>/state/lcm.sqlite    (the Remnic memory dir DIR/<rel>)

A home's state folders are found by name too, with or without an lcm.db (an installation whose agents keep only
session stores): `.openclaw`, every profile's `.openclaw-<name>` and the legacy `.clawdbot`, when they hold
agents or a registry of agent databases. Without an lcm.db the pair's source is the folder itself
(`ROOT/<rel> -> DIR/<rel>/state/lcm.sqlite`), whose transcripts, registered agent databases included, are read.

so a tree of agents maps onto a parallel tree of Remnic memory dirs, one per agent, and the same tree
always gives the same pairs. The walk does not descend into a state folder (its transcripts can be
thousands of files and never hold another state folder) nor follow symlinked folders (a loop on
shared storage would never end); a folder it cannot list is an error naming it, since skipping it would
leave its agents out silently. The pairs are sorted by path.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from lcm_etl.errors import BadInput
from lcm_etl.read.openclaw.openclaw_home import LEGACY_NAME, STATE_NAME, is_state_dir, is_profile_name

STATE_DB = "lcm.db"


def _named_state_dir(folder: Path) -> bool:
    """A state folder of OpenClaw's own naming: .openclaw, .openclaw-<profile> or .clawdbot, holding state."""
    name = folder.name
    named = name in (STATE_NAME, LEGACY_NAME) or (name.startswith(STATE_NAME + "-")
                                                   and is_profile_name(name[len(STATE_NAME) + 1:]))
    return named and is_state_dir(folder)


def discover(root: Path, dest_root: Path) -> list[tuple[Path, Path]]:
    if not root.is_dir():
        raise BadInput(f"--discover needs a folder: {root}")

    def unreadable(exc: OSError) -> None:
        raise BadInput(f"--discover cannot list a folder under {root}: {exc.filename}: {exc.strerror or exc}")

    pairs: list[tuple[Path, Path]] = []
    for folder, dirs, files in os.walk(root, onerror=unreadable):
        here = Path(folder)
        # --memory-dir's rule, without expanding a `$` or `~` a folder name may hold
        dest = dest_root / here.relative_to(root) / "state" / "lcm.sqlite"
        if STATE_DB in files and (here / STATE_DB).is_file():
            dirs.clear()
            pairs.append((here / STATE_DB, dest))
        elif _named_state_dir(here):
            dirs.clear()
            pairs.append((here, dest))
        dirs.sort()
    if not pairs:
        raise BadInput(f"--discover found no OpenClaw state folder (a folder holding {STATE_DB}, or a "
                       f"{STATE_NAME}, {STATE_NAME}-<profile> or {LEGACY_NAME} folder holding state) under {root}")
    return sorted(pairs)


@dataclass
class Discovered:
    """What --discover --dry-run shows before the pairs' dry runs (text), and what its --json carries."""
    root: Path
    pairs: list[tuple[Path, Path]]

    def as_dict(self) -> dict:
        """The pairs as a JSON manifest (`--manifest` reads it back)."""
        return {"manifest": [{"src": str(src), "dest": str(dest)} for src, dest in self.pairs]}

    def as_text(self) -> str:
        """The pairs as a text manifest (`--manifest` reads it back), under a comment saying where from."""
        head = f"# {len(self.pairs)} OpenClaw state folders under {self.root}: SRC DEST (usable as --manifest)"
        return "\n".join([head, *(f"{shlex.quote(str(s))} {shlex.quote(str(d))}" for s, d in self.pairs)]) + "\n"
