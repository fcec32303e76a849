"""Reading OpenClaw's transcripts for `reconcile` and `audit`: every session store's windows, live JSONL files and
the archives asked for, before the target is looked at (docs/design.md, "Reconcile: transcripts, read from where
the last run stopped").

What `--sessions` names is sorted by lcm_etl/read/openclaw/openclaw_state.py; a store's windows are read by store_reads.py
from its snapshot (openclaw/openclaw_store.py), a file by transcript_offsets.py, each from its record or whole as
transcript_decision.py decides, and each goes into the run file as it is read (run_file.py): Python holds one
transcript's parse at a time. A transcript or a store that cannot be read is a finding (findings.py) and the rest is
read; one named on the command line is bad input (exit 2), and nothing is written.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lcm_etl.run_options import ReadOptions
from lcm_etl.read.snapshot import runfolder
from lcm_etl.errors import BadInput
from lcm_etl.read.sessions import transcript_offsets as offsets
from lcm_etl.file_identity import real_path
from lcm_etl.read.sessions.run_file import RunFile, file_session
from lcm_etl.read.sessions.transcript_decision import RECORD_CHANGED, FileRecord, Records
from lcm_etl.read.findings import Unreadable, finding, open_regular, refuse_under_strict
from lcm_etl.read.openclaw.openclaw_home import is_state_dir, registry_finding, state_dir
from lcm_etl.read.openclaw.openclaw_state import Inputs, archive_kind, archive_session_id, find_inputs, is_sqlite
from lcm_etl.read.openclaw.openclaw_store import OpenStore, StoreWindow
from lcm_etl.read.snapshot.sqlite_copy import expand
from lcm_etl.read.sessions.store_reads import (ArchiveOrigin, PendingOrigin, archive_listing, read_archive_file, read_pending,
                                      read_store_archive, read_window, where_kind)
from lcm_etl.read.transcript.transcripts import Transcript, TranscriptError
from lcm_etl.progress import Progress
from lcm_etl.report import now_iso


@dataclass
class Reading:
    """Every transcript read, each into the run file (lcm_etl/read/sessions/run_file.py) as it is read, before the target
    is looked at. It keeps each session store's snapshot open until closed: a transcript read past its record may
    have to be read whole again (read_whole), from the same snapshot."""
    run: RunFile
    strict: bool = False
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    archives: list[dict] = field(default_factory=list)    # every archive found, read or not (store_reads.archive_listing)
    stores: list[dict] = field(default_factory=list)      # every session store read
    open_stores: dict[Path, OpenStore] = field(default_factory=dict)
    work: runfolder.Held | None = None
    key_by: str = "session-id"
    fallback_time: str = field(default_factory=now_iso)   # the created_at of a message that has none
    keys_by_folder: dict = field(default_factory=dict)
    left_out: set[str] = field(default_factory=set)  # session ids of the archives --exclude-deleted left out
    # session id -> the session key its store window or archive row carries: a file of that session (a published
    # archive, the doctor's original) takes it, so --key-by session-key lands it where the store's copy lands
    store_keys: dict[str, str] = field(default_factory=dict)
    found: list[dict] = field(default_factory=list)   # findings of the folders, files and stores (findings.py)
    named: set[Path] = field(default_factory=set)     # files named on the command line: unreadable is bad input
    declared: dict[str, str] = field(default_factory=dict)   # archive name -> its store row's archive_sha256
    registered: dict[Path, str] = field(default_factory=dict)   # a store a registry names: where it is named
    bars: Progress = field(default_factory=lambda: Progress(False))   # the reading phase's ticker: one per transcript
    held_by: str = ""   # the --src key the records are made under (lcm_etl/sync/identity.py)
    # per store, the windows not read: no row of theirs changed since the run that sealed the store's kept snapshot,
    # which left their records settled (`unchanged_windows`), by window id: the record's --src key, messages, parts
    unchanged: dict[Path, dict[str, tuple]] = field(default_factory=dict)

    def add(self, read: Callable[..., Transcript | None], start: FileRecord | str, again: tuple[str | None, str | None] =
            (None, None), order: int | None = None, what: str = "transcript") -> Transcript | None:
        """A transcript read (`read(start, strict)`) into the run file; `again`: the store and the window or
        archive name it is read again from (none: its path). One that cannot be read is a finding (None); bad
        input when it was named on the command line, or under --strict."""
        try:
            t = read(start, self.strict)
        except TranscriptError as exc:
            if self.strict or exc.path.resolve() in self.named:
                raise BadInput(f"not a readable transcript: {exc}; nothing was written") from None
            self.found.append(finding(what, exc.path, exc.message))
            return None
        if t is None:   # a finding its reader made (store_reads.read_pending)
            return None
        self.run.add(t, start, file_session(t, self.key_by, self.keys_by_folder, self.store_keys),
                     _kind(t), where_kind(t), again, _origin(t), self.fallback_time, order)
        self.bars.step()
        return t

    def read_whole(self, again: dict[int, str]) -> None:
        """Read these transcripts again, whole, each for its cause (transcript_decision.settle): each
        one's rows in the run file are replaced by the new read's."""
        rows = self.run.query("SELECT file_order, kind, store, again, path FROM transcripts WHERE file_order IN "
                              f"({', '.join(str(int(i)) for i in again) or '-1'})").fetchall()
        windows = {(Path(store), name): order for order, kind, store, name, _ in rows if kind == "window"}
        for path, store in self.open_stores.items():
            found = [w for w in store.contents.windows if (path, w.session_id) in windows] if windows else []
            archives = {a.name: a for a in store.contents.archives}
            for order, kind, where, name, _ in rows:
                if where is not None and Path(where) == path and kind == "archive":
                    self._again(order, functools.partial(read_store_archive, store, archives[name]), again[order],
                                "archive")
            for w in found:
                order = windows[(path, w.session_id)]
                self._again(order, functools.partial(read_window, store, w), again[order])
        for order, kind, where, _, path in rows:
            if where is None:
                read = functools.partial(read_archive_file, Path(path), None, declared=self.declared.get(
                    Path(path).name)) if kind == "archive" else functools.partial(offsets.read, Path(path))
                self._again(order, read, again[order], kind)

    def _again(self, order: int, read: Callable[..., Transcript], why: str, what: str = "window") -> None:
        self.run.forget(order)
        self.add(read, why, order=order, what="transcript" if what == "file" else what)

    def confirm_unchanged(self, last_run: str | None) -> None:
        """Under the run lock: the windows left unread stay so while the target's records are still the ones the
        run that sealed their store's snapshot left (`last_run`: transcript_decision.last_records_run); else they
        are read whole, as a record that changed under the lock is."""
        for path, windows in self.unchanged.items():
            store = self.open_stores[path]
            if windows and store.kept.changes is not None and store.kept.changes.since != last_run:
                for w in store.contents.windows:
                    if w.session_id in windows:
                        self.add(functools.partial(read_window, store, w), RECORD_CHANGED, (str(path), w.session_id),
                                 what="window")
                windows.clear()
                next(s for s in self.stores if s["store"] == str(path))["windows_unchanged"] = 0
        self.run.flush()   # settle's query over the run file sees the windows read here

    def findings(self) -> list[dict]:
        """History the sources hold that could not be read: folders, files, stores, and what each store's reading
        found (a cold archive missing or failing verification, a pending input that is not a message)."""
        every = self.found + [f for store in self.open_stores.values() for f in store.findings]
        return list({tuple(f.values()): f for f in every}.values())   # a window read again finds it again

    def close(self, committed: str | None = None) -> int:
        """`committed`: the run that read this and committed (the stores' kept snapshots are sealed for it). The
        bytes of the copies this run made and kept, for its report."""
        settled = {path: self._settled(path) for path in self.open_stores} if committed else {}
        self.run.close()
        kept = 0
        for path, store in self.open_stores.items():
            store.close(committed, settled.get(path))
            kept += store.kept.kept_bytes or 0
        self.open_stores.clear()
        if self.work is not None:
            self.work.cleanup()
            self.work = None
        return kept

    def _settled(self, path: Path) -> dict[str, tuple]:
        """The store's windows whose records this run leaves as they are (read from the record with nothing new) or
        as r95 writes them (every line read, its session planned), by window id: the --src key they are made
        under, their messages and parts. Only by session id and for every session: else a window's record depends
        on others' reads."""
        if self.key_by != "session-id" or self.run.session_filter:
            return {}
        settled = dict(self.unchanged.get(path, {}))
        settled.update((sid, (self.held_by, messages, parts)) for sid, messages, parts in self.run.query(
            "SELECT again, messages, parts FROM transcripts WHERE kind = 'window' AND store = ? AND tip IS NOT NULL AND "
            "((read = 'appended' AND lines_read = 0) OR "
            "(lines IS NOT NULL AND session_id IN (SELECT session_id FROM jsonl_messages)))", (str(path),)))
        return settled


def unchanged_windows(store: OpenStore, opts: ReadOptions, inputs: Inputs, last_run: str | None,
                      held_by: str) -> dict[str, tuple]:
    """The windows a watch's later sync leaves unread (by window id: their record's --src key, messages and
    parts): no page of their rows changed since the run that sealed the store's kept snapshot
    (StoreSnapshot.unchanged), that run left their records settled and is still the last to write records
    (`last_run`; checked again under the lock: Reading.confirm_unchanged), under these options. Each would be
    read from its record with nothing new; the report counts them (`windows_unchanged`). A sync that checks every
    session's target rows, one by session key, with --session-filter or --full, and one beside JSONL files (a
    file may share a window's session) reads every window."""
    c = store.kept.changes
    if (opts.every_session or opts.key_by != "session-id" or opts.session_filter or inputs.files
            or inputs.archive_files or c is None or c.since != last_run):   # --full: no records, no last_run
        return {}
    # a window whose session an archive row or a pending input shares is read (its session may be read whole)
    shared = {a.session_id for a in store.contents.archives} | {p.session_id for p in store.contents.pending}
    return {sid: rec for sid, rec in store.kept.unchanged.items() if rec[0] == held_by and sid not in shared}


def read_all(opts: ReadOptions, records: Records | None = None, held_by: str = "",
             bars: Progress | None = None) -> Reading:
    """Every transcript: each session store's windows (whole, or past the seq its record proves: a re-run,
    docs/design.md), each live JSONL file (whole, or from its recorded offset), and the archives asked for; without
    `records` (audit), each whole. `held_by`: the key of --src (lcm_etl/sync/identity.py) the records must have been
    made under (a record made with another is not used). Store windows come first, then live files, then archives:
    where two hold the same entry, the first is read. `bars`: a terminal's progress, a ticker counting the
    transcripts read."""
    given = [expand(p) for p in opts.sessions]
    for p in given:
        if not p.exists():
            raise BadInput(f"transcript path not found: {p} (pass --sessions with an openclaw-agent.sqlite, an agent "
                           "folder, a state folder, a .jsonl file or a sessions folder)")
    if not given and not is_state_dir(state_dir()):   # its agents may all live in registered agentDirs
        raise BadInput(f"no transcripts: nothing under {state_dir()}/agents/ (set OPENCLAW_STATE_DIR, or pass "
                       "--sessions with an openclaw-agent.sqlite, an agent or state folder, or a .jsonl file)")
    inputs = find_inputs(given)
    known = records if records is not None else Records()

    def start(key: str) -> FileRecord | str:
        return known.start(key, opts.key_by, held_by)

    work = runfolder.Held()
    reading = Reading(RunFile(Path(work.name) / "stage.sqlite", not opts.dry_run or opts.content,
                              frozenset(opts.session_filter)),
                      opts.strict, list(inputs.skipped), work=work, key_by=opts.key_by, found=inputs.findings,
                      named=inputs.named, registered=inputs.registered, held_by=held_by)
    if bars is not None:   # the clock runs from the first store's snapshot on (a large store's copy is seconds)
        reading.bars = bars
        bars.phase("reading transcripts", None, unit="transcripts")
    try:
        _read_into(reading, inputs, opts, start, known.last_run())
        reading.run.read_back()
        if opts.strict:
            refuse_under_strict(reading.findings())
    except BaseException:
        reading.close()
        raise
    return reading


def _read_into(reading: Reading, inputs: Inputs, opts: ReadOptions, start, last_run: str | None) -> None:
    assert reading.work is not None
    for path in inputs.stores:
        store = _open_store(reading, path, opts)
        if store is None:
            continue
        c = store.contents
        # with --key-by session-key a file of a session the store holds lands under the store's key: a key per
        # window is held for the run (about 200 bytes each); by session id a window once read holds nothing
        for held in (*c.windows, *c.archives) if opts.key_by == "session-key" else ():
            if held.session_key and held.session_key.strip():
                reading.store_keys.setdefault(held.session_id, held.session_key)
        skip = reading.unchanged[path] = unchanged_windows(store, opts, inputs, last_run, reading.held_by)
        reading.stores.append({"store": str(path), "agent_id": c.agent_id, "user_version": c.user_version,
                               "windows": len(c.windows), "windows_unchanged": len(skip), "archives": len(c.archives),
                               "cold_windows": len(c.cold), "pending_inputs": len(c.pending),
                               "compressed_rows": c.compressed, "kept_snapshot": store.kept.kept_note()})
        for w in c.windows.but(skip):   # each window made as it is read, and read into the run file: none held here
            reading.add(functools.partial(read_window, store, w), start(w.record_key), (str(path), w.session_id),
                        what="window")
        held = {w.session_id for w in c.windows} if c.archives else set()
        for a in c.archives:
            wanted = not (opts.exclude_deleted and deleted_on_purpose(a.reason, a.session_alive))
            read = wanted and reading.add(functools.partial(read_store_archive, store, a),
                                          start(real_path(path, a.name)), (str(path), a.name),
                                          what="archive") is not None
            if not wanted:
                reading.left_out.add(a.session_id)
            if a.sha256:
                reading.declared[a.name] = a.sha256
            origin = ArchiveOrigin(a.name, a.reason, a.session_id, a.session_key, path, a.agent_id)
            reading.archives.append(archive_listing(origin, str(path), read, a.session_id in held))
        # after every window: a pending input lands at the end of its window's session
        for p in c.pending:
            reading.add(lambda _start, strict, p=p, s=store: read_pending(s, p, strict), "", what="pending input")
    for f in inputs.files:
        reading.add(functools.partial(offsets.read, f), start(real_path(f)))
    live = {r[0] for r in reading.run.query("SELECT DISTINCT header_id FROM transcripts WHERE kind <> 'archive'")} \
        if inputs.archive_files else set()
    # the agents whose store was read: the store says which sessions were deleted on purpose (its archive rows)
    stored = {p.resolve().parent.parent for p in reading.open_stores} if inputs.archive_files else set()
    for f in inputs.archive_files:
        # a published archive file is its store row's copy (same bytes): left out with it, read with it; one whose
        # row is gone, beside a store, is not known to be deleted on purpose: read
        sid = archive_session_id(f)
        by_name = f.resolve().parent.parent not in stored and opts.exclude_deleted and \
            deleted_on_purpose(archive_kind(f), sid in live)
        wanted = f.resolve() in inputs.named or not (sid in reading.left_out or by_name)
        t = reading.add(functools.partial(read_archive_file, f, None, declared=reading.declared.get(f.name)),
                        start(real_path(f)), what="archive") if wanted else None
        origin = t.origin if t is not None and isinstance(t.origin, ArchiveOrigin) else \
            ArchiveOrigin(f.name, archive_kind(f), sid, None)
        reading.archives.append(archive_listing(origin, str(f.parent), t is not None, origin.session_id in live))


def _open_store(reading: Reading, path: Path, opts: ReadOptions) -> OpenStore | None:
    """A session store's snapshot, opened; one that is not a readable store is a finding (bad input when named)."""
    assert reading.work is not None
    where = path
    try:
        wal = Path(f"{path}-wal")
        for where in (path, wal) if os.path.lexists(wal) else (path,):   # say which one cannot be read
            os.close(open_regular(where))
        if not is_sqlite(path):
            where = path
            raise Unreadable("not a SQLite database")
        store = OpenStore(path, Path(reading.work.name), opts.memory_limit, keeps_records=not opts.dry_run,
                          target=None if opts.dry_run else opts.target)
    except (Unreadable, BadInput, OSError) as exc:
        problem = (exc.problem if isinstance(exc, Unreadable) else f"not a readable session store ({exc})"
                   if isinstance(exc, BadInput) else f"cannot be read ({exc.strerror or exc})")
        if path.resolve() in reading.named or opts.strict:
            raise BadInput(str(exc) if isinstance(exc, BadInput) else f"session store {where}: {problem}") from None
        if path in reading.registered:   # the registry's word, not the user's: said as the registry's
            why = exc.problem if isinstance(exc, BadInput) else problem   # not the remedy
            reading.found.append(registry_finding("registered, not a session store", where,
                                                  f"{reading.registered[path]}; {why}"))
        else:
            reading.found.append(finding("session store", where, problem))
        return None
    reading.open_stores[path] = store
    return store


def deleted_on_purpose(reason: str, session_alive: bool) -> bool:
    """What --exclude-deleted leaves out: the archive of a session deleted on purpose (`sessions.delete`: reason
    'deleted' and no session left under its key). A window OpenClaw evicted for disk space is archived as 'deleted'
    too, but its session lives on; a reset keeps its session; both are read."""
    return reason == "deleted" and not session_alive


def _kind(t: Transcript) -> str:
    o = t.origin
    return ("window" if isinstance(o, StoreWindow) else "pending input" if isinstance(o, PendingOrigin)
            else "archive" if o is not None else "file")


def _origin(t: Transcript) -> dict:
    """What the report says of where a transcript was read from (its kind, and a store window's or a pending
    input's window, session key and how OpenClaw's own path compares)."""
    if isinstance(t.origin, StoreWindow):
        return {"kind": "window", "window": t.origin.session_id, "session_key": t.origin.session_key,
                "projection": t.report.projection, **({"cold": t.origin.cold} if t.origin.cold else {})}
    if isinstance(t.origin, PendingOrigin):
        return {"kind": "pending input", "window": t.origin.input.session_id, "session_key": t.origin.session_key,
                "pending_state": t.origin.input.state}
    return {"kind": _kind(t)}

