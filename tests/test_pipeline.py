"""The pipeline declared once (lcm_etl/steps/pipeline.py): the runners run exactly it, the step headers agree with
it, `lcm-etl steps` prints it and transforms/README.md is made from it (issue 11, item 1).

The data-flow rule the headers are held to: walking a pipeline's stages in order, every name a step's
`reads:` header lists is either written by an earlier step of the same pipeline (a table or view it creates,
inserts into or updates, `stage.X` and `scratch.X` written there being read back as `plan.X`, `msgs.X`...:
qualified names compare by table name) or one of the inputs the pipeline declares (the src_* views, the
target's tables, the tables Python makes). A step that reads what only a later step or another pipeline
writes fails. And a step's `produces:` header names exactly what it writes: a table it creates, inserts into
or updates that the header leaves out fails, and so does a table the header names that it does not write.
"""
from __future__ import annotations

import re
import sqlite3
import threading
from contextlib import closing
from fnmatch import fnmatch

import pytest

from conftest import ROOT, copy_fixture, run_cli
from lcm_etl.commands import audit, inspect, migrate, reconcile
from lcm_etl.steps import engine, pipeline
from lcm_etl.store.target import apply_schema
from test_sources import PARTS_WITH_ORDINAL, peer_source

TRANSCRIPT = ROOT / "fixtures" / "sessions" / "plain-chat.jsonl"


def target_tables() -> set[str]:
    con = sqlite3.connect(":memory:")
    apply_schema(con)
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def unresolved_reads(p: pipeline.Pipeline) -> list[str]:
    tables = target_tables()
    written: set[str] = set()
    problems = []
    for stage in p.stages:
        for name in stage.steps:
            step = engine.step(name)
            for read in step.reads:
                table = read if read.endswith(".*") else read.split(".")[-1]
                if table in written or read in p.inputs or table in p.inputs:
                    continue
                if table in tables and any(fnmatch(table, pattern) for pattern in p.inputs):
                    continue
                problems.append(f"{p.title}: {name} reads {read}, which nothing before it writes")
            written |= {w.split(".")[-1] for w in step.writes}
    return problems


@pytest.mark.parametrize("p", pipeline.PIPELINES, ids=lambda p: p.title)
def test_every_name_a_step_reads_is_written_earlier_in_its_pipeline_or_is_a_declared_input(p):
    assert unresolved_reads(p) == []


def test_every_name_a_steps_reads_header_lists_is_read_by_its_sql():
    """A header naming a table its statements do not read (the scope a step once filtered on) misleads its reader."""
    unread = [f"{name} reads {read}" for name, step in engine.all_steps().items() for read in step.reads
              if not read.endswith(".*") and not re.search(rf"\b{read.split('.')[-1]}\b",
                                                           "\n".join(st.sql for st in step.statements))]
    assert unread == []


def test_a_step_reading_what_only_a_later_step_writes_is_caught():
    backwards = pipeline.Pipeline("migrate", "backwards", (pipeline.HANDOFF, pipeline.PLAN), pipeline.SOURCE_VIEWS)
    assert "migrate, backwards: 65_stage reads write_messages, which nothing before it writes" in \
        unresolved_reads(backwards)


# a name in a produces: header: outside parentheses (remarks), not part of a file name (15_kept_sessions.sql) or
# a path; `x.y` is a table in an attached database (stage.plan_messages) or a column of table x
_NAMED = re.compile(r"(?<![\w./])([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)(?![\w/]|\.sql)")


def _outside_parentheses(text: str) -> str:
    while (shorter := re.sub(r"\([^()]*\)", "", text)) != text:
        text = shorter
    return text


def unmatched_produces(step: engine.Step, tables: set[str]) -> list[str]:
    """What a step writes that its `produces:` header does not name, and the tables it names that it does not
    write. A name counts as declared when it is a table some step writes or the target holds (`tables`): the
    header's prose around the names ("rows", "— one digest per conversation") is not mistaken for one."""
    named = set(_NAMED.findall(_outside_parentheses(step.header_field("produces"))))

    def means(name: str, table: str) -> bool:
        return name == table or name.split(".")[0] == table or name == table.split(".")[-1]

    declared = {n for n in named if n in tables or n.split(".")[0] in tables or n.split(".")[-1] in tables}
    return ([f"{step.name} writes {w}, which its produces: header does not name" for w in step.writes
             if not any(means(n, w) for n in named)]
            + [f"{step.name} declares {n} in produces:, which it does not write" for n in sorted(declared)
               if not any(means(n, w) for w in step.writes)])


