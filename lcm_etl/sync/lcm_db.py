"""How a `migrate` of one lcm.db into one target decides what to read and re-plan: the whole decision.

It is made in three steps, each as soon as what it needs has been read:

1. `before_read` (no source read yet): the no-op shortcut (lcm_etl/sync/shortcut.py), else which run's kept
   snapshot may be continued (the last migrate of this path: lcm_etl/read/snapcache.py compares its pages).
2. `after_snapshot` (the snapshot taken, whole or page by page): whose marks the target holds for this source
   (lcm_etl/store/marks.py, stored by its last complete migrate over the whole source with the same options), and
   whether the changed pages name the changed conversations (`WAL only`, `pages compared`) or the source's marks
   must be computed and compared (`marks`). Without trusted marks: a `full plan`, saying why.
3. `narrow` (DuckDB has the marks and the target's provenance): the sessions to re-plan, closed over the ones
   they share (08_sync_scope.sql), or a full plan when the source's schema or its rows of no conversation
   changed (the global mark).

Every cause of a full plan is said in `Decision.why`. Nothing here writes; planning never calls back here.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import orjson

from lcm_etl.store.marks import Marks, read as read_marks
from lcm_etl.sync import shortcut
from lcm_etl.sync.decision import FULL, MARKS, NO_OP, PAGES, WAL_ONLY, Decision
from lcm_etl.sync.identity import SourceIdentity, typed_paths
from lcm_etl.read.sources import real_path


@dataclass
class Recorded:
    """The marks the previous run stored, and that run's id."""
    run_id: str
    marks: Marks


@dataclass
class Asked:
    """What the run was asked to do, as far as it bears on the decision."""
    src: Path
    target: Path
    existed: bool
    full: bool
    session_filter: list[str]
    dry_run: bool
    key_by: str

    @property
    def opts_key(self) -> list:
        return shortcut.options_key(self.key_by, self.session_filter)


class LcmDbSync:
    """The decision for one run, filled in by the three steps; `decision` is what the report says."""

    def __init__(self, asked: Asked):
        self.asked = asked
        self.source_fp = shortcut.source_fingerprint(asked.src)
        self.path = real_path(asked.src)
        self.identity: SourceIdentity | None = None
        self.spellings: list[str] = []   # the source_path values of this source in the target, its key first
        self.rec: Recorded | None = None
        self.proved_conversations: set[str] | None = None   # the changed pages' owners (WAL only, pages compared)
        self.decision = Decision(FULL, "a new target" if not asked.existed else "--full" if asked.full else
                                 "--session-filter plans the named sessions whole" if asked.session_filter else "")

    # 1 -----------------------------------------------------------------------------------------------------
    def before_read(self) -> shortcut.Previous | None:
        """The run that makes this one a no-op, else None."""
        a = self.asked
        if not a.existed or a.full:
            return None
        previous = shortcut.previous_totals(a.target, self.source_fp, a.opts_key, a.dry_run)
        if previous is not None:
            self.decision = Decision(NO_OP, f"source unchanged and target untouched since run {previous.run_id}",
                                     since_run=previous.run_id)
        return previous

    @property
    def uses_marks(self) -> bool:
        a = self.asked
        return a.existed and not (a.full or a.session_filter)

    def continued_run(self) -> str | None:
        """The run whose kept snapshot this one may bring up to date: the one whose marks the last migrate of
        this path left (a no-op run leaves the marks of the run it took the shortcut from)."""
        if not self.uses_marks or self.asked.dry_run:
            return None
        with _ledger(self.asked.target) as con:
            if con is None:
                return None
            paths = typed_paths(con, self.path)
            row = con.execute("SELECT status, counts FROM lcm_etl_runs WHERE command = 'migrate' AND (source_path "
                              f"LIKE ? ESCAPE '\\' OR source_path IN ({', '.join('?' * len(paths))})) "
                              "ORDER BY rowid DESC LIMIT 1", (_like_prefix(self.path), *paths)).fetchone()
        if row is None or row[0] != "complete":
            return None
        try:
            counts = orjson.loads(row[1] or "{}")
        except orjson.JSONDecodeError:
            return None
        return counts.get("marks_run") if isinstance(counts, dict) else None

    # 2 -----------------------------------------------------------------------------------------------------
    def after_snapshot(self, identity: SourceIdentity, target_db: Path | None, changes, continued: str | None,
                       cache_note: str | None, cache_on: bool) -> None:
        """`changes`: the kept snapshot's changed pages since run `continued` (snapcache.Changes), None when the
        source was copied whole. `target_db`: the target as planning reads it (a dry run's copy)."""
        self.identity = identity
        cache_note = f"the kept snapshot was dropped: {cache_note}" if cache_note else None
        with _ledger(target_db) as con:
            self.spellings = [identity.key, *(typed_paths(con, identity.path) if con is not None else [])]
            if not self.uses_marks:
                self.decision.cache = cache_note
                return
            self.rec, why = _recorded(con, self.spellings, self.asked.opts_key) if con is not None else \
                (None, "no earlier migrate of this source into the target")
        if changes is not None and changes.conversations is None:
            # changed pages it cannot place (a value rewritten in its overflow pages): what changed is not proved
            # by the pages, and the marks digest only what the plan reads
            self.rec, why = None, f"the kept snapshot's {changes.pages} changed pages: {changes.why}"
        if self.rec is None:
            self.decision = Decision(FULL, why, cache=cache_note)
        elif changes is not None and continued == self.rec.run_id and changes.conversations is not None:
            self.proved_conversations = changes.conversations
            how = PAGES if changes.compared else WAL_ONLY
            where = "" if changes.compared else " (its main file untouched since: only its WAL was read)"
            self.decision = Decision(how, f"{changes.pages} pages changed since the snapshot kept from run "
                                     f"{self.rec.run_id}{where}", since_run=self.rec.run_id,
                                     pages_changed=changes.pages, cache=cache_note)
        else:
            if changes is not None:
                kept = f"the kept snapshot is of run {continued}"
            else:
                kept = cache_note or ("no snapshot kept" if cache_on else "no snapshot kept (the cache is off)")
            self.decision = Decision(MARKS, f"the source's marks compared with those of run {self.rec.run_id} "
                                     f"({kept})", since_run=self.rec.run_id)

    # 3 -----------------------------------------------------------------------------------------------------
    def narrow(self, con, params: dict, schema, snapshot: Path, scratch: Path):
        """The sessions this run re-plans (marks and provenance read into DuckDB): a delta.Scope whose source
        rows are being copied, or None for a full plan (the decision says why). With pages proved, the
        changed conversations are the pages' owners; else the source's marks (03, computed over the whole
        source) are compared with the recorded ones."""
        from lcm_etl import duck   # DuckDB's modules: loaded by the Warmup thread (migrate.py)
        from lcm_etl.planning import delta
        from lcm_etl.steps import pipeline
        from lcm_etl.steps.engine import run_stage

        rec, d = self.rec, self.decision
        if rec is None:
            return None
        delta.recorded_tables(con, rec.marks)
        was = rec.marks.source
        proved = self.proved_conversations
        if proved is not None and was[0] != delta.schema_signature(schema):
            delta.mark_source(con, schema, snapshot)   # the schema changed: the marks decide, and differ
            proved = None
        if proved is None and was != duck.one(con, "SELECT * FROM source_global"):
            self.decision = Decision(FULL, "the source's schema or its rows of no conversation changed since run "
                                     f"{rec.run_id}", cache=d.cache)
            self.rec = None
            return None
        if proved is not None:
            con.execute("CREATE OR REPLACE TABLE source_marks AS FROM recorded_source_marks LIMIT 0")
        con.execute("CREATE OR REPLACE TABLE page_changed_convs AS SELECT unnest($keys::VARCHAR[]) AS conv_key",
                    {"keys": sorted(proved or [])})
        run_stage(pipeline.SYNC_SCOPE, con, params)
        keys = [r[0] for r in con.execute("SELECT conv_key FROM scope_convs ORDER BY 1").fetchall()]
        # sessions of this source only: a session of another source in the target (another database once at
        # this path) is re-read with the scope but is not one of this source's
        sessions, changed, total = duck.one(
            con, "SELECT (SELECT count(*) FROM scope_sessions WHERE session_id IN (SELECT session_id FROM sessions)), "
                 "(SELECT count(*) FROM changed_convs), (SELECT count(DISTINCT session_id) FROM sessions)")
        d.replanned(sessions, total, changed)
        scope = delta.Scope(rec.run_id, scratch / "scope-source.sqlite", proved is not None)
        scope.copy_source_rows(snapshot, keys)   # while 05 reads the target's rows of the scope
        return scope


