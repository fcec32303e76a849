"""The package's modules import one another without circles (issue 11): a circle means two modules that can
only be understood, and changed, together."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lcm_etl"


def _name(path: Path) -> str:
    return ".".join(("lcm_etl", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def _imports() -> dict[str, set[str]]:
    """Module (dotted) -> the package's modules it imports (at any level of the file: a function's import is
    one too). The package imports absolutely: `from lcm_etl.read.lcmdb import sources` names lcm_etl.read.snapshot.sqlite_copy."""
    files = {_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lcm_etl"):
                found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module] = {m for m in found if m in files and m != module and not files[m].name == "__init__.py"}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            found = visit(imported, path + [module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    circle = _circle(_imports())
    assert circle is None, " -> ".join(circle)


def test_the_circle_finder_finds_a_circle_of_three():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_the_package_imports_relatively_nowhere():
    """One spelling of the package's imports, absolute, so a module moved between packages is found by grep."""
    relative = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.ImportFrom) and node.level]
    assert relative == []


# what each package may import: data flows read -> planning -> load; planning reads the target store and
# loading writes it; the steps (the SQL of transforms/ and its engine) need none of them but the source-table
# registry (the pipeline's declared inputs are its views: lcm_etl/read/lcmdb/source_tables.py), and planning, loading
# and the commands run them; the commands drive all of them. The package's top-level modules are layers too:
# the command line ("cli": cli, __main__, docgen) sits over everything, and every other top-level module
# ("base": errors, duck, sqlite_runtime...) under everything, importing only its own layer.
# read/ is layered inside too, each sub-package over the ones before it: read/'s own modules ("read": findings)
# under all of them, then the copy of a SQLite file and the kept snapshot, lcm.db, a transcript parsed, where
# OpenClaw keeps things, and what reconcile reads of --sessions over them all
READ = ["read", "read.snapshot", "read.lcmdb", "read.transcript", "read.openclaw", "read.sessions"]
LAYERS = {"base": set(), "steps": {"read"}, "store": {"read"}, "planning": {"read", "store", "steps"},
          "sync": {"read", "store", "steps", "planning"},
          "load": {"read", "store", "steps", "planning", "sync"},
          "commands": {"read", "store", "steps", "planning", "sync", "load"},
          "cli": {"read", "store", "steps", "planning", "sync", "load", "commands"}}
LAYERS = {name: {r for r in READ if "read" in allowed} | allowed - {"read"} for name, allowed in LAYERS.items()}
LAYERS |= {name: set(READ[:i]) for i, name in enumerate(READ)}
COMMAND_LINE = {"lcm_etl.cli", "lcm_etl.__main__", "lcm_etl.docgen"}


def _layer(module: str) -> str:
    """The layer of a module of the package: its subpackage (read/'s own sub-package: read.snapshot), else cli or
    base (lcm_etl.cli, lcm_etl.duck)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "read" and (PACKAGE / "read" / parts[2]).is_dir():
        return f"read.{parts[2]}"
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():   # a subpackage's module, or its __init__
        return parts[1]
    return "cli" if module in COMMAND_LINE else "base"


def _layering_wrongs(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a layer to one it may not import (base is below every layer)."""
    return sorted(f"{m} imports {i}" for m, found in graph.items() for i in found
                  if _layer(i) != _layer(m) and _layer(i) != "base" and _layer(i) not in LAYERS[_layer(m)])


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph of the layers: a layer imports another when one of its modules imports one of the other's."""
    out: dict[str, set[str]] = {_layer(m): set() for m in graph}
    for m, found in graph.items():
        out[_layer(m)] |= {_layer(i) for i in found} - {_layer(m)}
    return out


def test_each_package_imports_only_the_packages_before_it():
    assert _layering_wrongs(_imports()) == []


def test_no_package_imports_one_that_imports_it_back_read_s_sub_packages_each_one():
    circle = _circle(_packages(_imports()))
    assert circle is None, " -> ".join(circle)


def test_read_s_sub_packages_are_layers_of_their_own():
    graph = _imports()
    assert {_layer(m) for m in graph if m.startswith("lcm_etl.read")} == set(READ)
    assert _layer("lcm_etl.read.findings") == "read" and _layer("lcm_etl.read.sessions.run_file") == "read.sessions"


