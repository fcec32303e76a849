"""How a `migrate` of one lcm.db into one target decides what to read and re-plan: the whole decision.

It is made in three steps, each as soon as what it needs has been read:

1. `before_read` (no source read yet): the no-op shortcut (lcm_etl/sync/shortcut.py).
2. `after_snapshot` (the snapshot taken, whole, or from the kept one by its changed pages: lcm_etl/read/snapshot/snapcache.py):
   whose marks the target holds for this source (lcm_etl/store/marks.py, stored by its last complete migrate over the
   whole source with the same options), and whether the changed pages since that run name the changed
   conversations (`pages compared`) or the source's marks must be computed and compared (`marks`). Without
   trusted marks: a `full plan`, saying why.
3. `mark_source`, then `narrow` (DuckDB has the marks and the target's provenance): the source's marks computed
   unless the pages proved what changed, and the sessions to re-plan, closed over the ones they share
   (08_sync_scope.sql), or a full plan when the source's schema or its rows of no conversation changed (the
   global mark).

Every cause of a full plan is said in `Decision.why`. Nothing here writes; planning never calls back here.
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import dataclass
from pathlib import Path

from lcm_etl import sqlite_runtime
from lcm_etl.store import ledger, sync_state
from lcm_etl.store.marks import Marks, read as read_marks
from lcm_etl.sync import shortcut
from lcm_etl.sync.decision import FULL, MARKS, NO_OP, PAGES, Decision
from lcm_etl.sync.identity import SourceIdentity
from lcm_etl.file_identity import real_path
from lcm_etl.read.snapshot.wal import file_state


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


class LcmDbSync:
    """The decision for one run, filled in by the three steps; `decision` is what the report says."""

    def __init__(self, asked: Asked):
        self.asked = asked
        self.path = real_path(asked.src)
        # the source's files before anything is read: the shortcut's proof, and the kept snapshot's (snapcache.py);
        # of the file a symlink names, whose -wal is beside it, not beside the link
        self.files = file_state(Path(self.path))
        # what this run leaves for the next run's decision (store/sync_state.py), as far as it is known before the
        # source is read; the shortcut compares it with the last run's
        self.state = sync_state.SyncState(shortcut.source_fingerprint(self.path, self.files), asked.key_by,
                                          asked.session_filter, totals={}, marks_run=None)
        self.identity: SourceIdentity | None = None
        self.rec: Recorded | None = None
        self.proved_conversations: set[str] | None = None   # the changed pages' owners (pages compared)
        self.decision = Decision(FULL, "a new target" if not asked.existed else "--full" if asked.full else
                                 "--session-filter plans the named sessions whole" if asked.session_filter else "")

    # 1 -----------------------------------------------------------------------------------------------------
    def before_read(self) -> shortcut.Previous | None:
        """The run that makes this one a no-op, else None."""
        a = self.asked
        if not a.existed or a.full:
            return None
        previous = shortcut.previous_run(a.target, self.path, self.state, a.dry_run)
        if previous is not None:
            self.decision = Decision(NO_OP, f"source unchanged and target untouched since run {previous.run_id}",
                                     since_run=previous.run_id)
        return previous

    @property
    def uses_marks(self) -> bool:
        a = self.asked
        return a.existed and not (a.full or a.session_filter)

    # 2 -----------------------------------------------------------------------------------------------------
    def after_snapshot(self, identity: SourceIdentity, target_db: Path | None, changes, cache_note: str | None,
                       cache_on: bool) -> None:
        """`changes`: the kept snapshot's changed pages since the run that sealed it (snapcache.Changes), None when
        the source was copied whole. `target_db`: the target as planning reads it (a dry run's copy)."""
        self.identity = identity
        cache_note = f"the kept snapshot was dropped: {cache_note}" if cache_note else None
        if not self.uses_marks:
            self.decision.cache = cache_note
            return
        with _ledger(target_db) as con:
            self.rec, why = _recorded(con, identity, self.asked.key_by) if con is not None else \
                (None, "no earlier migrate of this source into the target")
        if changes is not None and (self.rec is None or changes.since != self.rec.run_id):
            if self.rec is not None:
                cache_note = cache_note or f"the kept snapshot is of run {changes.since}"
            changes = None   # the pages changed since another run's snapshot prove nothing of the marks trusted
        if changes is not None and changes.owners is None:
            # changed pages it cannot place (a value rewritten in its overflow pages): what changed is not proved
            # by the pages, and the marks digest only what the plan reads
            self.rec, why = None, f"the kept snapshot's {changes.pages} changed pages: {changes.why}"
        if self.rec is None:
            self.decision = Decision(FULL, why, cache=cache_note)
        elif changes is not None:
            self.proved_conversations = changes.owners
            way = f" ({changes.way})" if changes.way else ""
            self.decision = Decision(PAGES, f"{changes.pages} pages changed since the snapshot kept from run "
                                     f"{self.rec.run_id}{way}", since_run=self.rec.run_id, pages_changed=changes.pages,
                                     cache=cache_note)
        else:
            kept = cache_note or ("no snapshot kept" if cache_on else "no snapshot kept (the cache is off)")
            self.decision = Decision(MARKS, f"the source's marks compared with those of run {self.rec.run_id} "
                                     f"({kept})", since_run=self.rec.run_id)

    # 3 -----------------------------------------------------------------------------------------------------
    def mark_source(self, con, schema, snapshot: Path) -> None:
        """The source's marks (02, 03) over the whole source, stored by every run that plans it whole; not when the
        changed pages proved what changed: then the scope's are computed and the others carried (09)."""
        from lcm_etl.planning import delta   # DuckDB's modules: loaded by the Warmup thread (migrate.py)

        if self.proved_conversations is None:
            delta.mark_source(con, schema, snapshot)

    def narrow(self, con, params: dict, schema, snapshot: Path, scratch: Path):
        """The sessions this run re-plans (marks and provenance read into DuckDB): a delta.Scope with its source
        rows copied, or None for a full plan (the decision says why). With pages proved, the changed
        conversations are the pages' owners; else the source's marks (03, `mark_source`) are compared with the
        recorded ones."""
        from lcm_etl import duck   # DuckDB's modules: loaded by the Warmup thread (migrate.py)
        from lcm_etl.planning import delta
        from lcm_etl.steps import pipeline
        from lcm_etl.steps.engine import run_stage

        rec, d, proved = self.rec, self.decision, self.proved_conversations
        if rec is None:
            return None
        delta.recorded_tables(con, rec.marks)
        was = rec.marks.source
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
        con.execute("CREATE OR REPLACE TABLE page_changed_convs AS SELECT unnest(from_json($keys, '[\"VARCHAR\"]')) "
                    "AS conv_key", {"keys": duck.strings(sorted(proved or []))})
        run_stage(pipeline.SYNC_SCOPE, con, params)
        keys = [r[0] for r in con.execute("SELECT conv_key FROM scope_convs ORDER BY 1").fetchall()]
        # sessions of this source only: a session of another source in the target (another database once at
        # this path) is re-read with the scope but is not one of this source's
        sessions, changed, total = duck.one(
            con, "SELECT (SELECT count(*) FROM scope_sessions WHERE session_id IN (SELECT session_id FROM sessions)), "
                 "(SELECT count(*) FROM changed_convs), (SELECT count(DISTINCT session_id) FROM sessions)")
        d.replanned(sessions, total, changed)
        return delta.Scope.copied(rec.run_id, snapshot, scratch / "scope-source.sqlite", keys, proved is not None)


class _ledger:
    """The target's ledger, read-only, or None when there is none to read."""

    def __init__(self, target_db: Path | None):
        self.target_db = target_db
        self.con: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection | None:
        if self.target_db is None or not Path(self.target_db).exists():
            return None
        try:
            con = self.con = sqlite_runtime.connect(self.target_db)
            # another layout of lcm-etl's tables is refused here (BadInput), the connection closed first
            return con if ledger.schema_version(con) else None
        except sqlite3.Error:
            return None
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc) -> None:
        if self.con is not None:
            self.con.close()


_STATUS = {"failed": "failed", "killed": "was killed", "running": "is still running or died",
           "undone": "was undone"}


def _recorded(con: sqlite3.Connection, identity: SourceIdentity, key_by: str) -> tuple[Recorded | None, str]:
    """The marks of the last migrate of this source into the target, if they can be trusted: that run completed,
    planned the whole source with the same --key-by and stored marks; else why not."""
    try:
        last = ledger.last_migrate(con, identity.path, identity.key)
        if last is None:
            return None, "no earlier migrate of this source into the target"
        run_id, status, _ = last
        if status != "complete":
            return None, f"the last migrate of this source, run {run_id}, {_STATUS.get(status, status)}"
        state = sync_state.read(con, run_id)
        if state is None or not state.marks_run:
            return None, f"the last migrate of this source, run {run_id}, stored no marks (--session-filter)"
        if state.key_by != key_by:
            return None, f"the last migrate of this source, run {run_id}, had another --key-by"
        marks = read_marks(con, identity.key, state.marks_run)
    except sqlite3.Error as exc:
        return None, f"the target's ledger could not be read ({exc})"
    if not marks:
        return None, f"the marks of run {state.marks_run} are no longer in the target"
    return Recorded(state.marks_run, marks), ""
