#!/usr/bin/env python3
# Copied verbatim (below this header) from /work/shared/tools/lcmcheck.py, the independent checker written
# from SPEC.md alone, so that project tests do not read ../shared at run time. Do not edit here: copy it again.
"""Independent checker: does a Remnic LCM target hold a lossless-claw source faithfully?

Written from SPEC.md alone, sharing no code with the project. Reads both files with sqlite3
(read-only), recomputes every expectation from the source, and prints one line per broken
invariant, then a last line `lcmcheck: N problems (...)`. Exit 0 only when N == 0.

usage: lcmcheck.py SRC_DB TARGET_DB [--key-by session-id|session-key] [--fresh]
  --fresh   the target held nothing before this source was imported (turn_index must be 0..n-1, in
            chronological order); without it, rows a later run added may follow the session's maximum
"""
import datetime as dt
import json
import os
import shutil
import sqlite3
import sys
import atexit
import tempfile
from collections import defaultdict


def ro(path):
    """Open a copy, so that reading a WAL-mode file leaves nothing new beside the original."""
    tmp = tempfile.mkdtemp(prefix="lcmcheck-")
    atexit.register(shutil.rmtree, tmp, True)
    copy = os.path.join(tmp, os.path.basename(path))
    for side in ("", "-wal"):
        if os.path.exists(path + side):
            shutil.copyfile(path + side, copy + side)
    con = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    return con


def cols(con, table):
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def has_table(con, name):
    return con.execute("SELECT 1 FROM sqlite_master WHERE name=?", (name,)).fetchone() is not None


def parse_time(text):
    if text is None:
        return None
    s = str(text).strip().replace(" ", "T")
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    t = dt.datetime.fromisoformat(s)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t


def num_key(v):
    try:
        return (0, int(v), "")
    except (TypeError, ValueError):
        return (1, 0, str(v))


def canon(v):
    return json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def collect(v, leaves, objects):
    """Every scalar (as text) and every object/array (canonical JSON) inside a payload."""
    if isinstance(v, (dict, list)):
        objects.add(canon(v))
        for x in (v.values() if isinstance(v, dict) else v):
            collect(x, leaves, objects)
    elif v is not None:
        leaves.add(str(v))
        if isinstance(v, bool):
            leaves.add(str(int(v)))
        if isinstance(v, str):
            try:
                inner = json.loads(v)
                if isinstance(inner, (dict, list)):
                    collect(inner, leaves, objects)
            except ValueError:
                pass


def value_kept(val, leaves, objects, kind=None, column=None):
    """A source value is kept when it stands in the target row as a value, or as a JSON object/array equal to it."""
    if str(val) in leaves:
        return True
    if isinstance(val, float) and val.is_integer() and str(int(val)) in leaves:
        return True
    if isinstance(val, int) and str(float(val)) in leaves:
        return True
    if isinstance(val, str):
        try:
            parsed = json.loads(val)
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)) and canon(parsed) in objects:
            return True
    if column == "part_type" and kind is not None:
        return True  # the kind mapping is the project's to choose (SPEC 3.4); the type is checked by presence of kind
    return False


