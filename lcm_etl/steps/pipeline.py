"""The pipeline, declared once: which step files of `transforms/` each command runs, in which order, on which
engine and connection.

Every module that runs steps does so through engine.run_stage with a stage declared here, never a list of its
own; tests/test_pipeline.py runs each command and compares the steps it ran with its pipeline. `lcm-etl steps
[COMMAND]` prints them and transforms/README.md is generated from them (`lcm-etl steps --markdown`).
tests/test_pipeline.py also checks every step's `reads:` header against what the earlier steps of the same
pipeline write and the inputs a pipeline declares here, and its `produces:` header against what it writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from lcm_etl.read.lcmdb.source_tables import SOURCE_TABLES


@dataclass(frozen=True)
class Stage:
    """Steps run one after another on one connection."""
    name: str
    engine: str                 # duckdb | sqlite
    where: str                  # the connection and the databases it has attached
    steps: tuple[str, ...]      # file names in transforms/, without .sql
    when: str | None = None     # the condition under which the stage runs, if not always


@dataclass(frozen=True)
class Pipeline:
    command: str
    path: str                   # which of the command's ways this is ("" when it has one)
    stages: tuple[Stage, ...]
    # what the steps read that no step writes: name -> what provides it (attached databases, Python)
    inputs: dict[str, str] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"{self.command}, {self.path}" if self.path else self.command


_PLAN_DB = "the plan database (DuckDB), the source snapshot read through the src_* views"

TARGET_STATE = Stage("target state", "duckdb", "the plan database, the target attached read-only as tgt "
                     "(an empty Remnic schema when there is none)", ("05_target_state", "07_target_transcript_rows"))
SUPERSEDED = Stage("superseded rows", "sqlite", "a read-only connection to the target file target state reads, the "
                   "source snapshot attached as src with the src_* views; plan.py hands the rows to DuckDB",
                   ("04_superseded_rows",), when="the target holds rows")
TARGET_PROVENANCE = Stage("target provenance", "duckdb", "the plan database, lcm-etl's tables of the target "
                          "attached read-only as prov (empty ones when it has none)", ("06_target_provenance",))
SESSIONS = Stage("sessions", "duckdb", _PLAN_DB, ("10_sessions",))
# cost follows the change (lcm_etl/planning/delta.py): marks of the source and the target, and what a sync re-run re-plans
SOURCE_MARKS = Stage("source marks", "duckdb", _PLAN_DB, ("02_source_global", "03_source_marks"),
                     when="the previous run's snapshot is not kept (lcm_etl/read/snapshot/snapcache.py), or the run plans everything")
TARGET_MARKS = Stage("target marks", "sqlite", "a read-only connection to the target (an empty Remnic schema when "
                     "there is none); plan.py hands the rows to DuckDB", ("04_target_marks",))
SYNC_SCOPE = Stage("sync scope", "duckdb", _PLAN_DB + "; the source views are narrowed to the scope after target state (delta.enter_scope)",
                   ("10_sessions", "08_sync_scope"), when="the previous migrate of this source stored marks")
CARRIED_MARKS = Stage("carried marks", "duckdb", "the plan database, the scope's rows read through the src_* views "
                      "(lcm_etl/read/lcmdb/subset.py)", ("03_source_marks", "09_carried_marks"),
                      when="a sync re-run whose changes were found page by page (lcm_etl/read/snapshot/snapcache.py)")
KEPT_SESSIONS = Stage("kept sessions", "duckdb", _PLAN_DB, ("15_kept_sessions",))
_PLAN_HEAD = ("20_turn_index", "30_message_parts", "40_summaries", "50_parent_collapse", "52_in_place_changes")
PLAN = Stage("plan", "duckdb", _PLAN_DB, (*_PLAN_HEAD, "55_batch_weights", "57_assign_batches", "60_batches"))
# a new target is built in one transaction: one batch
NEW_TARGET_PLAN = Stage("plan, one batch", "duckdb", _PLAN_DB, (*_PLAN_HEAD, "56_single_batch", "60_batches"))
HANDOFF = Stage("handoff", "duckdb", "the plan database, the run's stage file attached as stage", ("65_stage",))

FLATTEN = Stage("flatten parts", "sqlite", "scratch.sqlite, on a connection of its own in a thread "
                "(lcm_etl/load/flatten.py): beside planning for a new target, else before the first write lock",
                ("74_part_rows", "78_flatten_parts"))
_TARGET = ("the target, the stage attached as plan and scratch.sqlite as scratch: one transaction per batch "
           "(a new target: its private building file, one transaction)")
WRITE_MESSAGES = Stage("per batch: messages", "sqlite", _TARGET,
                       ("70_assign_turns", "72_write_messages", "75_index_messages"))
WRITE_REST = Stage("per batch: parts, summaries, changes, boundary events", "sqlite", _TARGET,
                   ("80_write_parts", "85_write_summaries", "86_index_summaries", "87_apply_changes",
                    "88_movable_boundaries", "89_move_boundary", "90_write_boundary"))
PROVENANCE = Stage("provenance", "sqlite", "the target, in the run's last transaction (with the ledger row)",
                   ("94_target_marks_after", "95_write_provenance"))

# a new target from integer source ids (lcm_etl/load/fresh.py): two threads, two files
BUILD = Stage("build parts and message FTS rows", "sqlite", "the new target's private building file, on a "
              "builder thread beside planning (with a session filter: once the stage exists)",
              ("74_part_rows", "76_fresh_parts", "77_fresh_fts"))
_SCRATCH_ROWS = "the planning thread's scratch-rows.sqlite (the target's schema), the stage attached as plan"
FRESH_MESSAGES = Stage("messages", "sqlite", _SCRATCH_ROWS, ("69_new_target_turns", "72_write_messages"))
FRESH_SUMMARIES = Stage("part time fixes, summaries", "sqlite", _SCRATCH_ROWS + ", once the messages are indexed",
                        ("73_part_time_fixes", "85_write_summaries"))
FRESH_FINISH = Stage("copy in and finish", "sqlite", "the building file once the builder is done, "
                     "scratch-rows.sqlite attached as msgs", ("74_part_rows", "82_copy_scratch", "84_part_times",
                                                              "86_index_summaries", "90_write_boundary"))

RECONCILE_TARGET = Stage("target state", "duckdb", "the plan database, the target attached read-only as tgt "
                         "(an empty Remnic schema when there is none)", ("r05_target_state",))
RECONCILE_PLAN = Stage("plan", "duckdb", "the plan database, the run file attached as stage, its identity "
                       "columns viewed (lcm_etl/read/sessions/run_file.py)", ("r20_match", "r25_off_path", "r55_batch_weights",
                                                        "57_assign_batches", "r60_batches"))
RECONCILE_HANDOFF = Stage("handoff", "duckdb", "the plan database, the run file attached as stage", ("r65_stage",))
RECONCILE_WRITE = Stage("per batch", "sqlite", "the target, the stage attached as plan: one transaction per batch "
                        "(a new target: its private building file, one transaction)",
                        ("70_assign_turns", "r72_write_messages", "75_index_messages", "r80_write_parts",
                         "88_movable_boundaries", "89_move_boundary", "90_write_boundary"))
RECONCILE_RECORD = Stage("off-path marks, session marks, offsets", "sqlite", "the target, the stage attached as plan, in the run's last "
                         "transaction (with the ledger row)", ("r90_mark_off_path", "94_target_marks_after",
                                                                         "r95_record_offsets"))
HELD_SESSIONS = replace(SESSIONS, when="with --src (what lcm.db holds counts as held)")

AUDIT_SOURCE = Stage("audit", "duckdb", "the plan database, on private copies of source and target, with "
                     "content hashes computed in SQLite", ("a10_audit_source",))

# what the steps read that no step writes
SOURCE_VIEWS = {t.view: "the source snapshot (source_schema.normalized_views)" for t in SOURCE_TABLES}
TARGET_TABLES = {"lcm_*": "Remnic's and lcm-etl's tables of the target (target.apply_schema; DuckDB reads them as "
                          "tgt.* / prov.*)"}
_SELECTED = {"selected": "the sessions the run covers (plan.py / reconcile_plan.py, from --session-filter)",
             "scope_sessions": "the target sessions a sync re-run reads (08_sync_scope.sql; else plan.py makes it "
                               "empty)"}
_MIGRATE_INPUTS = {**SOURCE_VIEWS, **TARGET_TABLES, **_SELECTED,
                   **{name: "the marks the previous run stored (delta.recorded_tables, from lcm_etl/store/marks.py)"
                      for name in ("recorded_source_marks", "recorded_source_global", "recorded_target_marks")},
                   "page_changed_convs": "the conversations owning a changed page (lcm_etl/read/snapshot/snapcache.py; delta.py "
                                         "makes it, empty when the marks decide)",
                   "superseded_rows": "04_superseded_rows.sql's rows (plan.TargetReader.state; empty for a new target)",
                   "content_marks": "per conversation, a digest of its messages' content computed by SQLite "
                                    "(delta.content_marks)"}
_RECONCILE_INPUTS = {
    **SOURCE_VIEWS, **TARGET_TABLES, **_SELECTED,
    "jsonl_messages": "the transcripts' active-path messages (the run file: lcm_etl/read/sessions/run_file.py)",
    "jsonl_content": "their content and metadata (the run file)",
    "jsonl_parts": "their content blocks (the run file)",
    "jsonl_abandoned": "entries off the active path (the run file)",
    "held_lcm": "what lcm.db holds of the transcripts' sessions (reconcile_plan.py; empty without --src)",
    "jsonl_appended": "sessions whose files were read from recorded offsets (reconcile_plan.py)",
    "jsonl_sessions": "the transcripts' sessions (reconcile_plan.py)",
    "run_sessions": "every session of which the run read a line (read whole, or past its record), new messages or "
                    "none, within --session-filter (reconcile_plan.py)",
    "transcripts": "one row per transcript read: how, why, and how far (the run file)",
}
_FLATTEN_OWNERS = {"flatten_owners": "the messages whose parts are flattened (flatten.PLANNED_OWNERS or, "
                                     "for a new target, flatten.ALL_OWNERS)"}

MIGRATE_EXISTING = Pipeline(
    "migrate", "an existing target",
    (SOURCE_MARKS, TARGET_MARKS, TARGET_PROVENANCE, SYNC_SCOPE, SUPERSEDED, TARGET_STATE, CARRIED_MARKS, SESSIONS,
     KEPT_SESSIONS, PLAN, HANDOFF,
     FLATTEN, WRITE_MESSAGES, WRITE_REST, PROVENANCE),
    {**_MIGRATE_INPUTS, **_FLATTEN_OWNERS})
MIGRATE_NEW_INTEGER_IDS = Pipeline(
    "migrate", "a new target from integer source ids (every lossless-claw release)",
    (SOURCE_MARKS, TARGET_MARKS, TARGET_PROVENANCE, TARGET_STATE, SESSIONS, KEPT_SESSIONS, BUILD, NEW_TARGET_PLAN,
     HANDOFF, FRESH_MESSAGES, FRESH_SUMMARIES, FRESH_FINISH, PROVENANCE),
    {**_MIGRATE_INPUTS,
     "fresh_owners": "the messages the new target receives (fresh.SOURCE_OWNERS or, with a session filter, "
                     "fresh.PLANNED_OWNERS)",
     "msgs.*": "scratch-rows.sqlite: what the planning thread wrote (72, 73, 85)"})
MIGRATE_NEW_TEXT_IDS = Pipeline(
    "migrate", "a new target from TEXT source ids",
    (SOURCE_MARKS, TARGET_MARKS, TARGET_PROVENANCE, TARGET_STATE, SESSIONS, KEPT_SESSIONS, FLATTEN, NEW_TARGET_PLAN,
     HANDOFF, WRITE_MESSAGES, WRITE_REST, PROVENANCE),
    {**_MIGRATE_INPUTS, **_FLATTEN_OWNERS})
RECONCILE = Pipeline(
    "reconcile", "",
    (HELD_SESSIONS, RECONCILE_TARGET, RECONCILE_PLAN, RECONCILE_HANDOFF, RECONCILE_WRITE, RECONCILE_RECORD),
    _RECONCILE_INPUTS)
AUDIT = Pipeline(
    "audit", "a lossless-claw source (--src)",
    (TARGET_MARKS, TARGET_PROVENANCE, SUPERSEDED, TARGET_STATE, SESSIONS, KEPT_SESSIONS, PLAN, AUDIT_SOURCE),
    {**_MIGRATE_INPUTS,
     **{name: "the target's rows and content hashes (audit.py)" for name in (
         "tgt_detail", "tgt_part_keys", "tgt_summary_detail", "tgt_provenance_summaries", "tgt_skipped",
         "src_message_hashes", "src_summary_hashes")}})
AUDIT_TRANSCRIPTS = Pipeline(
    "audit", "transcripts (--sessions): reconcile's plan",
    (HELD_SESSIONS, RECONCILE_TARGET, RECONCILE_PLAN),
    _RECONCILE_INPUTS)
INSPECT = Pipeline("inspect", "", (SESSIONS,), SOURCE_VIEWS)

PIPELINES = (MIGRATE_EXISTING, MIGRATE_NEW_INTEGER_IDS, MIGRATE_NEW_TEXT_IDS, RECONCILE, AUDIT, AUDIT_TRANSCRIPTS,
             INSPECT)
COMMANDS = ("migrate", "reconcile", "audit", "inspect")


def pipelines_of(command: str | None) -> list[Pipeline]:
    return [p for p in PIPELINES if command in (None, p.command)]
