"""The run report: a data object first (`as_dict()`), rendered for people by `as_text()`.

Counters describe this run only: a re-run that finds everything present reports 0 inserted and
0 collapsed, whatever earlier runs did.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class KindCounts:
    inserted: int = 0
    already_present: int = 0
    updated: int = 0        # already present, changed in place by the source since (SPEC §8)
    skipped: dict[str, int] = field(default_factory=dict)   # reason -> count

    def skip(self, reason: str, n: int = 1) -> None:
        if n:
            self.skipped[reason] = self.skipped.get(reason, 0) + n


@dataclass
class RunReport:
    command: str
    dry_run: bool
    source: str | None = None
    target: str | None = None
    source_schema: str | None = None
    messages: KindCounts = field(default_factory=KindCounts)
    parts: KindCounts = field(default_factory=KindCounts)
    summaries: KindCounts = field(default_factory=KindCounts)
    collapsed_parents: int = 0
    parents_updated: int = 0   # imported summaries given the parent that now covers them (SPEC §8)
    changes: dict[str, int] = field(default_factory=dict)   # what changed in updated messages -> count
    sessions_kept: int = 0     # conversations kept in the session they were first imported into
    conversations_changed: int = 0   # conversations new to the provenance, or changed there since (archived...)
    dropped_parent_edges: int = 0
    cross_session_links: int = 0
    skipped_summaries: list[dict] = field(default_factory=list)   # {summary_id, session_id, reason}
    sessions_touched: list[str] = field(default_factory=list)
    boundary_events: int = 0
    batches: int = 0
    elapsed_s: float = 0.0
    run_id: str | None = None
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)   # command-specific sections (reconcile files, audit diffs)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["elapsed_s"] = round(self.elapsed_s, 3)
        return d

    def as_text(self, limit: int = 10) -> str:
        head = "DRY RUN - nothing was written; a real run would do this:" if self.dry_run else "Done."
        lines = [f"lcm-etl {self.command}: {head}"]
        if self.source:
            lines.append(f"  source:  {self.source}" + (f"  [{self.source_schema}]" if self.source_schema else ""))
        if self.target:
            lines.append(f"  target:  {self.target}")
        verb = "would insert" if self.dry_run else "inserted"
        for name, k in (("messages", self.messages), ("parts", self.parts), ("summaries", self.summaries)):
            lines.append(f"  {name:<10} {verb} {k.inserted:>8}   already present {k.already_present:>8}"
                         f"   skipped {sum(k.skipped.values()):>6}")
            for reason, n in sorted(k.skipped.items()):
                lines.append(f"               skipped {n}: {reason}")
        lines.append(f"  parents collapsed {self.collapsed_parents} (dropped edges {self.dropped_parent_edges})"
                     f"   cross-session links ignored {self.cross_session_links}")
        if self.messages.updated or self.summaries.updated or self.parents_updated:
            verb = "would update" if self.dry_run else "updated"
            what = ", ".join(f"{k} {n}" for k, n in sorted(self.changes.items()))
            lines.append(f"  changed in the source since imported: messages {verb} {self.messages.updated}"
                         + (f" ({what})" if what else "") + f", summary texts {self.summaries.updated}"
                         f", parents {self.parents_updated}")
        if self.conversations_changed:
            lines.append(f"  conversations new or changed in the source (provenance refreshed): {self.conversations_changed}")
        if self.sessions_kept:
            lines.append(f"  conversations kept in the session they were first imported into: {self.sessions_kept}"
                         " (their session id or key has changed since, or --key-by differs)")
        touched = self.sessions_touched
        shown = ", ".join(touched[:limit]) + (f", ... (+{len(touched) - limit})" if len(touched) > limit else "")
        lines.append(f"  sessions touched {len(touched)}" + (f": {shown}" if touched else ""))
        lines.append(f"  boundary events {'to write' if self.dry_run else 'written'} {self.boundary_events}")
        for s in self.skipped_summaries[:limit]:
            lines.append(f"  skipped summary {s['summary_id']} ({s.get('session_id')}): {s['reason']}")
        if len(self.skipped_summaries) > limit:
            lines.append(f"  ... {len(self.skipped_summaries) - limit} more skipped summaries (see --json)")
        for key, value in self.extra.items():
            if isinstance(value, (int, float, str)):
                lines.append(f"  {key}: {value}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        lines.append(f"  elapsed {self.elapsed_s:.2f} s" + (f"   run {self.run_id}" if self.run_id else ""))
        return "\n".join(lines)