def resolve_session(conv, key_by):
    if key_by == "session-key":
        k = (conv.get("session_key") or "").strip()
        if k:
            return k
    s = (conv.get("session_id") or "").strip()
    if s:
        return s
    cid = conv["conversation_id"]
    return str(int(cid)) if isinstance(cid, (int, float)) else str(cid)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    key_by = "session-key" if "--key-by" in argv and argv[argv.index("--key-by") + 1] == "session-key" else "session-id"
    if key_by == "session-key":
        args.remove("session-key")
    elif "--key-by" in argv:
        args.remove(argv[argv.index("--key-by") + 1])
    fresh = "--fresh" in argv
    src, tgt = ro(args[0]), ro(args[1])
    problems = []

    def bad(msg):
        problems.append(msg)
        if len(problems) <= int(__import__("os").environ.get("LCMCHECK_SHOW", "40")):
            print(msg)

    # --- target health -------------------------------------------------------------------
    for t in ("lcm_meta", "lcm_messages", "lcm_message_parts", "lcm_summary_nodes", "lcm_compaction_events",
              "lcm_messages_fts", "lcm_summaries_fts"):
        if not has_table(tgt, t):
            bad(f"target: table {t} missing")
    if problems:
        print(f"lcmcheck: {len(problems)} problems (target schema incomplete)")
        return 1
    v = tgt.execute("SELECT value FROM lcm_meta WHERE key='schema_version'").fetchone()
    if not v or v[0] != "2":
        bad(f"target: lcm_meta schema_version is {v[0] if v else None!r}, want '2'")
    if tgt.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
        bad("target: PRAGMA integrity_check failed")
    fk = tgt.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        bad(f"target: {len(fk)} foreign key violations, first {tuple(fk[0])}")
    for fts, base, _col, _rowid in (("lcm_messages_fts", "lcm_messages", "content", "id"),
                                  ("lcm_summaries_fts", "lcm_summary_nodes", "summary_text", "rowid")):
        n_fts = tgt.execute(f"SELECT count(*) FROM {fts}_docsize").fetchone()[0] if has_table(tgt, f"{fts}_docsize") else None
        n_base = tgt.execute(f"SELECT count(*) FROM {base}").fetchone()[0]
        if n_fts is not None and n_fts != n_base:
            bad(f"target: {fts} indexes {n_fts} rows, {base} has {n_base}")

    # --- source --------------------------------------------------------------------------
    convs = {r["conversation_id"]: dict(r) for r in src.execute("SELECT * FROM conversations")}
    session_of_conv = {cid: resolve_session(c, key_by) for cid, c in convs.items()}
    msgs = [dict(r) for r in src.execute("SELECT * FROM messages") if r["conversation_id"] in convs]
    by_session = defaultdict(list)
    for m in msgs:
        by_session[session_of_conv[m["conversation_id"]]].append(m)

    # --- target messages -----------------------------------------------------------------
    tmsgs = [dict(r) for r in tgt.execute("SELECT * FROM lcm_messages")]
    index = {}
    for r in tmsgs:
        md = json.loads(r["metadata"]) if r["metadata"] else {}
        if md.get("source") != "lossless-claw":
            continue
        key = (r["session_id"], str(md.get("conversation_id")), int(md.get("source_seq")))
        if key in index:
            bad(f"messages: duplicate target rows for {key}")
        index[key] = r
    turn_of_msg = {}
    for session, ms in by_session.items():
        order = sorted(ms, key=lambda m: (parse_time(m["created_at"]), num_key(m["conversation_id"]), m["seq"]))
        turns = []
        for m in order:
            key = (session, str(m["conversation_id"]), int(m["seq"]))
            r = index.get(key)
            if r is None:
                bad(f"messages: source message {m['message_id']} {key} missing in target")
                continue
            turn_of_msg[m["message_id"]] = r["turn_index"]
            turns.append(r["turn_index"])
            if r["role"] != m["role"] or r["content"] != m["content"] or r["token_count"] != m["token_count"]:
                bad(f"messages: {key} role/content/token_count differ")
            if parse_time(r["created_at"]) != parse_time(m["created_at"]):
                bad(f"messages: {key} created_at {r['created_at']!r} is not the source instant {m['created_at']!r}")
        if len(set(turns)) != len(turns):
            bad(f"turn_index: session {session!r} gives two messages the same turn_index")
        elif fresh and turns != sorted(turns):
            # on a target that already held this session, rows of a later run append after its maximum
            # (SPEC 3.2), so chronological order is only required of one fresh import
            bad(f"turn_index: session {session!r} not strictly increasing in chronological order")
        if fresh and turns and turns != list(range(len(turns))):
            bad(f"turn_index: session {session!r} is not 0..{len(turns) - 1} on a fresh target")
    extra = len(index) - len(turn_of_msg)
    if extra > 0:
        bad(f"messages: {extra} target rows claim lossless-claw provenance with no source message")

    # FTS: the target's own index must find imported text
    probe = 0
    for r in tmsgs[:: max(1, len(tmsgs) // 25)]:
        words = [w for w in "".join(ch if ch.isalnum() else " " for ch in r["content"]).split() if len(w) > 3 and w.isascii()]
        if not words:
            continue
        probe += 1
        q = '"' + words[0] + '"'
        hit = tgt.execute("SELECT 1 FROM lcm_messages_fts WHERE lcm_messages_fts MATCH ? AND rowid=?", (q, r["id"])).fetchone()
        if not hit:
            bad(f"fts: message id {r['id']} not found by MATCH {q}")

    # --- parts ---------------------------------------------------------------------------
    if has_table(src, "message_parts"):
        pc = cols(src, "message_parts")
        idcols = {"message_id", "session_id", "ordinal", "part_id"}
        tparts = defaultdict(dict)
        tid_of_msg = {}
        for m in msgs:
            key = (session_of_conv[m["conversation_id"]], str(m["conversation_id"]), int(m["seq"]))
            if key in index:
                tid_of_msg[m["message_id"]] = index[key]["id"]
        for r in tgt.execute("SELECT * FROM lcm_message_parts"):
            tparts[r["message_id"]][r["ordinal"]] = dict(r)
        src_parts = [dict(r) for r in src.execute("SELECT rowid AS _rowid, * FROM message_parts ORDER BY message_id, "
                                                   + ("ordinal" if "ordinal" in pc else "rowid"))]
        seen_ord = defaultdict(int)
        for p in src_parts:
            tid = tid_of_msg.get(p["message_id"])
            if tid is None:
                continue
            ordv = p["ordinal"] if "ordinal" in pc else seen_ord[p["message_id"]]
            seen_ord[p["message_id"]] += 1
            t = tparts[tid].get(ordv)
            if t is None:
                bad(f"parts: source part of message {p['message_id']} ordinal {ordv} missing")
                continue
            try:
                payload = json.loads(t["payload"])
            except Exception:
                bad(f"parts: payload of target part {t['id']} is not JSON")
                continue
            leaves, objects = set(), set()
            collect(payload, leaves, objects)
            for c in ("kind", "tool_name", "file_path", "created_at"):
                if t.get(c) is not None:
                    leaves.add(str(t[c]))
            for c, val in p.items():
                if c in idcols or c == "_rowid" or val is None or val == "":
                    continue
                if not value_kept(val, leaves, objects, kind=t.get("kind"), column=c):
                    bad(f"parts: value of {c} ({str(val)[:40]!r}) for message {p['message_id']} ordinal {ordv} lost")
                    break

    # --- summaries -----------------------------------------------------------------------
    sums = {r["summary_id"]: dict(r) for r in src.execute("SELECT * FROM summaries")}
    links = defaultdict(list)
    for r in src.execute("SELECT summary_id, message_id FROM summary_messages"):
        links[r[0]].append(r[1])
    sources_of = defaultdict(list)   # C -> [S] (S condensed into C)
    covers = defaultdict(list)       # S -> [(ordinal, C)]
    for r in src.execute("SELECT summary_id, parent_summary_id, ordinal FROM summary_parents"):
        sources_of[r[0]].append(r[1])
        covers[r[1]].append((r[2], r[0]))

    memo = {}
    session_of_msg = {m["message_id"]: session_of_conv[m["conversation_id"]] for m in msgs}

    def msgs_under(sid, stack=()):
        if sid in memo:
            return memo[sid]
        if sid in stack:
            return set()
        out = set(links.get(sid, []))
        for s in sources_of.get(sid, []):
            out |= msgs_under(s, stack + (sid,))
        memo[sid] = out
        return out

    def session_of_summary(sid):
        s = sums.get(sid)
        if s is None:
            return None
        if s.get("conversation_id") in convs:
            return session_of_conv[s["conversation_id"]]
        return None

    def turns_under(sid):
        sess = session_of_summary(sid)
        return {turn_of_msg[m] for m in msgs_under(sid) if m in turn_of_msg and session_of_msg.get(m) == sess}

    tnodes = {r["id"]: dict(r) for r in tgt.execute("SELECT * FROM lcm_summary_nodes")}
    expected_ids = set()
    for sid, s in sums.items():
        if s.get("conversation_id") is not None and s["conversation_id"] not in convs:
            continue
        tr = turns_under(sid)
        if not tr:
            continue  # underivable range: must be reported, not imported
        expected_ids.add(sid)
        n = tnodes.get(sid)
        if n is None:
            bad(f"summaries: {sid} (depth {s['depth']}, {s.get('kind')}) missing in target")
            continue
        if n["summary_text"] != s["content"] or n["token_count"] != s["token_count"] or n["depth"] != s["depth"]:
            bad(f"summaries: {sid} text/token_count/depth differ")
        if (n["msg_start"], n["msg_end"]) != (min(tr), max(tr)):
            bad(f"summaries: {sid} range {n['msg_start']}..{n['msg_end']}, want {min(tr)}..{max(tr)}")
        cands = sorted((o, str(c)) for o, c in covers.get(sid, [])
                       if turns_under(c) and session_of_summary(c) == session_of_summary(sid))
        want_parent = cands[0][1] if cands else None
        if n["parent_id"] != want_parent:
            bad(f"summaries: {sid} parent_id {n['parent_id']!r}, want {want_parent!r}")
        if "conversation_id" in s and n["session_id"] != session_of_conv.get(s["conversation_id"]):
            bad(f"summaries: {sid} in session {n['session_id']!r}, want {session_of_conv.get(s['conversation_id'])!r}")
    for nid in tnodes:
        if nid not in expected_ids and nid in sums:
            bad(f"summaries: {nid} imported although its range cannot be derived")

    # --- boundary events -----------------------------------------------------------------
    ev = defaultdict(list)
    for r in tgt.execute("SELECT * FROM lcm_compaction_events"):
        ev[r["session_id"]].append(dict(r))
    for session in by_session:
        rows = [e for e in ev.get(session, []) if e["tokens_before"] == e["tokens_after"]]
        if not rows:
            bad(f"events: session {session!r} has no import boundary event")
            continue
        total = tgt.execute("SELECT coalesce(sum(token_count),0) FROM lcm_messages WHERE session_id=?", (session,)).fetchone()[0]
        if fresh and (len(rows) != 1 or rows[0]["tokens_before"] != total):
            bad(f"events: session {session!r} has {len(rows)} boundary rows, tokens {[e['tokens_before'] for e in rows]}, want one with {total}")

    n_parts = tgt.execute("SELECT count(*) FROM lcm_message_parts").fetchone()[0]
    print(f"lcmcheck: {len(problems)} problems ({len(turn_of_msg)} messages, {n_parts} parts, "
          f"{len(expected_ids)} summaries, {len(by_session)} sessions checked; {probe} FTS probes)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