def all_tables() -> set[str]:
    return target_tables() | {w for st in engine.all_steps().values() for w in st.writes}


@pytest.mark.parametrize("name", sorted(engine.all_steps()))
def test_a_steps_produces_header_names_exactly_the_tables_it_writes(name):
    assert unmatched_produces(engine.step(name), all_tables()) == []


def test_a_produces_header_naming_a_table_not_written_or_missing_one_written_is_caught():
    wrong = engine.parse_step("99_wrong", "-- engine: duckdb\n-- produces: sessions(conversation_id) — one per "
                                          "conversation, and its batch_input rows\n"
                                          "CREATE TABLE sessions AS SELECT 1 AS conversation_id;\n"
                                          "CREATE TABLE helper AS SELECT 1 AS x;\n")
    assert unmatched_produces(wrong, all_tables()) == [
        "99_wrong writes helper, which its produces: header does not name",
        "99_wrong declares batch_input in produces:, which it does not write"]


def test_every_step_file_is_in_a_pipeline_and_every_declared_step_has_a_file():
    declared = {name for p in pipeline.PIPELINES for stage in p.stages for name in stage.steps}
    assert declared == set(engine.all_steps())


def test_every_stage_runs_on_the_engine_its_steps_headers_name():
    for p in pipeline.PIPELINES:
        for stage in p.stages:
            assert {engine.step(n).engine for n in stage.steps} == {stage.engine}, (p.title, stage.name)


def test_transforms_readme_is_what_lcm_etl_steps_markdown_prints():
    proc = run_cli("steps", "--markdown")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (ROOT / "transforms" / "README.md").read_text(encoding="utf-8") == proc.stdout, \
        "transforms/README.md drifted from lcm_etl/steps/pipeline.py: run `python docs/generate.py`"


def numbered_steps(text: str) -> list[str]:
    return [line.split()[1].removesuffix(".sql") for line in text.splitlines()
            if line.startswith("    ") and line.split()[0].rstrip(".").isdigit()]


def test_lcm_etl_steps_prints_a_commands_steps_in_the_declared_order():
    proc = run_cli("steps", "reconcile")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[0] == "reconcile:"
    assert numbered_steps(proc.stdout) == ["10_sessions", "r05_target_state", "r20_match", "r25_off_path",
                                           "r55_batch_weights", "57_assign_batches", "r60_batches", "r65_stage",
                                           "70_assign_turns", "r72_write_messages", "75_index_messages",
                                           "r80_write_parts", "88_movable_boundaries", "89_move_boundary", "90_write_boundary",
                                           "r90_mark_off_path", "94_target_marks_after", "r95_record_offsets"]
    assert "  sessions — duckdb — " in proc.stdout and "[with --src" in proc.stdout


def test_lcm_etl_steps_without_a_command_prints_every_pipeline():
    proc = run_cli("steps")
    assert proc.returncode == 0
    titles = [line[:-1] for line in proc.stdout.splitlines() if line and not line.startswith(" ")]
    assert titles == [p.title for p in pipeline.PIPELINES]


def test_lcm_etl_steps_sql_prints_each_steps_sql_under_its_name():
    proc = run_cli("steps", "inspect", "--sql")
    assert proc.returncode == 0
    sql = (ROOT / "transforms" / "10_sessions.sql").read_text(encoding="utf-8")
    assert "\n".join(line.strip() for line in proc.stdout.splitlines()[3:]) == \
        "\n".join(line.strip() for line in sql.rstrip().splitlines()) + "\n".rstrip()


def test_lcm_etl_steps_refuses_an_unknown_command_with_one_line():
    proc = run_cli("steps", "frobnicate")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("lcm-etl: error: Invalid value for '[COMMAND]': 'frobnicate' is not one of 'migrate', "
                           "'reconcile', 'audit', 'inspect'. (see `lcm-etl steps --help`)\n")


def test_lcm_etl_steps_markdown_with_a_command_is_a_usage_error():
    proc = run_cli("steps", "migrate", "--markdown")
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", "lcm-etl: error: --markdown prints every command's steps as transforms/README.md: give it alone\n")


