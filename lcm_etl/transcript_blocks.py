"""Block-level helpers for OpenClaw transcript messages.

Ports of the lossless-claw rules that decide what a JSONL message becomes in
``lcm.db`` (``extractMessageContent``, the token estimate and the identity
hash), plus the flattening of content blocks into Remnic ``lcm_message_parts``
rows.  The lossless-claw ports must reproduce the oracle dumps in
``fixtures/sessions/expected/`` exactly, quirks included; see
``shared/reference/openclaw-sessions-and-reconciliation.md`` sections 4 and 5.

Strings may hold lone surrogates (``\\ud83d`` escapes survive JSON parsing).
``js_stringify`` writes them back as ``\\udXXX`` escapes like ``JSON.stringify``;
``utf8`` replaces them by U+FFFD like Node's UTF-8 encoder.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

# JS String.prototype.trim() whitespace (ECMAScript WhiteSpace + LineTerminator).
JS_WS = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_SURROGATE = re.compile("[\ud800-\udfff]")

TOOL_CALL_TYPES = frozenset({"tool_use", "toolUse", "tool-use", "toolCall", "tool_call", "functionCall", "function_call"})
TOOL_RESULT_TYPES = frozenset({"function_call_output", "tool_result", "toolResult", "tool_use_result"})
TOOL_TYPES = TOOL_CALL_TYPES | TOOL_RESULT_TYPES
REASONING_TYPES = frozenset({"thinking", "redacted_thinking", "reasoning"})
FILE_TYPES = frozenset({"image", "file"})
_TEXT_KEYS = ("text", "transcript", "transcription", "message", "summary")
_ARRAY_KEYS = ("segments", "utterances", "paragraphs", "alternatives", "words", "items", "results")
_NESTED_KEYS = ("content", "output", "result", "payload", "data", "value")
_LC_PART_TYPES = {
    "text": "text", "thinking": "reasoning", "redacted_thinking": "reasoning", "reasoning": "reasoning",
    "patch": "patch", "file": "file", "image": "file", "subtask": "subtask", "compaction": "compaction",
    "step_start": "step_start", "step-start": "step_start", "step_finish": "step_finish",
    "step-finish": "step_finish", "snapshot": "snapshot", "retry": "retry", "agent": "agent",
    **{t: "tool" for t in ("tool_use", "toolUse", "tool-use", "toolCall", "functionCall", "function_call",
                           "function_call_output", "tool_result", "toolResult", "tool")},
}


def js_trim(s: str) -> str:
    return s.strip(JS_WS)


def utf8(s: str) -> bytes:
    """Encode like Node: lone surrogates become U+FFFD."""
    return s.encode("utf-8", "replace") if _SURROGATE.search(s) is None else _SURROGATE.sub("\ufffd", s).encode("utf-8")


def without_surrogates(s: str) -> str:
    return _SURROGATE.sub("\ufffd", s)


def js_number(v: float | int) -> str:
    """Format a number as JavaScript's Number.prototype.toString does."""
    if isinstance(v, int) and abs(v) <= 2**53:
        return str(v)
    f = float(v)
    if math.isnan(f) or math.isinf(f):
        return "null"
    if f == 0:
        return "0"
    r = repr(abs(f))
    mant, _, exp = r.partition("e")
    ip, _, fp = mant.partition(".")
    fp = "" if fp == "0" else fp
    digits = (ip + fp).lstrip("0")
    point = len(ip) + (int(exp) if exp else 0) - (len(ip + fp) - len((ip + fp).lstrip("0")))
    digits = digits.rstrip("0") or "0"
    n, k = point, len(digits)  # value = 0.digits * 10**n
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))
    return ("-" if f < 0 else "") + out


def _js_str(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), out) if _SURROGATE.search(out) else out


