"""The run report: a data object first (`as_dict()`), rendered for people by `as_text()`; and `emit`, the one
way every command prints its report (any object with those two methods: `Printable`).

Counters describe this run only: a re-run that finds everything present reports 0 inserted and
0 collapsed, whatever earlier runs did.
"""
from __future__ import annotations

from collections import Counter

import datetime as dt
import os
import re
import sys
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Protocol

import orjson

from lcm_etl.run_options import size_text

# The shape of every `--json` report (docs/schemas/*.schema.json, checked by tests/test_json_schemas.py), in
# each report as `schema_version`. Bump it when a field is renamed, removed or changes meaning, so a consumer
# can tell; a new field goes into the schema in the same commit.
SCHEMA_VERSION = 1


class Printable(Protocol):
    """What a command prints: a data object (`--json`, docs/schemas/) and its text for people."""
    def as_dict(self) -> dict: ...

    def as_text(self) -> str: ...


def emit(report: Printable, as_json: bool, quiet: bool) -> None:
    """Print a command's report on stdout: with --json its as_dict() as one JSON object on one line, else its
    as_text() unless --quiet. Flushed at once, so a line is seen when it is printed, even through a pipe (a watch
    prints one per sync)."""
    if as_json:
        _write(sys.stdout, orjson.dumps(report.as_dict(), option=orjson.OPT_NON_STR_KEYS).decode())
    elif not quiet:
        _write(sys.stdout, fit(report.as_text(), width()))


WIDTH = 100   # the columns a text report fits in (issue 38): a terminal's or a pull request's width


def width() -> int:
    """WIDTH, or $LCM_ETL_WIDTH when it is a usable width (40 or more; 0: lines as long as they come)."""
    columns = os.environ.get("LCM_ETL_WIDTH", "")
    return (int(columns) or sys.maxsize) if columns.isdigit() and (int(columns) >= 40 or columns == "0") else WIDTH


_HEX_NAME = re.compile(r"\b[0-9a-f]{64}\b")   # OpenClaw's cold-file names: content hashes


