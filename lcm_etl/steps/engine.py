"""The transform runner: SQL files in `transforms/`, run in the order lcm_etl/steps/pipeline.py declares, against
the engine their header names.

Each file starts with a comment header (step, engine, reads, produces, key, why; tests/test_pipeline.py holds
`reads:` to what earlier steps write and `produces:` to what this one writes). Statements are
separated by a `;` at the end of a line. A statement preceded by `-- count: NAME` adds its row count to
the result under NAME. Parameters are `$name` (DuckDB) or `:name` (SQLite); each statement receives
only the ones it mentions.
"""
from __future__ import annotations

import functools
import logging
import re
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Callable

from lcm_etl.steps.pipeline import Stage

_log = logging.getLogger(__name__)   # silent unless -v/-vv (cli._log_to_stderr)
_PARAM = {"duckdb": re.compile(r"\$([a-z_]+)"), "sqlite": re.compile(r":([a-z_]+)\b")}
_FIELD = re.compile(r"--\s?(step|engine|reads|produces|key|why|count):\s?(.*)")
# the first name of each item of a reads: line, e.g. `plan.plan_messages (message_id, ...)`, `msgs.*`
_NAME = re.compile(r"([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+|\.\*)?)(?![\w*])")
# what a statement writes: a table or view it creates, or rows it inserts or changes
_WRITES = re.compile(r"\b(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?(?:TABLE|VIEW)\s+"
                     r"(?:IF\s+NOT\s+EXISTS\s+)?|INSERT\s+(?:OR\s+\w+\s+)?INTO\s+|UPDATE\s+)([\w.]+)", re.I)


@dataclass
class Statement:
    sql: str
    count_as: str | None = None


@dataclass
class Step:
    name: str          # file name without .sql, e.g. 20_turn_index
    engine: str        # duckdb | sqlite
    text: str          # the whole file
    statements: list[Statement] = field(default_factory=list)

    @property
    def file(self) -> str:
        return f"{self.name}.sql"

    def header_field(self, name: str) -> str:
        """A header field with its continuation lines (the comment lines up to the next field)."""
        out, on = [], False
        for line in self.text.splitlines():
            if not line.startswith("--"):
                break
            m = _FIELD.match(line)
            if m:
                on = m.group(1) == name
                if on:
                    out.append(m.group(2))
            elif on:
                out.append(line[2:])
        return "\n".join(out)

    @property
    def reads(self) -> list[str]:
        """The names the `reads:` header lists: the first name of each comma-separated item, with
        parenthesised remarks dropped."""
        text = self.header_field("reads")
        while (shorter := re.sub(r"\([^()]*\)", "", text)) != text:
            text = shorter
        return [m.group(1) for item in re.split(r"[,\n]", text) if (m := _NAME.match(item.strip()))]

    @property
    def writes(self) -> list[str]:
        """The tables and views its statements create, insert into or update."""
        return sorted({m.group(1) for st in self.statements for m in _WRITES.finditer(st.sql)})


def parse_step(name: str, text: str) -> Step:
    m = re.search(r"^-- engine:\s*(duckdb|sqlite)\b", text, re.M)
    if not m:
        raise ValueError(f"transforms/{name}.sql: header lacks '-- engine: duckdb|sqlite (...)'")
    step = Step(name=name, engine=m.group(1), text=text)
    for chunk in re.split(r";[ \t]*\n", text + "\n"):
        lines = chunk.strip().splitlines()
        count = next((m.group(1) for ln in lines if (m := re.match(r"--\s*count:\s*(\w+)", ln))), None)
        body = "\n".join(ln for ln in lines if not ln.lstrip().startswith("--")).strip()
        if body:
            step.statements.append(Statement(body, count))
    return step


@functools.lru_cache(maxsize=1)
def all_steps() -> dict[str, Step]:
    """Every step file of transforms/, by name (file name without .sql), in file-name order."""
    folder = resources.files("lcm_etl.transforms")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return {f.name.removesuffix(".sql"): parse_step(f.name.removesuffix(".sql"), f.read_text(encoding="utf-8"))
            for f in files}


def step(name: str) -> Step:
    """The step of that exact name (lcm_etl/steps/pipeline.py names them)."""
    return all_steps()[name]


def run_stage(stage: Stage, con, params: dict | None = None,
              after_each: Callable[[], object] | None = None) -> dict[str, int]:
    """Run a declared stage's steps in order on one connection; their summed row counts. `after_each` is
    called after every step (a progress bar, a check for cancellation)."""
    counts: dict[str, int] = {}
    t0 = time.monotonic()
    for name in stage.steps:
        t = time.monotonic()
        done = run_step(step(name), con, params)
        _log.debug("  step %s: %.3f s %s", name, time.monotonic() - t, done or "")   # -vv
        for key, n in done.items():
            counts[key] = counts.get(key, 0) + n
        if after_each:
            after_each()
    _log.info("stage %s (%s): %.3f s", stage.name, stage.engine, time.monotonic() - t0)   # -v
    return counts


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