def js_stringify(v: Any) -> str:
    """Compact ``JSON.stringify``: key order kept, non-ASCII raw, lone surrogates escaped."""
    if isinstance(v, str):
        return _js_str(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return js_number(v)
    if isinstance(v, dict):
        return "{" + ",".join(_js_str(str(k)) + ":" + js_stringify(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(js_stringify(x) for x in v) + "]"
    return _js_str(str(v))


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2EBEF or 0x3000 <= cp <= 0x303F or 0x3040 <= cp <= 0x30FF
            or 0xAC00 <= cp <= 0xD7AF or 0xFF00 <= cp <= 0xFFEF)


def estimate_tokens(text: str) -> int:
    """lossless-claw ``estimateTokens``: ceil of per-code-point weights."""
    if text.isascii():
        return math.ceil(len(text) * 0.25)
    total = 0.0
    for ch in text:
        cp = ord(ch)
        total += 1.5 if _is_cjk(cp) else 2.0 if cp > 0xFFFF else 0.25
    return math.ceil(total)


# --------------------------------------------------------------------------- text extraction
def _structured_text(value: Any, depth: int, strip_binary: bool) -> str | None:
    if value is None or depth > 6:
        return None
    if isinstance(value, str):
        t = js_trim(value)
        if t and ((t[0] == "{" and t[-1] == "}") or (t[0] == "[" and t[-1] == "]")):
            try:
                parsed = json.loads(t, parse_constant=_reject)
            except (ValueError, RecursionError):
                parsed = None
            else:
                got = _structured_text(parsed, depth + 1, strip_binary)
                if got:
                    return got
        return value
    if isinstance(value, list):
        texts = [t for t in (_structured_text(e, depth + 1, strip_binary) for e in value) if t and js_trim(t)]
        return "\n".join(texts) if texts else None
    if not isinstance(value, dict):
        return None
    typ = value.get("type")
    if isinstance(typ, str) and typ in REASONING_TYPES:
        return None
    if isinstance(typ, str) and typ in TOOL_TYPES:
        if value.get("toolOutputExternalized") is True:
            for key in ("output", "content", "result"):
                got = _structured_text(value.get(key), depth + 1, strip_binary)
                if got is not None:
                    return got if js_trim(got) else None
        return None
    for key in _TEXT_KEYS:
        c = value.get(key)
        if isinstance(c, str) and js_trim(c):
            return c
    for key in _ARRAY_KEYS:
        c = value.get(key)
        if isinstance(c, list):
            texts = [t for t in (_structured_text(e, depth + 1, strip_binary) for e in c) if t and js_trim(t)]
            if texts:
                return "\n".join(texts)
    binary = strip_binary and typ in FILE_TYPES
    for key in _NESTED_KEYS:
        if binary and key == "data":
            continue
        got = _structured_text(value.get(key), depth + 1, strip_binary)
        if got and js_trim(got):
            return got
    return None


def _reject(name: str) -> Any:
    raise ValueError(name)


def extract_content(content: Any, strip_binary: bool = False) -> str:
    """lossless-claw ``extractMessageContent``; ``strip_binary`` keeps image/file data out."""
    got = _structured_text(content, 0, strip_binary)
    if got is not None:
        return got
    if content is None or content == []:
        return ""
    silent = TOOL_TYPES | REASONING_TYPES | (FILE_TYPES if strip_binary else frozenset())
    if isinstance(content, list) and all(isinstance(i, dict) and i.get("type") in silent for i in content):
        return ""
    if strip_binary and isinstance(content, list):
        content = [{k: v for k, v in i.items() if k != "data"} if isinstance(i, dict) and i.get("type") in FILE_TYPES
                   else i for i in content]
    return js_stringify(content)


# --------------------------------------------------------------------------- token formula
def _s(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _first_str(d: dict, keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if isinstance(d.get(k), str):
            return d[k]
    return None


_U = object()  # JavaScript `undefined`


def _rebuilt_block(block: Any, msg: dict, has_identity: bool, ordinal: int) -> Any:
    """One block as lossless-claw's ``blockFromPart`` rebuilds it from the part it stored."""
    top = _top_level_tool_fields(msg)
    if not isinstance(block, dict):  # an `agent` part whose raw is not an object: metadata JSON as text
        meta = {"originalRole": msg.get("role"), **{k: v for k, v in top.items() if v is not None}}
        if isinstance(msg.get("isError"), bool) or isinstance(msg.get("is_error"), bool):
            meta["isError"] = msg["isError"] if isinstance(msg.get("isError"), bool) else msg["is_error"]
        meta.update(rawType="agent", raw=block)
        return {"type": "text", "text": js_stringify(meta)}
    typ = block.get("type") if isinstance(block.get("type"), str) else None
    meta_raw_type = _s(block.get("rawType")) if isinstance(block.get("rawType"), str) else (typ or "agent")
    part_type = _LC_PART_TYPES.get(meta_raw_type, "agent")
    sig = block.get("thinkingSignature")
    if typ == "thinking" and isinstance(sig, str) and sig.startswith("{"):
        try:
            parsed = json.loads(sig, parse_constant=_reject)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("type") == "reasoning" and isinstance(parsed.get("id"), str):
            return parsed
    raw_type = typ or meta_raw_type
    if raw_type == "thinking" and isinstance(sig, str):
        if sig == "reasoning_content":
            return block if has_identity else None
        return block if has_identity else {k: v for k, v in block.items() if k != "thinkingSignature"}
    if raw_type not in _REBUILT_TOOL_TYPES:
        return block
    # the part's columns as buildMessageParts stored them, then blockFromPart's backfill from raw
    call_id = _first_str(block, ("toolCallId", "tool_call_id", "toolUseId", "tool_use_id", "call_id"))
    if call_id is None:
        call_id = _s(block.get("id")) if part_type == "tool" else None
    if call_id is None:
        call_id = top["toolCallId"]
    if not call_id:
        call_id = (block.get("id") if isinstance(block.get("id"), str) and block["id"] else
                   block.get("call_id") if isinstance(block.get("call_id"), str) and block["call_id"] else call_id)
    name = _first_str(block, ("name", "toolName", "tool_name"))
    name = top["toolName"] if name is None else name
    if not name and isinstance(block.get("name"), str) and block["name"]:
        name = block["name"]
    tool_input = _stored_json(block, ("input", "arguments", "toolInput"), "tool_input")
    if not tool_input:
        args = block.get("arguments") if block.get("arguments") is not None else block.get("input")
        if args is not None:
            tool_input = args if isinstance(args, str) else js_stringify(args)
    tool_output = _stored_json(block, ("output", "toolOutput"), "tool_output")
    text = _s(block.get("text"))
    text = _s(block.get("thinking")) if text is None else text
    if part_type == "reasoning":
        kind = "thinking" if meta_raw_type == "thinking" else "reasoning"
        return {"type": kind, ("thinking" if kind == "thinking" else "text"): text} if text else {"type": kind}
    if part_type == "tool":
        if msg.get("role") == "toolResult" or meta_raw_type == "function_call_output":
            return _tool_result_block(block, meta_raw_type, call_id, name, tool_output, text)
        return _tool_call_block(meta_raw_type, call_id, name, tool_input, ordinal)
    if meta_raw_type in _CALL_BLOCK_TYPES:
        return _tool_call_block(meta_raw_type, call_id, name, tool_input, ordinal)
    if meta_raw_type in _RESULT_BLOCK_TYPES:
        return _tool_result_block(block, meta_raw_type, call_id, name, tool_output, text)
    if part_type == "text":
        return {"type": "text", "text": text or ""}
    return {"type": "text", "text": text} if text else block


_CALL_BLOCK_TYPES = frozenset({"function_call", "functionCall", "tool_use", "tool-use", "toolUse", "toolCall"})
_RESULT_BLOCK_TYPES = frozenset({"function_call_output", "tool_result", "toolResult"})
_REBUILT_TOOL_TYPES = _CALL_BLOCK_TYPES | _RESULT_BLOCK_TYPES


def _tool_call_block(raw_type: str, call_id, name, tool_input, ordinal: int) -> dict:
    ctype = raw_type if raw_type in _CALL_BLOCK_TYPES else "toolCall"
    inp = _parse_stored(tool_input)
    out: dict[str, Any] = {"type": ctype}
    if ctype == "function_call":
        if call_id:
            out["call_id"] = call_id
        if name:
            out["name"] = name
        if inp is not _U:
            out["arguments"] = inp
        return out
    out["id"] = call_id or f"toolu_lcm_estimate-part-{ordinal}"
    if name:
        out["name"] = name
    if inp is not _U:
        out["arguments" if ctype in ("functionCall", "toolCall") else "input"] = inp
    return out


def _tool_result_block(raw: dict, raw_type: str, call_id, name, tool_output, text) -> dict:
    if (isinstance(raw.get("text"), str) and "output" not in raw and "content" not in raw
            and not tool_output and (text is None or text == raw["text"])):
        return {"type": "text", "text": raw["text"]}
    rtype = raw_type if raw_type in _RESULT_BLOCK_TYPES else "tool_result"
    out: dict[str, Any] = {"type": rtype}
    if name:
        out["name"] = name
    parsed = _parse_stored(tool_output)
    if parsed is not _U:
        out["output"] = parsed
    elif text is not None:
        out["output"] = text
    elif "output" in raw:
        out["output"] = raw["output"]
    elif "content" in raw:
        out["content"] = raw["content"]
    else:
        out["output"] = ""
    if isinstance(raw.get("is_error"), bool):
        out["is_error"] = raw["is_error"]
    elif isinstance(raw.get("isError"), bool):
        out["isError"] = raw["isError"]
    if call_id:
        out["call_id" if rtype == "function_call_output" else "tool_use_id"] = call_id
    return out


def _stored_json(block: dict, keys: tuple[str, ...], str_key: str) -> str | None:
    for k in keys:
        if k in block:
            return js_stringify(block[k])
    return _s(block.get(str_key))


def _parse_stored(value: str | None) -> Any:
    if not isinstance(value, str) or not value:
        return _U
    if not js_trim(value):
        return value
    try:
        return json.loads(value, parse_constant=_reject)
    except ValueError:
        return value


def _top_level_tool_fields(msg: dict) -> dict[str, str | None]:
    return {"toolCallId": _first_str(msg, ("toolCallId", "tool_call_id", "toolUseId", "tool_use_id", "call_id", "id")),
            "toolName": _first_str(msg, ("toolName", "tool_name"))}


def runtime_role(role: Any) -> str:
    return "toolResult" if role in ("tool", "toolResult") else "user" if role in ("user", "system") else "assistant"


def lc_token_count(msg: dict, lc_content: str) -> int:
    """lossless-claw ``toStoredMessage().tokenCount`` for one inner message."""
    if "content" not in msg:
        return estimate_tokens(lc_content)
    role = runtime_role(msg.get("role"))
    content = msg["content"]
    reasoning = msg.get("reasoning_content") if msg.get("role") == "assistant" else None
    reasoning = reasoning if isinstance(reasoning, str) and js_trim(reasoning) else None
    extra = estimate_tokens(reasoning) if reasoning else 0
    if isinstance(content, str):
        blocks: Any = content if role == "user" else [{"type": "text", "text": content}]
    elif not isinstance(content, list):
        blocks = [{"type": "text", "text": lc_content}] if lc_content else [{"type": "text", "text": ""}]
    elif not content:
        blocks = [{"type": "reasoning"}] if reasoning else (
            ([{"type": "text", "text": lc_content}] if lc_content else []) if role == "assistant"
            else [{"type": "text", "text": lc_content}] if role == "toolResult" else lc_content)
    else:
        ident = msg.get("role") == "assistant" and all(isinstance(msg.get(k), str) and msg.get(k)
                                                        for k in ("provider", "api", "model"))
        blocks = [b for b in (_rebuilt_block(b, msg, ident, i) for i, b in enumerate(content)) if b is not None]
        if not blocks:
            blocks = lc_content
    if isinstance(blocks, str):
        return estimate_tokens(blocks) + extra
    if not blocks:
        return estimate_tokens(lc_content) + extra
    if role == "user" and len(blocks) == 1 and isinstance(blocks[0], dict) and blocks[0].get("type") == "text" \
            and isinstance(blocks[0].get("text"), str):
        return estimate_tokens(blocks[0]["text"]) + extra
    return estimate_tokens(js_stringify(blocks)) + extra


# --------------------------------------------------------------------------- identity
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
        parsed = json.loads(text, parse_constant=_reject)
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
            arr = json.loads(m.group(1), parse_constant=_reject)
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
            payload = json.loads(m.group(1), parse_constant=_reject)
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
