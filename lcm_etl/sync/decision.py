"""What a run decided about reading its source(s), and why: the report's one `sync:` line.

The ways, cheapest first (docs/design.md, "The re-run decision", says when each is taken):
- `no-op`: the source is unchanged and the target untouched since the last run: nothing is planned;
- `pages compared`: the previous run's kept snapshot was brought up to date from the pages that differ between
  the source and it;
- `marks`: the source was copied whole and its marks compared with those the previous run stored;
- `full plan`: everything was planned, for the reason given;
- `offsets` (reconcile): transcripts read from where the last run stopped, or whole, each for a cause
  (lcm_etl/read/sessions/transcript_decision.py decides it per transcript; the line counts the causes).
`pages compared` and `marks` then re-plan only the sessions they found changed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from lcm_etl.read.sessions.transcript_decision import CAUSES

NO_OP, PAGES, MARKS, FULL, OFFSETS = "no-op", "pages compared", "marks", "full plan", "offsets"


@dataclass
class Decision:
    how: str
    why: str                          # in words, for the line; for a full plan, its cause
    since_run: str | None = None      # the run whose snapshot, marks or offsets this one continues from
    pages_changed: int | None = None  # pages compared
    sessions_replanned: int | None = None
    sessions_total: int | None = None
    conversations_changed: int | None = None
    cache: str | None = None          # what became of the kept snapshot, when not the usual (dropped, off...)
    read_whole: dict[str, int] | None = None   # offsets: transcripts read whole, by cause (transcript_decision)

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


def of_transcripts(files: list[dict], unchanged: int = 0) -> Decision:
    """reconcile's decision: how many of the transcripts (the report's `files`, and the `unchanged` windows a
    watch's sync left unread: nothing past their record) were read from where the last complete run stopped, and
    how many were read whole for each cause (lcm_etl/read/sessions/transcript_decision.py)."""
    appended = unchanged + sum(f["read"] == "appended" for f in files)
    causes = Counter(f["why"] for f in files if f["read"] != "appended")
    whole = {cause: causes[cause] for cause in CAUSES if causes[cause]}
    total = len(files) + unchanged
    why = f"{appended} of {total} transcripts read from where the last run stopped"
    if whole:
        why += f"; {total - appended} read whole: " + ", ".join(f"{n} {cause}" for cause, n in whole.items())
    return Decision(OFFSETS, why, read_whole=whole)
