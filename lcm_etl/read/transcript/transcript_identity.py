"""lossless-claw's identity hash of a message: ``sha256(role \\0 canonical content)``.

The canonical content (``canonicalizeOpenClawInboundMetadataIdentityContent``) drops what OpenClaw's inbound
metadata blocks change between deliveries of the same user message (message ids, timestamps, history recaps),
so a re-delivered message hashes the same. Must match the oracle dumps in ``fixtures/sessions/expected/``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from lcm_etl.read.transcript.transcript_blocks import JS_WS, js_stringify, js_trim, reject_constant, utf8

_META_RE = re.compile(r"^(Conversation info \(untrusted metadata\)|Sender \(untrusted metadata\)):\r?\n```json\r?\n([\s\S]*?)\r?\n```")
_DELIVERY_RE = re.compile(r"^Delivery:[\s\S]*?\r?\n\r?\n(?=Conversation info \(untrusted metadata\):)")
_SEP_RE = re.compile(r"^[ \t]*(?:\r?\n)(?:[ \t]*(?:\r?\n))?")
_RECAP_HEADERS = r"(?:Chat history since last reply \(untrusted, for context\):|Conversation context \(untrusted, chronological, selected for current message\):)"
_RECAP_JSON_RE = re.compile("^" + _RECAP_HEADERS + r"\r?\n```json\r?\n([\s\S]*?)\r?\n```")
_ENTRY = r"(?:#\S+ [A-Za-z]{3} \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \S+ |#\S+ |[A-Za-z]{3} \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \S+ ).+: .+"
_RECAP_LINE_RE = re.compile("^" + _RECAP_HEADERS + r"\r?\n" + _ENTRY + r"(?:\r?\n" + _ENTRY + r")*(?=\r?\n\r?\n|\r?\n?$)")
_CTX_RE = re.compile(r"^(?:Thread starter \(untrusted, for context\)|Reply chain of current user message \(untrusted, nearest first\)|Reply target of current user message \(untrusted, for context\)|Forwarded message context \(untrusted metadata\)|Location \(untrusted metadata\)):\r?\n```json\r?\n([\s\S]*?)\r?\n```")
_CONV_KEYS = frozenset("chat_id message_id reply_to_id sender_id conversation_label sender timestamp group_subject "
                       "group_channel group_space group_members thread_label inbound_event_kind topic_id topic_name "
                       "is_forum mention_reason mention_target mentioned_user_ids mentioned_usernames has_reply_context "
                       "has_forwarded_context has_thread_starter history_count history_media_count history_truncated".split())
_SENDER_KEYS = frozenset({"label", "id", "name", "username", "tag", "e164"})
_VOLATILE = frozenset({"message_id", "reply_to_id", "timestamp"})
_HISTORY = frozenset({"history_count", "history_media_count", "history_truncated"})
_CONV_HEAD, _SENDER_HEAD = "Conversation info (untrusted metadata)", "Sender (untrusted metadata)"


def _parse_record(heading: str, text: str) -> dict | None:
    try:
        parsed = json.loads(text, parse_constant=reject_constant)
    except ValueError:
        return None
    known = _CONV_KEYS if heading == _CONV_HEAD else _SENDER_KEYS if heading == _SENDER_HEAD else frozenset()
    return parsed if isinstance(parsed, dict) and any(k in known for k in parsed) else None


def _sorted(v: Any) -> Any:
    if isinstance(v, list):
        return [_sorted(i) for i in v]
    if isinstance(v, dict):
        return {k: _sorted(v[k]) for k in sorted(v)}
    return v


def _canonical_json(record: dict, volatile: frozenset) -> str | None:
    stable = {k: _sorted(v) for k, v in sorted(record.items()) if k not in volatile}
    return js_stringify(stable) if stable else None


def _has_history(record: dict) -> bool:
    n = record.get("history_count")
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 or isinstance(n, float) and n.is_integer() and n > 0


def _recap_len(candidate: str) -> int:
    m = _RECAP_JSON_RE.match(candidate)
    if m:
        try:
            arr = json.loads(m.group(1), parse_constant=reject_constant)
        except ValueError:
            return 0
        ok = isinstance(arr, list) and arr and all(
            isinstance(e, dict) and any(k in e for k in ("sender", "timestamp_ms", "message_id", "body", "media"))
            for e in arr)
        return m.end() if ok else 0
    m = _RECAP_LINE_RE.match(candidate)
    return m.end() if m else 0


def _split_context_blocks(content: str) -> tuple[str, str]:
    blocks, remaining = "", content
    while True:
        cand = remaining.lstrip(JS_WS)
        m = _CTX_RE.match(cand)
        if not m:
            return blocks, remaining
        try:
            payload = json.loads(m.group(1), parse_constant=reject_constant)
        except ValueError:
            return blocks, remaining
        if not isinstance(payload, (dict, list)):
            return blocks, remaining
        blocks += remaining[: len(remaining) - len(cand)] + m.group(0)
        remaining = cand[m.end():]


def canonical_identity_content(role: str, content: str) -> str:
    """lossless-claw ``canonicalizeOpenClawInboundMetadataIdentityContent``."""
    if role != "user":
        return content
    trimmed = content.lstrip(JS_WS)
    prelude = ""
    if not trimmed.startswith(_CONV_HEAD + ":"):
        d = _DELIVERY_RE.match(trimmed)
        if d:
            prelude, trimmed = d.group(0), trimmed[d.end():]
    cand = trimmed.lstrip(JS_WS)
    m = _META_RE.match(cand)
    if not m or m.group(1) != _CONV_HEAD:
        return content
    record = _parse_record(m.group(1), m.group(2))
    if record is None:
        return content
    history = _has_history(record)
    conv = _canonical_json(record, _VOLATILE | _HISTORY if history else _VOLATILE)
    if conv is None:
        return content
    blocks = [f"{_CONV_HEAD}:\n```json\n{conv}\n```"]
    after = cand[m.end():]
    scand = after.lstrip(JS_WS)
    sm = _META_RE.match(scand)
    srec = _parse_record(sm.group(1), sm.group(2)) if sm else None
    sjson = _canonical_json(srec, frozenset()) if srec is not None else None
    if sm and sm.group(1) == _SENDER_HEAD and sjson:
        after = scand[sm.end():]
        blocks.append(f"{_SENDER_HEAD}:\n```json\n{sjson}\n```")
    if history:
        ctx, rest = _split_context_blocks(after)
        rcand = rest.lstrip(JS_WS)
        n = _recap_len(rcand)
        if n > 0:
            prefix = _SEP_RE.sub("", ctx, count=1).rstrip(JS_WS)
            after_recap = _SEP_RE.sub("", rcand[n:], count=1)
            remaining = (f"{prefix}\n\n{after_recap}" if js_trim(after_recap) else prefix) if prefix else after_recap
        else:
            remaining = _SEP_RE.sub("", after, count=1)
    else:
        remaining = _SEP_RE.sub("", after, count=1)
    return prelude + "\n\n".join(blocks) + "\n\n" + remaining if js_trim(remaining) else content


def identity_hash(db_role: str, lc_content: str) -> str:
    """sha256 hex of ``role \\0 canonical(content)`` as lossless-claw stores it."""
    return hashlib.sha256(utf8(db_role + "\0" + canonical_identity_content(db_role, lc_content))).hexdigest()