def fit(text: str, width: int = WIDTH) -> str:
    """A text report with every line within `width` columns: a line too long has its 64-hex names cut to their
    first 12 digits, then wraps at spaces, indented under itself; a single word longer than a line (a path) keeps
    its head and tail. What was cut is whole in --json, and the last line says so."""
    out: list[str] = []
    cut = False
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        line, n = _HEX_NAME.subn(lambda m: m.group()[:12] + "…", line)
        cut |= bool(n)
        indent = " " * (len(line) - len(line.lstrip(" ")) + 4)
        for piece in textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False, drop_whitespace=True) or [line]:
            if len(piece) > width:
                keep = width - 1
                piece, cut = piece[:keep // 3] + "…" + piece[len(piece) - (keep - keep // 3):], True
            out.append(piece)
    if cut:
        out.append("  (names shortened with …: --json prints them whole)")
    return "\n".join(out)


def say(line: str) -> None:
    """A line on stderr about the run, not its report (a watch's start, a sync's error): stdout stays the
    report's alone, so --json output is JSON only."""
    _write(sys.stderr, line)


def _write(stream, text: str) -> None:
    stream.write(text + "\n")
    stream.flush()


@dataclass
class KindCounts:
    inserted: int = 0
    already_present: int = 0
    updated: int = 0        # already present, changed in place by the source since (docs/mapping.md)
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
    parents_updated: int = 0   # imported summaries given the parent that now covers them
    changes: dict[str, int] = field(default_factory=dict)   # what changed in updated messages -> count
    # new messages whose source id and instant an imported row holds with another role, content or token_count
    # (a row edited by hand, a restored backup's id issued again): imported beside that row, which is kept
    messages_superseded: int = 0
    sessions_kept: int = 0     # conversations kept in the session they were first imported into
    conversations_changed: int = 0   # conversations new to the provenance, or changed there since (archived...)
    dropped_parent_edges: int = 0
    cross_session_links: int = 0            # links to other sessions' messages ignored in summaries written now
    cross_session_links_in_skipped: int = 0  # ... held by the skipped summaries (each of them, every run)
    skipped_summaries: list[dict] = field(default_factory=list)   # {summary_id, session_id, reason}
    sessions_touched: list[str] = field(default_factory=list)
    boundary_events: int = 0   # planned: sessions given a new seam; written: new events (docs/mapping.md, "Boundary events")
    boundaries_moved: int = 0  # planned (reconcile) and written: last seams moved to their session's new end (88, 89)
    batches: int = 0
    elapsed_s: float = 0.0
    run_id: str | None = None
    warnings: list[str] = field(default_factory=list)
    # how the run read its source(s) and what it re-planned, and why (lcm_etl/sync/decision.py: Decision.as_dict)
    sync_decision: dict | None = None
    extra: dict = field(default_factory=dict)   # command-specific sections (reconcile files, audit diffs)
    # what the source holds that lcm-etl's mapping does not name (source_schema.SourceSchema.unknown)
    unknown_in_source: dict[str, list[str]] = field(default_factory=lambda: {
        "tables_not_kept": [], "columns_in_metadata": [], "columns_not_kept": []})

    def take_written(self, counts: dict) -> None:
        """The plan said what would be written; SQLite says what was. They must agree."""
        planned = {"messages_inserted": self.messages.inserted, "parts_inserted": self.parts.inserted,
                   "summaries_inserted": self.summaries.inserted,
                   "boundary_events": self.boundary_events + self.boundaries_moved,   # migrate plans no move
                   "messages_updated": self.messages.updated, "summaries_updated": self.summaries.updated,
                   "parents_updated": self.parents_updated,   # and reconcile's off-path marks (r90)
                   "off_path_marks": self.extra.get("off_path_marked", 0) + self.extra.get("back_on_path", 0)}
        for key, want in planned.items():
            got = counts.get(key, 0) + (counts.get("boundaries_moved", 0) if key == "boundary_events" else 0)
            if got != want:
                self.warnings.append(f"{key}: planned {want}, written {got} (the target changed during the run?)")
        self.messages.inserted = counts.get("messages_inserted", 0)
        self.parts.inserted = counts.get("parts_inserted", 0)
        self.summaries.inserted = counts.get("summaries_inserted", 0)
        self.boundary_events = counts.get("boundary_events", 0)
        self.boundaries_moved = counts.get("boundaries_moved", 0)
        self.messages.updated = counts.get("messages_updated", 0)
        self.summaries.updated = counts.get("summaries_updated", 0)
        self.parents_updated = counts.get("parents_updated", 0)

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, **asdict(self), "elapsed_s": round(self.elapsed_s, 3)}

    def as_text(self, limit: int = 10) -> str:
        head = "DRY RUN - nothing was written; a real run would do this:" if self.dry_run else "Done."
        lines = [f"lcm-etl {self.command}: {head}"]
        if self.source:
            lines.append(f"  source:  {self.source}" + (f"  [{self.source_schema}]" if self.source_schema else ""))
        if self.target:
            lines.append(f"  target:  {self.target}")
        if self.sync_decision:
            lines.append(f"  sync:    {self.sync_decision['line']}")
        verb = "would insert" if self.dry_run else "inserted"
        transcripts = self.command == "reconcile"   # transcripts hold no summaries and no summary DAG
        kinds = (("messages", self.messages), ("parts", self.parts)) + (() if transcripts else
                                                                          (("summaries", self.summaries),))
        for name, k in kinds:
            lines.append(f"  {name:<10} {verb} {k.inserted:>8}   already present {k.already_present:>8}"
                         f"   skipped {sum(k.skipped.values()):>6}")
            for reason, n in sorted(k.skipped.items()):
                lines.append(f"               skipped {n}: {reason}")
        if transcripts:
            by_where = self.extra.get("transcripts_by_where") or {}
            lines.append(f"  transcripts read {self.extra.get('transcripts_read', 0)}"
                         + (" (" + ", ".join(f"{w} {n}" for w, n in sorted(by_where.items())) + ")" if by_where else "")
                         + f", files left out {len(self.extra.get('files_skipped', []))}"
                         + (f"; {self.extra['files_read_from_offset']} read from where the last run stopped, "
                            f"{self.extra.get('lines_read', 0)} lines read"
                            if self.extra.get("files_read_from_offset") else ""))
        else:
            lines.append(f"  parents collapsed {self.collapsed_parents} (dropped edges {self.dropped_parent_edges})"
                         f"   cross-session links ignored {self.cross_session_links} in written summaries, "
                         f"{self.cross_session_links_in_skipped} in skipped summaries")
        if self.messages.updated or self.summaries.updated or self.parents_updated:
            verb = "would update" if self.dry_run else "updated"
            what = ", ".join(f"{k} {n}" for k, n in sorted(self.changes.items()))
            lines.append(f"  changed in the source since imported: messages {verb} {self.messages.updated}"
                         + (f" ({what})" if what else "") + f", summary texts {self.summaries.updated}"
                         f", parents {self.parents_updated}")
        if self.messages_superseded:
            lines.append(f"  messages whose imported row holds other content than the source's now (edited in place, "
                         f"or an id a restored backup issued again): {self.messages_superseded} "
                         f"{'would be imported' if self.dry_run else 'imported'} beside it, the imported row kept")
        if self.conversations_changed:
            lines.append(f"  conversations new or changed in the source (provenance refreshed): {self.conversations_changed}")
        if self.sessions_kept:
            lines.append(f"  conversations kept in the session they were first imported into: {self.sessions_kept}"
                         " (their session id or key has changed since, or --key-by differs)")
        lines.append(packed(f"  sessions touched {len(self.sessions_touched)}", self.sessions_touched, limit))
        written, moved = ("to write", "to move") if self.dry_run else ("written", "moved")
        lines.append(f"  boundary events {written} {self.boundary_events}, {moved} {self.boundaries_moved} (the "
                     "session's last seam, to its new end)" if self.boundaries_moved else
                     f"  boundary events {'to write or move' if self.dry_run else 'written'} {self.boundary_events}")
        lines += first(self.skipped_summaries, limit=limit, what="skipped summaries", line=lambda s: (
            f"  skipped summary {s['summary_id']} ({s.get('session_id')}): {s['reason']}"
            + (f" (links {s['foreign_messages']} messages of other sessions)" if s.get("foreign_messages") else "")))
        if transcripts:
            lines += transcript_lines(self.extra, limit)
        lines += unknown_lines(self.unknown_in_source)
        if self.extra.get("kept_snapshot_bytes"):
            lines.append(f"  kept snapshot of the {'session stores' if transcripts else 'source'} for the next run: "
                         f"{size_text(self.extra['kept_snapshot_bytes'])} (`lcm-etl cache` lists the kept "
                         "snapshots)")
        for key, value in self.extra.items():
            if isinstance(value, (int, float, str)) and key not in _RENDERED:
                lines.append(f"  {key}: {value}")
        lines += [f"  warning: {w}" for w in self.warnings]
        lines.append(f"  elapsed {self.elapsed_s:.2f} s" + (f"   run {self.run_id}" if self.run_id else ""))
        return one_line_each(lines)


