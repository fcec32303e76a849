"""Content blocks of OpenClaw transcript messages: their types, the text lossless-claw extracts from them,
and their flattening into Remnic ``lcm_message_parts`` rows.

``extract_content`` ports lossless-claw's ``extractMessageContent`` and must reproduce the oracle dumps in
``fixtures/sessions/expected/`` exactly, quirks included (``fixtures/sessions/README.md`` says how they were made). The token count
(transcript/transcript_tokens.py) and the identity hash (transcript/transcript_identity.py) build on the JavaScript-compatible
helpers here.

Strings may hold lone surrogates (``\\ud83d`` escapes survive JSON parsing).
``js_stringify`` writes them back as ``\\udXXX`` escapes like ``JSON.stringify``;
``utf8`` replaces them by U+FFFD like Node's UTF-8 encoder.
"""

from __future__ import annotations

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


def reject_constant(name: str) -> Any:
    """``parse_constant`` for ``json.loads``: NaN and Infinity are not JSON, as in JavaScript's JSON.parse."""
    raise ValueError(f"invalid constant {name}")


# --------------------------------------------------------------------------- text extraction
def _structured_text(value: Any, depth: int, strip_binary: bool) -> str | None:
    if value is None or depth > 6:
        return None
    if isinstance(value, str):
        t = js_trim(value)
        if t and ((t[0] == "{" and t[-1] == "}") or (t[0] == "[" and t[-1] == "]")):
            try:
                parsed = json.loads(t, parse_constant=reject_constant)
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


# --------------------------------------------------------------------------- Remnic parts
_PATH_KEYS = ("file_path", "filePath", "path", "filename", "fileName")


def _part_kind(typ: Any, tool_message: bool) -> str:
    if typ in FILE_TYPES:
        return "file"
    if tool_message:
        return "tool_result"
    if typ == "text":
        return "text"
    if typ in REASONING_TYPES:
        return "reasoning"
    if typ in TOOL_CALL_TYPES:
        return "tool_call"
    if typ in TOOL_RESULT_TYPES:
        return "tool_result"
    return typ if isinstance(typ, str) and typ else "unknown"


def build_parts(msg: dict, created_at: str | None) -> list[dict[str, Any]]:
    """Flatten a message's content into Remnic part dicts; every block field is kept in ``payload``."""
    content = msg.get("content")
    if content is None:
        return []
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
        content if isinstance(content, list) else [content]
    tool_message = msg.get("role") in ("toolResult", "tool")
    msg_tool = msg.get("toolName") if isinstance(msg.get("toolName"), str) else None
    parts = []
    for ordinal, block in enumerate(blocks):
        payload = dict(block) if isinstance(block, dict) else {"value": block}
        typ = block.get("type") if isinstance(block, dict) else ("text" if isinstance(block, str) else None)
        if isinstance(block, str):
            payload = {"type": "text", "text": block}
        if tool_message:
            for k in ("toolCallId", "toolName", "isError"):
                if k in msg and k not in payload:
                    payload[k] = msg[k]
        tool_name = payload.get("name") if typ in TOOL_CALL_TYPES else msg_tool if tool_message else None
        tool_name = tool_name if isinstance(tool_name, str) else None
        file_path = next((payload[k] for k in _PATH_KEYS if isinstance(payload.get(k), str)), None)
        args = payload.get("arguments", payload.get("input"))
        if file_path is None and typ in TOOL_CALL_TYPES and isinstance(args, dict):
            file_path = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
        parts.append({"ordinal": ordinal, "kind": _part_kind(typ, tool_message), "payload": payload,
                      "tool_name": tool_name, "file_path": file_path, "created_at": created_at})
    return parts