# --- the runners run what is declared ---------------------------------------------------------------------

SIDE_THREADS = {"lcm-etl-flatten": pipeline.FLATTEN, "lcm-etl-build": pipeline.BUILD}


@pytest.fixture
def ran(monkeypatch):
    """Every step run, with the thread that ran it."""
    log: list[tuple[str, str]] = []
    real = engine.run_step

    def recording(step, con, params=None):
        log.append((threading.current_thread().name, step.name))
        return real(step, con, params)

    monkeypatch.setattr(engine, "run_step", recording)
    return log


def assert_ran(log, p: pipeline.Pipeline, skip=()) -> None:
    """The main thread ran the declared stages' steps in order; side threads ran theirs (one batch)."""
    stages = [s for s in p.stages if s not in skip]
    main = [n for s in stages if s not in SIDE_THREADS.values() for n in s.steps]
    assert [name for thread, name in log if thread not in SIDE_THREADS] == main
    for thread, stage in SIDE_THREADS.items():
        expected = list(stage.steps) if stage in stages else []
        assert [name for t, name in log if t == thread] == expected


def test_migrate_runs_the_declared_steps_of_each_of_its_paths(tmp_path, ran):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    migrate.migrate(migrate.MigrateOptions(src=src, target=dest))
    assert_ran(ran, pipeline.MIGRATE_NEW_INTEGER_IDS)
    ran.clear()
    migrate.migrate(migrate.MigrateOptions(src=src, target=dest, full=True))   # no new rows: no batch
    # --full: no sync scope (lcm_etl/planning/delta.py)
    assert_ran(ran, pipeline.MIGRATE_EXISTING, skip=(pipeline.SYNC_SCOPE, pipeline.CARRIED_MARKS,
                                                     pipeline.WRITE_MESSAGES, pipeline.WRITE_REST))
    ran.clear()
    peer = peer_source(tmp_path, PARTS_WITH_ORDINAL)
    migrate.migrate(migrate.MigrateOptions(src=peer, target=tmp_path / "peer" / "lcm.sqlite"))
    assert_ran(ran, pipeline.MIGRATE_NEW_TEXT_IDS)


def test_migrate_into_an_existing_target_with_new_rows_runs_its_batch_stages(tmp_path, ran):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    first = inspect.describe(src).sessions[0]["session_id"]
    migrate.migrate(migrate.MigrateOptions(src=src, target=dest, session_filter=[first]))
    ran.clear()
    migrate.migrate(migrate.MigrateOptions(src=src, target=dest))
    # the filtered run stored no marks: no sync scope
    assert_ran(ran, pipeline.MIGRATE_EXISTING, skip=(pipeline.SYNC_SCOPE, pipeline.CARRIED_MARKS))


def test_a_sync_re_run_with_the_kept_snapshot_marks_only_the_scope(tmp_path, ran):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    migrate.migrate(migrate.MigrateOptions(src=src, target=dest))
    with closing(sqlite3.connect(src)) as con, con:
        con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                    "SELECT conversation_id, max(seq) + 1, 'user', 'one more', 2, '2026-11-23 09:00:00' "
                    "FROM messages WHERE conversation_id = (SELECT min(conversation_id) FROM conversations)")
    ran.clear()
    migrate.migrate(migrate.MigrateOptions(src=src, target=dest))
    # the changed pages name the conversation: no marks over the whole source (03 runs over the scope only)
    assert_ran(ran, pipeline.MIGRATE_EXISTING, skip=(pipeline.SOURCE_MARKS,))


def test_reconcile_audit_and_inspect_run_their_declared_steps(tmp_path, ran):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    reconcile.reconcile(reconcile.ReconcileOptions(sessions=[str(TRANSCRIPT)], target=dest, src=src))
    assert_ran(ran, pipeline.RECONCILE)
    ran.clear()
    audit.audit(audit.AuditOptions(target=dest, src=src, sessions=[str(TRANSCRIPT)]))
    assert [n for _, n in ran] == [n for p in (pipeline.AUDIT, pipeline.AUDIT_TRANSCRIPTS)
                                   for s in p.stages for n in s.steps]
    ran.clear()
    inspect.describe(src)
    assert_ran(ran, pipeline.INSPECT)