_RENDERED = {"kept_snapshot_bytes", "transcripts_read", "lines_read", "files_read_from_offset", "rewritten_in_place",
             "off_path", "off_path_marked", "back_on_path"}   # extra keys as_text renders in its own words


def unknown_lines(unknown: dict[str, list[str]]) -> list[str]:
    """What a newer lossless-claw added, in the words of every report (migrate, audit, inspect)."""
    lines = []
    if unknown["tables_not_kept"]:
        lines.append(f"  source tables lcm-etl does not know (not kept): {', '.join(unknown['tables_not_kept'])}")
    said = [f"{', '.join(unknown[key])} ({how})" for key, how in (("columns_in_metadata", "kept in message metadata"),
                                                                  ("columns_not_kept", "not kept")) if unknown[key]]
    if said:
        lines.append(f"  source columns lcm-etl does not know: {'; '.join(said)}")
    return lines

# what a terminal acts on instead of showing: C0/C1 controls (a newline, an escape sequence), line and paragraph
# separators, bidirectional overrides (they reorder the rest of the line); lone surrogates (bytes that were not UTF-8)
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def one_line(text: str) -> str:
    """Text from the data (a session id, an id, a path) as a text report shows it: what a terminal would act on
    is spelled as Python escapes it (a newline as \\n, ESC as \\x1b), so a row stays one row and the terminal
    stays as it was. --json carries the text itself (JSON escapes it); the target holds it byte for byte."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)


def one_line_each(lines: list[str]) -> str:
    """A text report's lines, each one line whatever the data in it (one_line), joined."""
    return "\n".join(map(one_line, lines))


def packed(head: str, items: list[str], limit: int) -> str:
    """`head: a, b, ... (+n)` with at most `limit` items, as many as fit in the report's width (--json lists them all)."""
    line, columns = head, width()
    for i, item in enumerate(items):
        rest = f", ... (+{len(items) - i - 1})" if i < len(items) - 1 else ""
        more = f"{line}{': ' if i == 0 else ', '}{item}"
        if i and (len(more + rest) > columns or i == limit):
            return f"{line}, ... (+{len(items) - i})"
        line = more
    return line