def test_an_import_running_back_up_inside_read_is_found():
    """The arrow the generic copy's place made (lcm.db's package holding it, the kept snapshot importing it)."""
    graph = {"lcm_etl.read.snapshot.snapcache": {"lcm_etl.read.lcmdb.source_tables"},
             "lcm_etl.read.lcmdb.source_tables": set()}
    assert _layering_wrongs(graph) == ["lcm_etl.read.snapshot.snapcache imports lcm_etl.read.lcmdb.source_tables"]
    graph["lcm_etl.read.lcmdb.source_tables"] = {"lcm_etl.read.snapshot.snapcache"}
    assert _circle(_packages(graph)) == ["read.lcmdb", "read.snapshot", "read.lcmdb"]


def test_every_module_of_the_package_is_in_a_known_layer():
    assert sorted(m for m in _imports() if _layer(m) not in LAYERS) == []


def test_a_top_level_module_importing_a_package_is_found():
    """The arrow that ran back up (duck importing the source copy) is one the layering finds."""
    graph = {"lcm_etl.duck": {"lcm_etl.read.snapshot.sqlite_copy", "lcm_etl.errors"},
             "lcm_etl.read.snapshot.sqlite_copy": {"lcm_etl.duck"},
             "lcm_etl.errors": set(), "lcm_etl.cli": {"lcm_etl.commands.migrate"}, "lcm_etl.commands.migrate": set()}
    assert _layering_wrongs(graph) == ["lcm_etl.duck imports lcm_etl.read.snapshot.sqlite_copy"]


# a command's module is imported by no other command: what two commands share lives in the packages below them.
# fleet is the exception by design (it runs migrate and reconcile, one pair at a time), and a command split in
# two imports its own part
COMMANDS_RUN_BY = {"lcm_etl.commands.fleet": {"lcm_etl.commands.migrate", "lcm_etl.commands.reconcile"},
                   "lcm_etl.commands.fleet_dask": {"lcm_etl.commands.fleet", "lcm_etl.commands.migrate"},
                   "lcm_etl.commands.inspect": {"lcm_etl.commands.inspect_store"}}


def test_no_command_imports_another_command_but_fleet_which_runs_them():
    wrong = sorted(f"{m} imports {i}" for m, found in _imports().items() if m.startswith("lcm_etl.commands.")
                   for i in found if i.startswith("lcm_etl.commands.") and i not in COMMANDS_RUN_BY.get(m, set()))
    assert wrong == []


# click is the command line's: the commands return reports (report.emit prints them) and raise the project's
# errors (errors.error_line words them), so a command runs the same from the CLI, a watch, a fleet or a test
CLICK_LAYER = {"lcm_etl.cli", "lcm_etl.cli_conventions", "lcm_etl.options", "lcm_etl.docgen"}


def test_only_the_command_line_imports_click():
    users = sorted(_name(p) for p in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
                   if isinstance(node, (ast.Import, ast.ImportFrom))
                   and "click" in ([a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import)
                                   else [(node.module or "").split(".")[0]]))
    assert sorted(set(users) - CLICK_LAYER) == []


def test_importing_duck_and_the_commands_loads_no_click():
    """click is the command line's: what runs beneath it (duck, the commands a fleet or a watch runs) has its options'
    values from lcm_etl/run_options.py."""
    code = ("import sys, lcm_etl.duck, lcm_etl.commands.migrate, lcm_etl.commands.reconcile, lcm_etl.commands.audit; "
            "print('click' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_importing_the_cli_and_migrate_leaves_duckdb_to_the_thread_that_warms_it():
    """migrate reads the source first; DuckDB (0.1 s of imports) is imported meanwhile by duck.Warmup."""
    code = ("import sys, lcm_etl.cli, lcm_etl.commands.migrate, lcm_etl.duck; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'duckdb' or m in "
            "('lcm_etl.planning.plan', 'lcm_etl.planning.delta')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_design_module_map_names_every_module_of_the_package():
    """docs/design.md's map (from "Modules, one concern each" to the next section) names each module, in
    backquotes, so a new module is placed in it when it is made."""
    design = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    start = design.index("Modules, one concern each")
    module_map = design[start:design.index("\n## ", start)]
    unnamed = sorted(m for m in _imports() if m.count(".") and f"`{m.rsplit('.', 1)[1]}`" not in module_map
                     and not (PACKAGE / m.split(".", 1)[1].replace(".", "/")).is_dir())
    assert unnamed == []
