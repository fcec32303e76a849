"""What a run decided about reading its source(s), and why: the report's one `sync:` line.

The ways, cheapest first (lcm_etl/sync/__init__.py says when each is taken):
- `no-op`: the source is unchanged and the target untouched since the last run: nothing is planned;
- `WAL only`: the previous run's kept snapshot was brought up to date from the source's WAL alone;
- `pages compared`: ... from the pages that differ between the source and the kept snapshot;
- `marks`: the source was copied whole and its marks compared with those the previous run stored;
- `full plan`: everything was planned, for the reason given;
- `offsets` (reconcile): transcripts read from where the last run stopped, or whole where they changed.
Every way but `no-op` and `full plan` then re-plans only the sessions it found changed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

NO_OP, WAL_ONLY, PAGES, MARKS, FULL, OFFSETS = "no-op", "WAL only", "pages compared", "marks", "full plan", "offsets"
WAYS = (NO_OP, WAL_ONLY, PAGES, MARKS, FULL, OFFSETS)


@dataclass
class Decision:
    how: str
    why: str                          # in words, for the line; for a full plan, its cause
    since_run: str | None = None      # the run whose snapshot, marks or offsets this one continues from
    pages_changed: int | None = None  # WAL only / pages compared
    sessions_replanned: int | None = None
    sessions_total: int | None = None
    conversations_changed: int | None = None
    cache: str | None = None          # what became of the kept snapshot, when not the usual (dropped, off...)

    def replanned(self, sessions: int, total: int, conversations: int) -> None:
        self.sessions_replanned, self.sessions_total, self.conversations_changed = sessions, total, conversations

    def line(self) -> str:
        """The one line: the way, why, and what it re-planned."""
        text = f"{self.how}: {self.why}"
        if self.sessions_replanned is not None:
            text += (f"; {self.sessions_replanned} of {self.sessions_total} sessions re-planned "
                     f"({self.conversations_changed} conversations changed)")
        if self.cache:
            text += f"; {self.cache}"
        if self.how not in (FULL, OFFSETS):
            text += "; --full re-plans everything"
        return text

    def as_dict(self) -> dict:
        return {**asdict(self), "line": self.line()}


def of_transcripts(files: list[dict]) -> Decision:
    """reconcile's decision, file by file (lcm_etl/read/transcript_offsets.py for a JSONL file, store_reads.py
    for a window of OpenClaw's session store): each read from where the last complete run stopped when what
    it read then is unchanged and everything after it continues the path, else whole."""
    appended = sum(f["read"] == "appended" for f in files)
    return Decision(OFFSETS, f"{appended} of {len(files)} transcripts read from where the last run stopped, "
                             f"{len(files) - appended} read whole (new, rewritten or not a plain append)")
