"""`inspect`: what a source holds, as lcm-etl will see it (same snapshot, same session rule)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from lcm_etl import duck
from lcm_etl.commands.inspect_store import StoreInfo, describe_store
from lcm_etl.read.openclaw.openclaw_state import is_session_store
from lcm_etl.planning import plan
from lcm_etl.read.lcmdb.source_schema import detect_schema
from lcm_etl.read.snapshot.sqlite_copy import take_snapshot
from lcm_etl.steps.pipeline import SESSIONS
from lcm_etl.report import SCHEMA_VERSION, one_line, one_line_each, unknown_lines
from lcm_etl.steps.engine import run_stage


@dataclass
class SourceInfo:
    source: str
    generation: str
    tables: dict[str, int] = field(default_factory=dict)
    sessions: list[dict] = field(default_factory=list)
    dag: dict = field(default_factory=dict)
    unknown_in_source: dict[str, list[str]] = field(default_factory=dict)   # SourceSchema.unknown

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    def as_text(self) -> str:
        lines = [f"source: {self.source}", f"schema: lossless-claw {self.generation}",
                 "rows:   " + ", ".join(f"{k} {v}" for k, v in self.tables.items())]
        lines.append(f"sessions: {len(self.sessions)}")
        lines.append(f"  {'session':<40} {'convs':>5} {'messages':>8} {'tokens':>9} {'leaf':>5} {'cond':>5} "
                     f"{'depth':>5} {'multi':>5}")
        for s in self.sessions:
            lines.append(f"  {one_line(s['session_id'])[:40]:<40} {s['conversations']:>5} {s['messages']:>8} "
                         f"{s['token_sum']:>9} {s['leaf_summaries']:>5} {s['condensed_summaries']:>5} "
                         f"{'-' if s['max_depth'] is None else s['max_depth']:>5} {s['multi_parent_summaries']:>5}")
        d = self.dag
        lines.append(f"summary DAG: {d.get('summaries', 0)} nodes ({d.get('leaf', 0)} leaf, {d.get('condensed', 0)} "
                     f"condensed), max depth {'-' if d.get('max_depth') is None else d['max_depth']}, {d.get('edges', 0)} parent edges, "
                     f"{d.get('multi_parent', 0)} multi-parent (condensed from several summaries), "
                     f"{d.get('multi_cover', 0)} condensed into several (collapsed on import), "
                     f"{d.get('unlinked', 0)} without links, {d.get('cross_conversation_links', 0)} "
                     "links to another conversation's messages")
        return one_line_each(lines + [line.strip() for line in unknown_lines(self.unknown_in_source)])


def describe(src: Path, key_by: str = "session-id",
             memory_limit: str = plan.duck.DEFAULT_MEMORY_LIMIT) -> SourceInfo | StoreInfo:
    snap = take_snapshot(src)
    try:
        if is_session_store(snap.path):   # an OpenClaw session store (agents/<id>/agent/openclaw-agent.sqlite)
            snap.close()
            return describe_store(src, memory_limit)
        schema = detect_schema(snap.path, src)
        con = plan.open_source(snap.path, schema, src, memory_limit, keeps_records=False)   # read-only
        try:
            run_stage(SESSIONS, con, {"key_by": key_by, "ws": plan.WHITESPACE})
            info = SourceInfo(source=str(src), generation=schema.generation, unknown_in_source=schema.unknown())
            for view in ("src_conversations", "src_messages", "src_parts", "src_summaries",
                         "src_summary_messages", "src_summary_parents"):
                info.tables[view.removeprefix("src_")] = duck.one(con, f"SELECT count(*) FROM {view}")[0]
            rows = con.execute("""
                WITH multi AS (SELECT summary_id AS sid FROM src_summary_parents GROUP BY 1 HAVING count(*) > 1),
                sm AS (SELECT s.session_id, count(*) FILTER (WHERE x.kind = 'leaf') AS leaf,
                              count(*) FILTER (WHERE x.kind = 'condensed') AS cond, max(x.depth) AS depth,
                              count(*) FILTER (WHERE x.summary_id IN (SELECT sid FROM multi)) AS multi
                       FROM src_summaries x JOIN sessions s USING (conversation_id) GROUP BY 1),
                mm AS (SELECT s.session_id, count(m.message_id) AS n, coalesce(sum(m.token_count), 0) AS tokens,
                              count(DISTINCT s.conversation_id) AS convs
                       FROM sessions s LEFT JOIN src_messages m USING (conversation_id) GROUP BY 1)
                SELECT mm.session_id, convs, n, tokens, coalesce(leaf, 0), coalesce(cond, 0), depth, coalesce(multi, 0)
                FROM mm LEFT JOIN sm USING (session_id) ORDER BY mm.session_id""").fetchall()
            keys = ("session_id", "conversations", "messages", "token_sum", "leaf_summaries",
                    "condensed_summaries", "max_depth", "multi_parent_summaries")
            info.sessions = [dict(zip(keys, r)) for r in rows]
            d = duck.one(con, """
                SELECT count(*), count(*) FILTER (WHERE kind = 'leaf'), count(*) FILTER (WHERE kind = 'condensed'),
                       max(depth),
                       (SELECT count(*) FROM src_summary_parents),
                       (SELECT count(*) FROM (SELECT summary_id FROM src_summary_parents GROUP BY 1 HAVING count(*) > 1)),
                       (SELECT count(*) FROM (SELECT parent_summary_id FROM src_summary_parents GROUP BY 1 HAVING count(*) > 1)),
                       count(*) FILTER (WHERE summary_id NOT IN (SELECT summary_id FROM src_summary_messages)
                                          AND summary_id NOT IN (SELECT summary_id FROM src_summary_parents)),
                       (SELECT count(*) FROM src_summary_messages l JOIN src_summaries s2 USING (summary_id)
                          JOIN src_messages m ON m.message_id = l.message_id
                        WHERE m.conversation_id <> s2.conversation_id)
                FROM src_summaries""")
            info.dag = dict(zip(("summaries", "leaf", "condensed", "max_depth", "edges", "multi_parent",
                                 "multi_cover", "unlinked", "cross_conversation_links"), d))
            return info
        finally:
            con.close()
    finally:
        snap.close()
