"""Every `--json` report has the shape its JSON Schema in docs/schemas/ documents: the real CLI, run on the real
fixtures, is validated against the schema, and a schema fails a report with a renamed, missing or unknown field."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from conftest import FIXTURE_DIR, ROOT, copy_fixture, make_native_target, run_cli
from lcm_etl.cli import cli
from lcm_etl.report import SCHEMA_VERSION

SCHEMAS = ROOT / "docs" / "schemas"
STORE = ROOT / "fixtures" / "openclaw-sqlite" / "native" / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
SESSIONS = ROOT / "fixtures" / "sessions"
# the --json reports, by schema; fleet is `migrate --manifest/--discover`, run-report their shared part
REPORTS = ("migrate", "reconcile", "audit", "inspect", "runs", "undo", "fleet", "cache")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _registry() -> Registry:
    """The schemas refer to each other by their $id (e.g. migrate.schema.json -> run-report.schema.json)."""
    resources = [Resource.from_contents(_load(p)) for p in sorted(SCHEMAS.glob("*.schema.json"))]
    return Registry().with_resources((r.id(), r) for r in resources)


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(_load(SCHEMAS / f"{name}.schema.json"), registry=_registry())


def cli_json(*args, code: int = 0) -> dict:
    proc = run_cli(*args, "--json")
    assert proc.returncode == code, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout   # one JSON object
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, list[dict]]:
    """One real report of every kind and variant, from a sequence of CLI runs on copies of the fixtures."""
    tmp = tmp_path_factory.mktemp("schemas")
    src = copy_fixture("multiparent-newest.db", tmp / "src")
    fresh = tmp / "fresh" / "lcm.sqlite"
    native = tmp / "native" / "lcm.sqlite"
    make_native_target(native).close()
    transcripts = tmp / "sessions"
    shutil.copytree(SESSIONS, transcripts, ignore=shutil.ignore_patterns("expected"))
    with open(transcripts / "plain-chat.jsonl", "a", encoding="utf-8") as f:
        f.write("this line is not JSON\n")   # so a file entry lists a skipped line
    out: dict[str, list[dict]] = {name: [] for name in REPORTS}
    out["migrate"] += [cli_json("migrate", "--src", src, "--dest", fresh),           # a new target
                       cli_json("migrate", "--src", src, "--dest", native, "--dry-run"),
                       cli_json("migrate", "--src", src, "--dest", native),          # an existing target
                       cli_json("migrate", "--src", src, "--dest", native),          # the no-op shortcut
                       cli_json("migrate", "--src", src, "--dest", native, "--full")]
    out["audit"] += [cli_json("audit", "--src", src, "--dest", native),
                     cli_json("audit", "--src", src, "--sessions", transcripts, "--dest", native, code=3)]
    out["reconcile"] += [cli_json("reconcile", "--sessions", transcripts, "--src", src, "--dest", native,
                                  "--dry-run"),
                         cli_json("reconcile", "--sessions", transcripts, "--src", src, "--dest", native)]
    undone = out["reconcile"][-1]["run_id"]
    out["undo"] += [cli_json("undo", undone[:8], "--dest", native, "--dry-run"),
                    cli_json("undo", undone, "--dest", native)]
    out["runs"].append(cli_json("runs", "--dest", native))
    out["inspect"] += [cli_json("inspect", "--src", FIXTURE_DIR / name) for name in ("multiparent-newest.db",
                                                                                        "basic-0.1.0.db")]
    out["inspect"].append(cli_json("inspect", "--src", STORE))   # an OpenClaw session store
    manifest = tmp / "manifest.txt"
    manifest.write_text(f"{src} {tmp / 'pair' / 'lcm.sqlite'}\n{tmp / 'missing.db'} {tmp / 'none' / 'lcm.sqlite'}\n")
    out["fleet"].append(cli_json("migrate", "--manifest", manifest, "--jobs", "1", code=2))
    (tmp / "state" / "agent").mkdir(parents=True)
    shutil.copyfile(src, tmp / "state" / "agent" / "lcm.db")
    out["fleet"].append(cli_json("migrate", "--discover", tmp / "state", "--dest-root", tmp / "dest", "--dry-run"))
    out["cache"] += [cli_json("cache"), cli_json("cache", "--prune")]   # the suite's cache folder: kept snapshots
    return out


def test_every_command_with_json_output_has_a_schema_that_docs_cli_md_names():
    with_json = {name for name, cmd in cli.commands.items() if any(p.name == "as_json" for p in cmd.params)}
    assert with_json == set(REPORTS) - {"fleet"}
    documented = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    assert documented == set(REPORTS) | {"run-report", "watch"}   # watch: tests/test_watch.py runs it
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name in documented:
        assert f"schemas/{name}.schema.json" in doc


@pytest.mark.parametrize("name", sorted(set(REPORTS) | {"run-report", "watch"}))
def test_each_schema_is_a_valid_draft_2020_12_schema_stating_the_current_version(name):
    schema = _load(SCHEMAS / f"{name}.schema.json")
    Draft202012Validator.check_schema(schema)
    assert schema["$id"].endswith(f"/{name}.schema.json")
    version = schema["properties"]["schema_version"]["const"] if "schema_version" in schema["properties"] else \
        _load(SCHEMAS / "run-report.schema.json")["properties"]["schema_version"]["const"]
    assert version == SCHEMA_VERSION


@pytest.mark.parametrize("name", REPORTS)
def test_each_commands_json_report_matches_its_schema(reports, name):
    check = validator(name)
    assert reports[name]
    for report in reports[name]:
        assert report["schema_version"] == SCHEMA_VERSION
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(report)]
        assert errors == [], report


def test_the_fixture_runs_reach_the_variants_the_schemas_describe(reports):
    """So the schema test above sees every optional section at least once."""
    assert reports["migrate"][3]["sync_decision"]["how"] == "no-op"
    assert reports["audit"][0]["differences"] == [] and reports["audit"][1]["differences"]
    files = reports["reconcile"][0]["extra"]["files"]
    assert any(f["skipped_lines"] for f in files) and reports["reconcile"][0]["extra"]["files_skipped"]
    assert [r["status"] for r in reports["runs"][0]["runs"]][-2:] == ["undone", "complete"]   # the undo's own row
    assert reports["runs"][0]["ledger_schema_version"] == 1
    pairs = reports["fleet"][0]["pairs"]
    assert [p["ok"] for p in pairs] == [True, False] and pairs[1]["report"] is None
    assert reports["fleet"][1]["manifest"]


def _renamed(report: dict, key: str) -> dict:
    return {(k + "_renamed" if k == key else k): v for k, v in report.items()}


@pytest.mark.parametrize("name", REPORTS)
def test_a_schema_fails_a_report_with_a_renamed_missing_or_unknown_top_level_field(reports, name):
    check = validator(name)
    report = reports[name][0]
    for key in report:
        if key == "manifest":   # fleet: only --discover --dry-run prints it
            continue
        # the CLI adds target_rule to a command's own report; a fleet's pair reports and a watch's syncs, which
        # share the schema, have the target their pair or watch was given
        if key != "target_rule":
            assert not check.is_valid({k: v for k, v in report.items() if k != key}), f"{name}: {key} missing"
        assert not check.is_valid(_renamed(report, key)), f"{name}: {key} renamed"
    assert not check.is_valid({**report, "unexpected": 1})


def test_a_schema_fails_a_renamed_field_inside_nested_sections(reports):
    migrate, reconcile, audit = reports["migrate"][0], reports["reconcile"][0], reports["audit"][1]
    bad = [("migrate", {**migrate, "messages": _renamed(migrate["messages"], "inserted")}),
           ("migrate", {**migrate, "extra": {"shortcutt": "x"}}),
           ("migrate", {**migrate, "sync_decision": {**migrate["sync_decision"], "how": "a guess"}}),
           ("reconcile", {**reconcile, "extra": {**reconcile["extra"], "files": [
               _renamed(reconcile["extra"]["files"][0], "imported")]}}),
           ("audit", {**audit, "differences": [_renamed(audit["differences"][0], "problem")]}),
           ("inspect", {**reports["inspect"][0], "dag": _renamed(reports["inspect"][0]["dag"], "edges")}),
           ("runs", {**reports["runs"][0], "runs": [_renamed(reports["runs"][0]["runs"][0], "status")]}),
           ("fleet", {**reports["fleet"][0], "pairs": [{**reports["fleet"][0]["pairs"][0],
                                                       "report": _renamed(migrate, "run_id")}]})]
    for name, report in bad:
        assert not validator(name).is_valid(report), name
