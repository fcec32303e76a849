"""The transform runner: SQL files in `transforms/`, run in file-name order against the engine their
header names.

Each file starts with a comment header (step, engine, reads, produces, key, why). Statements are
separated by a `;` at the end of a line. A statement preceded by `-- count: NAME` adds its row count to
the result under NAME. Parameters are `$name` (DuckDB) or `:name` (SQLite); each statement receives
only the ones it mentions.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources

_PARAM = {"duckdb": re.compile(r"\$([a-z_]+)"), "sqlite": re.compile(r":([a-z_]+)\b")}


@dataclass
class Statement:
    sql: str
    count_as: str | None = None


@dataclass
class Step:
    name: str          # file name, e.g. 20_turn_index.sql
    engine: str        # duckdb | sqlite
    phase: str         # plan | write
    header: str
    statements: list[Statement] = field(default_factory=list)


def parse_step(name: str, text: str) -> Step:
    m = re.search(r"^-- engine:\s*(\w+)\s*\((\w+)", text, re.M)
    if not m:
        raise ValueError(f"transforms/{name}: header lacks '-- engine: duckdb|sqlite (plan|write ...)'")
    header = "\n".join(line for line in text.splitlines() if line.startswith("--")).split("\n\n")[0]
    step = Step(name=name, engine=m.group(1), phase=m.group(2), header=header)
    for chunk in re.split(r";[ \t]*\n", text + "\n"):
        lines = chunk.strip().splitlines()
        count = next((re.match(r"--\s*count:\s*(\w+)", ln).group(1) for ln in lines
                      if re.match(r"--\s*count:", ln)), None)
        body = "\n".join(ln for ln in lines if not ln.lstrip().startswith("--")).strip()
        if body:
            step.statements.append(Statement(body, count))
    return step


@functools.lru_cache(maxsize=1)
def _all_steps() -> tuple[Step, ...]:
    folder = resources.files("lcm_etl.transforms")
    return tuple(parse_step(f.name, f.read_text(encoding="utf-8"))
                 for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith(".sql"))


def load_steps(phase: str | None = None) -> list[Step]:
    return [s for s in _all_steps() if phase is None or s.phase == phase]


def step_named(prefix: str) -> Step:
    for s in load_steps():
        if s.name.startswith(prefix):
            return s
    raise KeyError(prefix)


def run_step(step: Step, con, params: dict | None = None) -> dict[str, int]:
    """Execute a step on a DuckDB or sqlite3 connection; return {count_name: rows}."""
    params = params or {}
    counts: dict[str, int] = {}
    for st in step.statements:
        wanted = {k: params[k] for k in set(_PARAM[step.engine].findall(st.sql)) if k in params}
        cur = con.execute(st.sql, wanted) if wanted else con.execute(st.sql)
        if st.count_as:
            if step.engine == "sqlite":
                n = cur.rowcount
            else:  # DuckDB returns the affected row count as a one-row result
                row = cur.fetchone()
                n = row[0] if row else 0
            counts[st.count_as] = counts.get(st.count_as, 0) + max(n, 0)
    return counts
