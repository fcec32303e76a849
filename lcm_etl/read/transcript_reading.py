"""Reading OpenClaw's transcripts for `reconcile` and `audit`: every session store's windows, live JSONL files and
the archives asked for, before the target is looked at (docs/design.md, "OpenClaw's session store").

What `--sessions` names is sorted by lcm_etl/read/openclaw/openclaw_state.py; a store's windows are read by store_reads.py
from its snapshot (openclaw/openclaw_store.py), a file by transcript_offsets.py, each from its record or whole as
transcript_decision.py decides. A transcript that cannot be read is bad
input (exit 2), and nothing is written.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lcm_etl import duck
from lcm_etl.read.snapshot import runfolder
from lcm_etl.errors import BadInput
from lcm_etl.read import transcript_offsets as offsets
from lcm_etl.read.content_spool import ContentSpool
from lcm_etl.file_identity import real_path
from lcm_etl.read.transcript_decision import FileRecord, Records
from lcm_etl.read.openclaw.openclaw_state import Inputs, archive_kind, archive_session_id, find_inputs, state_folder
from lcm_etl.read.openclaw.openclaw_store import OpenStore, StoreWindow
from lcm_etl.read.lcmdb.sources import expand
from lcm_etl.read.store_reads import (ArchiveOrigin, archive_listing, read_archive_file, read_pending,
                                      read_store_archive, read_window)
from lcm_etl.read.transcript_rows import IdentitySpool, file_session, release
from lcm_etl.read.transcript.transcripts import Transcript, TranscriptError
from lcm_etl.read.window_shelf import Transcripts
from lcm_etl.report import now_iso


@dataclass(frozen=True)
class ReadOptions:
    sessions: list[str]
    strict: bool = False
    exclude_deleted: bool = False
    key_by: str = "session-id"
    memory_limit: str = duck.DEFAULT_MEMORY_LIMIT
    dry_run: bool = False   # read-only: the store reader's DuckDB keeps no record (duck.connect)
    held_by: str = ""       # the --src whose rows count as held (a record made with another is not used)
    session_filter: tuple[str, ...] = ()   # the sessions the run may write (none: every one)
    target: Path | None = None   # the target a run that writes commits to: each store's snapshot is kept for it


@dataclass
class Reading:
    """Everything read from the transcripts' sources, before the target is looked at. It keeps each session
    store's snapshot open until closed: a window read past its recorded seq may have to be read whole again
    (read_whole), from the same snapshot."""
    transcripts: Transcripts   # released store windows shelved on disk (window_shelf.py)
    strict: bool = False
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    archives: list[dict] = field(default_factory=list)    # every archive found, read or not (store_reads.archive_listing)
    stores: list[dict] = field(default_factory=list)      # every session store read
    open_stores: dict[Path, OpenStore] = field(default_factory=dict)
    work: runfolder.Held | None = None
    key_by: str = "session-id"
    # the created_at of a message that has none (the time of the read): a released window's rows hold it
    fallback_time: str = field(default_factory=now_iso)
    keys_by_folder: dict = field(default_factory=dict)
    spool: IdentitySpool | None = None   # released windows' plan rows (transcript_rows.IdentitySpool)
    content: ContentSpool | None = None  # their content rows, in the stage file (None: a run that stages nothing)
    session_filter: frozenset[str] = frozenset()   # only these sessions' content is spooled (none: every one)
    left_out: set[str] = field(default_factory=set)  # session ids of the archives --exclude-deleted left out
    archive_reads: dict[int, Callable] = field(default_factory=dict)   # read order -> how to read that archive

    def add_window(self, store: OpenStore, w: StoreWindow, start: FileRecord | str) -> None:
        t = self._window(store, w, start, len(self.transcripts), self.spool)
        self.transcripts.shelve(t, None if t.staged else (start, self.strict))

    def add_archive(self, read: Callable[..., Transcript], start: FileRecord | str) -> None:
        """An archive (a store's row or a file: `read(start, strict)`), released as it is read, as a window is: a
        first run of an installation upgraded from JSONL reads every doctor's original, and 100 archives of 5,000
        lines held in memory took 1.6 GB. `read` is kept to read it again whole (read_whole)."""
        order = len(self.transcripts)
        self.archive_reads[order] = read
        self.transcripts.append(self._released(functools.partial(_guarded, read, start, self.strict), order,
                                               self.spool))

    def revive(self, t: Transcript, remake) -> None:
        """A shelved window's reload, made again from the read's arguments (window_shelf.Transcripts)."""
        start, strict = remake
        t.reload = functools.partial(_guarded, read_window, self.open_stores[t.origin.store], t.origin, start, strict)

    def read_whole(self, again: dict[int, str]) -> None:
        """Read these transcripts again, whole, each for its cause (transcript_decision.settle, in_sessions)."""
        for i, why in sorted(again.items()):
            t = self.transcripts[i]
            if isinstance(t.origin, StoreWindow):
                self.transcripts[i] = self._window(self.open_stores[t.origin.store], t.origin, why, i, None)
            elif i in self.archive_reads:
                self.transcripts[i] = self._released(
                    functools.partial(_guarded, self.archive_reads[i], why, self.strict), i, None)
            else:
                self.transcripts[i] = _guarded(offsets.read, t.path, why, self.strict)

    def _window(self, store: OpenStore, w: StoreWindow, start: FileRecord | str, order: int,
                spool: IdentitySpool | None) -> Transcript:
        return self._released(functools.partial(_guarded, read_window, store, w, start, self.strict), order, spool)

    def _released(self, read: Callable[[], Transcript], order: int, spool: IdentitySpool | None) -> Transcript:
        """A window or an archive read (past its record, or whole), and released as soon as it is read: its plan
        rows to the spool (transcript_rows.release), its content rows to the stage file (content_spool.ContentSpool)
        when the run stages, its parse dropped. What Python holds while reading is one transcript's parse, whatever
        the store's size and however much of it is new (docs/benchmarks.md, 2026-11-26). One whose content was not
        spooled (a session the run leaves out) is read again if it is ever staged (t.reload)."""
        t = read()
        session = file_session(t, self.key_by, self.keys_by_folder)
        if self.content is not None and (not self.session_filter or session.session_id in self.session_filter):
            self.content.add(t, order, session.session_key)
        if not t.staged:   # kept only where it may be needed: 10,000 windows' partials are about 2 MB
            t.reload = read
        release(t, order, session, self.fallback_time, spool)
        return t

    def findings(self) -> list[dict]:
        """History the sources hold that could not be read (a cold archive missing or failing verification)."""
        return [f for store in self.open_stores.values() for f in store.findings]

    def close(self, committed: str | None = None) -> None:
        """`committed`: the run that read this and committed (the stores' kept snapshots are sealed for it)."""
        self.transcripts.close()
        if self.spool is not None:
            self.spool.close()
        if self.content is not None:
            self.content.close()
        for store in self.open_stores.values():
            store.close(committed)
        self.open_stores.clear()
        if self.work is not None:
            self.work.cleanup()
            self.work = None


def read_all(opts: ReadOptions, records: Records | None = None) -> Reading:
    """Every transcript: each session store's windows (whole, or past the seq its record proves: a re-run,
    docs/design.md), each live JSONL file (whole, or from its recorded offset), and the archives asked for; without
    `records` (audit), each whole. Store
    windows come first, then live files, then archives: where two hold the same entry, the first is read."""
    given = [expand(p) for p in opts.sessions]
    for p in given:
        if not p.exists():
            raise BadInput(f"transcript path not found: {p} (pass --sessions with an openclaw-agent.sqlite, an agent "
                           "folder, a state folder, a .jsonl file or a sessions folder)")
    if not given and not (state_folder() / "agents").is_dir():
        raise BadInput(f"no transcripts: nothing under {state_folder()}/agents/ (set OPENCLAW_STATE_DIR, or pass "
                       "--sessions with an openclaw-agent.sqlite, an agent or state folder, or a .jsonl file)")
    inputs = find_inputs(given)
    known = records if records is not None else Records()

    def start(key: str) -> FileRecord | str:
        return known.start(key, opts.key_by, opts.held_by)

    def archived(key: str) -> FileRecord | str:   # an archive needs no tip: nothing continues it
        return known.trusted(key, opts.key_by, opts.held_by)

    work = runfolder.Held()
    reading = Reading(Transcripts(Path(work.name)), opts.strict, list(inputs.skipped), work=work, key_by=opts.key_by,
                      spool=IdentitySpool(Path(work.name)), session_filter=frozenset(opts.session_filter))
    reading.transcripts.revive = reading.revive
    try:
        if not opts.dry_run:   # a run that writes stages the windows' content as they are read
            reading.content = ContentSpool(Path(work.name) / "stage.sqlite")
        _read_into(reading, inputs, opts, start, archived)
    except BaseException:
        reading.close()
        raise
    return reading


def _read_into(reading: Reading, inputs: Inputs, opts: ReadOptions, start, archived) -> None:
    assert reading.work is not None
    for path in inputs.stores:
        store = reading.open_stores[path] = OpenStore(path, Path(reading.work.name), opts.memory_limit,
                                                      keeps_records=not opts.dry_run,
                                                      target=None if opts.dry_run else opts.target)
        c = store.contents
        reading.stores.append({"store": str(path), "agent_id": c.agent_id, "user_version": c.user_version,
                               "windows": len(c.windows), "archives": len(c.archives),
                               "cold_windows": len(c.cold), "pending_inputs": len(c.pending),
                               "compressed_rows": c.compressed, "kept_snapshot": store.kept_note()})
        # each window is made as it is read, and shelved with its transcript (window_shelf.py): none held here
        for w in c.windows:
            reading.add_window(store, w, start(w.record_key()))
        held = {w.session_id for w in c.windows} if c.archives else set()
        for a in c.archives:
            wanted = not (opts.exclude_deleted and deleted_on_purpose(a.reason, a.session_alive))
            if wanted:
                reading.add_archive(functools.partial(read_store_archive, store, a),
                                    archived(real_path(path, a.name)))
            else:
                reading.left_out.add(a.session_id)
            origin = ArchiveOrigin(a.name, a.reason, a.session_id, a.session_key, path, a.agent_id)
            reading.archives.append(archive_listing(origin, str(path), wanted, a.session_id in held))
        # after every window: a pending input lands at the end of its window's session
        reading.transcripts += [_guarded(read_pending, p, opts.strict) for p in c.pending]
    reading.transcripts += [_guarded(offsets.read, f, start(real_path(f)), opts.strict) for f in inputs.files]
    live = {t.header_id for t in reading.transcripts
            if not isinstance(t.origin, ArchiveOrigin)} if inputs.archive_files else set()
    for f in inputs.archive_files:
        # a published archive file is its store row's copy (same bytes): left out with it, read with it
        sid = archive_session_id(f)
        wanted = f.resolve() in inputs.named or not (
            sid in reading.left_out or opts.exclude_deleted and deleted_on_purpose(archive_kind(f), sid in live))
        if wanted:
            reading.add_archive(functools.partial(read_archive_file, f, None), archived(real_path(f)))
            origin = reading.transcripts[len(reading.transcripts) - 1].origin
        else:
            origin = ArchiveOrigin(f.name, archive_kind(f), sid, None)
        reading.archives.append(archive_listing(origin, str(f.parent), wanted, origin.session_id in live))


def deleted_on_purpose(reason: str, session_alive: bool) -> bool:
    """What --exclude-deleted leaves out: the archive of a session deleted on purpose (`sessions.delete`: reason
    'deleted' and no session left under its key). A window OpenClaw evicted for disk space is archived as 'deleted'
    too, but its session lives on; a reset keeps its session; both are read."""
    return reason == "deleted" and not session_alive


def _guarded(read, *args):
    """read(*args); a transcript that cannot be read is bad input, and nothing is written."""
    try:
        return read(*args)
    except TranscriptError as exc:
        raise BadInput(f"not a readable transcript: {exc}; nothing was written") from None