def _like_prefix(path: str) -> str:
    return path.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "#%"


class _ledger:
    """The target's ledger, read-only, or None when there is none to read."""

    def __init__(self, target_db: Path | None):
        self.target_db = target_db
        self.con: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection | None:
        if self.target_db is None or not Path(self.target_db).exists():
            return None
        try:
            con = self.con = sqlite3.connect(f"file:{self.target_db}?mode=ro", uri=True)
            con.execute("SELECT 1 FROM lcm_etl_runs LIMIT 1")
        except sqlite3.Error:
            return None
        return con

    def __exit__(self, *exc) -> None:
        if self.con is not None:
            self.con.close()


_STATUS = {"failed": "failed", "killed": "was killed", "running": "is still running or died",
           "undone": "was undone"}


def _recorded(con: sqlite3.Connection, spellings: list[str], opts_key: list) -> tuple[Recorded | None, str]:
    """The marks of the last migrate of this source (any of its spellings) into the target, if they can be
    trusted: that run completed, planned the whole source with the same options and stored marks; else why
    not. The last migrate to *start*: one that died after it is the latest, and its marks are not trusted."""
    marks_sql = ", ".join("?" * len(spellings))
    try:
        row = con.execute(f"SELECT run_id, status, counts FROM lcm_etl_runs WHERE command = 'migrate' AND "
                          f"source_path IN ({marks_sql}) ORDER BY rowid DESC LIMIT 1", spellings).fetchone()
        if row is None:
            return None, "no earlier migrate of this source into the target"
        run_id, status, counts = row[0], row[1], orjson.loads(row[2] or "{}")
        if status != "complete":
            return None, f"the last migrate of this source, run {run_id}, {_STATUS.get(status, status)}"
        marks_run = counts.get("marks_run") if isinstance(counts, dict) else None
        if not marks_run:
            return None, (f"the last migrate of this source, run {run_id}, stored no marks "
                          "(--session-filter, or an older lcm-etl)")
        if counts.get("options_key") != opts_key:
            return None, f"the last migrate of this source, run {run_id}, had another --key-by"
        marks = read_marks(con, spellings, marks_run)
    except (sqlite3.Error, orjson.JSONDecodeError) as exc:
        return None, f"the target's ledger could not be read ({exc})"
    if not marks:
        return None, f"the marks of run {marks_run} are no longer in the target, or not readable as marks"
    return Recorded(marks_run, marks), ""


