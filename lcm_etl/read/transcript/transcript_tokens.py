"""lossless-claw's token count of one transcript message (``toStoredMessage().tokenCount``).

lossless-claw stores a message's parts, rebuilds the content blocks from them (``blockFromPart``) and estimates
the tokens of those rebuilt blocks, so the count depends on what the rebuild keeps and drops. This module ports
the rebuild and ``estimateTokens``; the results must match the oracle dumps in ``fixtures/sessions/expected/``
(made by lossless-claw's own code: ``fixtures/sessions/README.md``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from lcm_etl.read.transcript.transcript_blocks import js_stringify, js_trim, reject_constant

_LC_PART_TYPES = {
    "text": "text", "thinking": "reasoning", "redacted_thinking": "reasoning", "reasoning": "reasoning",
    "patch": "patch", "file": "file", "image": "file", "subtask": "subtask", "compaction": "compaction",
    "step_start": "step_start", "step-start": "step_start", "step_finish": "step_finish",
    "step-finish": "step_finish", "snapshot": "snapshot", "retry": "retry", "agent": "agent",
    **{t: "tool" for t in ("tool_use", "toolUse", "tool-use", "toolCall", "functionCall", "function_call",
                           "function_call_output", "tool_result", "toolResult", "tool")},
}


# lossless-claw's weights per code point: 1.5 for CJK, 2.0 for another one beyond the BMP, 0.25 for the rest
_CJK = re.compile("[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002ebef\u3000-\u303f"
                  "\u3040-\u30ff\uac00-\ud7af\uff00-\uffef]")
_ASTRAL_OTHER = re.compile("[\U00010000-\U0001ffff\U0002a6e0-\U0002a6ff\U0002ebf0-\U0010ffff]")


def estimate_tokens(text: str) -> int:
    """lossless-claw ``estimateTokens``: ceil of per-code-point weights. Every weight is a multiple of 1/4, so
    the sum is counted in quarters (exact, as the float sum is) from two regex counts rather than a Python loop
    over the code points (a third of a store's reconcile went to that loop)."""
    if text.isascii():
        return math.ceil(len(text) * 0.25)
    cjk = len(_CJK.findall(text))
    astral = len(_ASTRAL_OTHER.findall(text))
    quarters = (len(text) - cjk - astral) + 6 * cjk + 8 * astral
    return -(-quarters // 4)


# --------------------------------------------------------------------------- token formula
def _s(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _first_str(d: dict, keys: tuple[str, ...]) -> str | None:
    return next((d[k] for k in keys if isinstance(d.get(k), str)), None)


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
    raw_type_field = block.get("rawType")
    meta_raw_type = raw_type_field if isinstance(raw_type_field, str) else (typ or "agent")
    part_type = _LC_PART_TYPES.get(meta_raw_type, "agent")
    sig = block.get("thinkingSignature")
    if typ == "thinking" and isinstance(sig, str) and sig.startswith("{"):
        try:
            parsed = json.loads(sig, parse_constant=reject_constant)
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
    stored = next((k for k in keys if k in block), None)
    return js_stringify(block[stored]) if stored is not None else _s(block.get(str_key))


def _parse_stored(value: str | None) -> Any:
    if not isinstance(value, str) or not value:
        return _U
    if not js_trim(value):
        return value
    try:
        return json.loads(value, parse_constant=reject_constant)
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

