"""`inspect` of an OpenClaw session store: its schema version, windows (with their active paths as reconcile reads
them) and archives, read through the same snapshot and reader as `reconcile` (lcm_etl/read/sessions/store_reads.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from lcm_etl.read.snapshot import runfolder
from lcm_etl.read.openclaw.openclaw_store import OpenStore
from lcm_etl.read.sessions.store_reads import read_window
from lcm_etl.read.transcript.transcripts import Transcript, TranscriptError, TranscriptReport
from lcm_etl.read.sessions.transcript_decision import NEW
from lcm_etl.report import SCHEMA_VERSION, one_line_each


@dataclass
class StoreInfo:
    source: str
    agent_id: str | None
    user_version: int | None
    kind: str = "openclaw-session-store"
    windows: list[dict] = field(default_factory=list)
    archives: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    def as_text(self) -> str:
        lines = [f"source: {self.source}",
                 f"schema: OpenClaw session store, user_version {self.user_version}, agent {self.agent_id}",
                 f"windows: {len(self.windows)}",
                 f"  {'session (window)':<38} {'events':>6} {'zstd':>5} {'path':>5} {'off':>4}  {'projection':<14} key"]
        for w in self.windows:
            lines.append(f"  {w['session_id'][:38]:<38} {w['events']:>6} {w['compressed_rows']:>5} "
                         f"{w['messages_on_path']:>5} {w['abandoned_branch_entries']:>4}  {w['projection']:<14} "
                         f"{w['session_key'] or '-'}" + ("" if w["current"] else "  (not current)")
                         + (f"  <- {w['previous_session_id']}" if w["previous_session_id"] else ""))
        lines.append(f"archives: {len(self.archives)}")
        lines += [f"  {a['reason']:<8} {a['session_id']}  {a['name']}" for a in self.archives]
        return one_line_each(lines)


def describe_store(path: Path, memory_limit: str) -> StoreInfo:
    with runfolder.Held() as work, OpenStore(path, Path(work), memory_limit, keeps_records=False) as store:
        c = store.contents
        info = StoreInfo(str(path), c.agent_id, c.user_version)
        compressed = store.compressed_rows()
        for w in c.windows:
            try:
                t = read_window(store, w, NEW, strict=False)
            except TranscriptError:   # no row of it parses: every row skipped, no path
                t = Transcript(store.where(w), w.session_id, None, None, [], TranscriptReport(
                    skipped_lines=[(0, "unparsable")] * w.events, projection="unreadable"))
            info.windows.append({
                "session_id": w.session_id, "session_key": w.session_key, "current": w.current,
                "previous_session_id": w.previous_session_id, "title": w.title, "channel": w.channel,
                "events": w.events, "compressed_rows": compressed.get(w.session_id, 0),
                "messages_on_path": len(t.messages), "abandoned_branch_entries": t.report.abandoned_entries,
                "skipped_rows": len(t.report.skipped_lines), "projection": t.report.projection})
        info.archives = [{"name": a.name, "reason": a.reason, "session_id": a.session_id,
                          "session_key": a.session_key, "encoding": a.encoding} for a in c.archives]
        return info