def plural(n: int, word: str, many: str | None = None) -> str:
    """`n word` with the word's plural unless n is 1: "1 window", "5 windows", "2 entries" (many)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def now_iso() -> str:
    """Now in UTC, as the ledger and the reports stamp times (Remnic's ISO form, milliseconds)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def first(items: list, limit: int, what: str, line, indent: str = "  ") -> list[str]:
    """The first `limit` items as `line` renders each, then how many more only --json lists."""
    more = [f"{indent}... {len(items) - limit} more {what} (see --json)"] if len(items) > limit else []
    return [line(item) for item in items[:limit]] + more


def transcript_lines(extra: dict, limit: int) -> list[str]:
    """reconcile: the transcripts read (_transcript_line), the session stores and archives, what was left out."""
    lines = first(extra.get("files", []), limit=limit, what="transcripts", line=_transcript_line)
    for st in extra.get("stores", []):
        lines.append(f"  session store {st['store']} (agent {st['agent_id']}, user_version {st['user_version']}): "
                     + plural(st['windows'], "window") + (f" ({st['cold_windows']} cold)" if st.get("cold_windows") else "")
                     + ", " + plural(st['archives'], "archive")
                     + (", " + plural(st['pending_inputs'], "pending input") if st.get("pending_inputs") else ""))
    archives = extra.get("archives", [])
    if archives:
        kinds = Counter(a["reason"] for a in archives)
        read = sum(a["imported"] for a in archives)
        lines.append(f"  archives found {len(archives)} (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
                     + f"): {read} read" + ("" if read == len(archives) else
                                            ", the others left out (--exclude-deleted; name the file to read it)"))
        lines += first(archives, limit=limit, what="archives", indent="    ", line=lambda a: (
            f"    {a['reason']} archive {a['archive']} in {a['where']}, session {a['session_id']}"
            + (" (the session is still held live)" if a["session_still_held"] else "")
            + ("" if a["imported"] else ": left out")))
    if extra.get("off_path") or extra.get("back_on_path"):
        lines.append(f"  rows off the active path, kept and marked off_path (a branch left them after they were "
                     f"imported): {extra['off_path']} ({extra['off_path_marked']} newly, {extra['back_on_path']} "
                     "back on the path)")
    if extra.get("rewritten_in_place"):
        lines.append(f"  entries OpenClaw rewrote in place since they were imported: {extra['rewritten_in_place']} "
                     "(the target keeps the text it imported; docs/mapping.md)")
    return lines + first(extra.get("files_skipped", []), limit=limit, what="files left out",
                         line=lambda f: f"  left out {f['file']}: {f['reason']}")


def _transcript_line(f: dict) -> str:
    """A transcript's line in a reconcile report: what was on its active path, what was not imported and why."""
    notes = [f"{f['messages_on_path']} messages on the active path ({f['imported']} imported, "
             f"{f['already_present']} already present)"]
    if f.get("read") == "appended":
        notes.append(f"read past seq {f['read_from_offset']} ({f['lines_read']} new rows)" if f.get("kind") == "window"
                     else f"read from byte {f['read_from_offset']} ({f['lines_read']} new lines)")
    if f.get("projection") == "fresh, differs":
        notes.append("OpenClaw's materialized path differs from the path read (its entry ids, in order)")
    if f["abandoned_branch_entries"]:
        notes.append(f"{f['abandoned_branch_entries']} abandoned-branch entries not imported")
    if f["replays"]:
        notes.append(f"entries replayed at lines {', '.join(map(str, f['replays']))} (kept once)")
    if f["extra_headers"]:
        notes.append(f"extra session headers at lines {', '.join(map(str, f['extra_headers']))} ignored")
    if f["unknown_entry_types"]:
        notes.append(f"{f['unknown_entry_types']} entries of unknown type ignored")
    where = f"{f['file']} window {f['window']}" if f.get("kind") == "window" else f["file"]
    return f"  {where}: " + "; ".join(notes)


@dataclass
class Targeted:
    """A command's report with why its target is that file (`rule`: --dest, --memory-dir, or the Remnic rule that
    chose it when neither was given, lcm_etl/store/remnic_home.py): in --json as `target_rule`, after `target`;
    in text, when Remnic's rules chose the file, as the first line, so a user sees which file was written."""
    report: Printable
    target: str
    rule: str
    default: bool

    def as_dict(self) -> dict:
        out: dict = {}
        for key, value in self.report.as_dict().items():
            out[key] = value
            if key == "target":
                out["target_rule"] = self.rule
        return out

    def as_text(self) -> str:
        text = self.report.as_text()
        return f"target: {self.target} ({self.rule})\n{text}" if self.default else text
