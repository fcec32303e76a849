"""Reader for OpenClaw JSONL transcripts: real fixtures against the lossless-claw oracle, plus
synthetic files for every damage pattern docs/mapping.md's transcript section names."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from lcm_etl.read.transcript.transcript_blocks import js_number, js_stringify
from lcm_etl.read.transcript.transcript_files import discover_transcripts, load_session_keys
from lcm_etl.read.transcript.transcript_tokens import estimate_tokens
from lcm_etl.read.transcript.transcripts import TranscriptError, read_transcript

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "sessions"
# OpenClaw's getBranch() message counts, from fixtures/sessions/README.md
OPENCLAW_BRANCH = {"plain-chat": 8, "tool-heavy": 21, "branched": 4, "compaction": 14, "unicode": 12,
                   "channel-telegram": 18, "rewritten": 8, "large-5k": 5000}


def fixture_path(name: str, tmp_path: Path) -> Path:
    if name == "large-5k":
        out = tmp_path / "large-5k.jsonl"
        out.write_bytes(gzip.decompress((FIX / "large-5k.jsonl.gz").read_bytes()))
        return out
    return FIX / f"{name}.jsonl"


def expected_rows(name: str) -> list[dict]:
    if name == "large-5k":
        data = json.loads(gzip.decompress((FIX / "expected" / "large-5k.expected.json.gz").read_bytes()))
    else:
        data = json.loads((FIX / "expected" / f"{name}.expected.json").read_text("utf-8"))
    return data["db"]["messages"]


@pytest.mark.parametrize("name", sorted(OPENCLAW_BRANCH))
def test_every_fixture_yields_openclaws_branch_and_matches_the_lossless_claw_rows(name, tmp_path):
    t = read_transcript(fixture_path(name, tmp_path))
    assert len(t.messages) == OPENCLAW_BRANCH[name]
    rows = expected_rows(name)  # lossless-claw (Node 22) and OpenClaw agree on every shared fixture
    got = [(m.role, m.token_count, m.identity_hash, m.entry_id, m.created_at_lc) for m in t.messages]
    want = [(r["role"], r["token_count"], r["identity_hash"], r["transcript_entry_id"], r["created_at"]) for r in rows]
    assert got == want
    assert t.report.skipped_lines == [] and t.report.gaps == [] and t.report.replays == []
    first = t.path.read_text("utf-8").split("\n", 1)[0]
    assert t.header_id == json.loads(first)["id"] and t.version == 3


@pytest.mark.parametrize("name", ["plain-chat", "branched", "compaction", "channel-telegram", "rewritten", "unicode"])
def test_plain_content_equals_the_stored_lossless_claw_content_when_no_image_is_involved(name, tmp_path):
    t = read_transcript(fixture_path(name, tmp_path))
    assert [m.content for m in t.messages] == [r["content"] for r in expected_rows(name)]


def test_branched_transcript_keeps_only_the_active_path():
    t = read_transcript(FIX / "branched.jsonl")
    assert [m.content.split("\n")[0] for m in t.messages] == [
        "Write a haiku about autumn.", "Crisp leaves drift and fall", "Let's do summer.", "Cicadas at noon"]
    assert t.report.abandoned_entries == 6


def test_rewritten_transcript_follows_the_re_appended_copies():
    t = read_transcript(FIX / "rewritten.jsonl")
    assert t.report.abandoned_entries == 4
    assert any(m.content.startswith("[LCM Tool Output: file_") for m in t.messages)
    assert "3840ef34" not in {m.entry_id for m in t.messages}


def test_unicode_transcript_keeps_the_u2028_message_and_replaces_lone_surrogates_in_content():
    t = read_transcript(FIX / "unicode.jsonl")
    assert any("\u2028" in m.content and "\u2029" in m.content for m in t.messages)
    edge = next(m for m in t.messages if "lone high surrogate" in m.content)
    assert "\ufffd" in edge.content and "\ud83d" in edge.lc_content and "\x00" in edge.content
    assert "\\ud83d" in js_stringify(edge.parts[0]["payload"]) if edge.parts else True


def test_tool_result_image_stays_out_of_content_but_every_block_field_is_in_the_parts():
    t = read_transcript(FIX / "tool-heavy.jsonl")
    shot = next(m for m in t.messages if any(p["kind"] == "file" for p in m.parts))
    assert shot.role == "tool" and shot.content == "Captured http://localhost:3000/login (8x8)"
    assert len(shot.lc_content) > len(shot.content)  # lossless-claw's quirk, kept for the identity hash only
    image = next(p for p in shot.parts if p["kind"] == "file")
    assert image["payload"]["data"] and image["payload"]["mimeType"] == "image/png"
    assert [p["kind"] for p in shot.parts] == ["tool_result", "file"]
    assert all(p["tool_name"] == "browser" and p["payload"]["toolCallId"] for p in shot.parts)
    kinds = {p["kind"] for m in t.messages for p in m.parts}
    assert {"text", "reasoning", "tool_call", "tool_result", "file"} <= kinds
    call = next(p for m in t.messages for p in m.parts if p["kind"] == "tool_call")
    assert call["tool_name"] and "arguments" in call["payload"] and call["created_at"].endswith("Z")


def test_metadata_keeps_model_fields_and_envelope_timestamp_and_sender_metadata():
    t = read_transcript(FIX / "channel-telegram.jsonl")
    user = t.messages[0]
    assert user.sender_metadata == {"senderId": "8455538490", "senderName": "Dana Example",
                                    "senderUsername": "dana_example"}
    assert "__openclaw" in user.metadata and "envelope_timestamp" in user.metadata
    mirror = next(m for m in t.messages if m.metadata.get("model") == "delivery-mirror")
    assert mirror.metadata["provider"] == "openclaw" and "openclawDeliveryMirror" in mirror.metadata
    assert "role" not in mirror.metadata and "content" not in mirror.metadata
    failed = next(m for m in t.messages if m.metadata.get("stopReason") == "error")
    assert failed.parts == [] and failed.token_count == 0 and failed.metadata["errorMessage"]
    assert user.created_at.endswith("Z") and len(user.created_at) == 24


# --------------------------------------------------------------------------- synthetic files
HEADER = {"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}


def msg(eid, parent, role="user", text=None, ts=1767225600000, **extra):
    m = {"role": role, "content": text if text is not None else f"m-{eid}", "timestamp": ts}
    return {"type": "message", "id": eid, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z",
            "message": m, **extra}


def write(tmp_path: Path, entries, name="s.jsonl", sep=b"\n", trailer=b"\n") -> Path:
    lines = [e if isinstance(e, bytes) else json.dumps(e, ensure_ascii=False).encode() for e in entries]
    p = tmp_path / name
    p.write_bytes(sep.join(lines) + trailer)
    return p


def ids(t):
    return [m.entry_id for m in t.messages]


CHAIN = [HEADER, msg("a", None), msg("b", "a", "assistant"), msg("c", "b"), msg("d", "c", "assistant")]


def test_a_last_line_cut_mid_write_is_skipped_and_reported(tmp_path):
    p = write(tmp_path, CHAIN + [json.dumps(msg("e", "d")).encode()[:40]], trailer=b"")
    t = read_transcript(p)
    assert ids(t) == ["a", "b", "c", "d"] and [n for n, _ in t.report.skipped_lines] == [6]


def test_a_fragment_left_mid_file_after_crash_and_resume_is_skipped(tmp_path):
    frag = json.dumps(msg("e", "d")).encode()[:50]
    p = write(tmp_path, CHAIN + [frag, msg("f", "d"), msg("g", "f", "assistant")])
    t = read_transcript(p)
    assert ids(t) == ["a", "b", "c", "d", "f", "g"] and t.report.skipped_lines[0][0] == 6


def test_a_stray_non_json_line_is_skipped(tmp_path):
    t = read_transcript(write(tmp_path, CHAIN[:3] + [b"hello, not json", b"[1, 2]"] + CHAIN[3:]))
    assert ids(t) == ["a", "b", "c", "d"] and [n for n, _ in t.report.skipped_lines] == [4, 5]


def test_strict_mode_raises_on_a_bad_line_naming_file_and_line(tmp_path):
    p = write(tmp_path, CHAIN[:3] + [b"{broken"] + CHAIN[3:])
    with pytest.raises(TranscriptError, match=r"s\.jsonl.*line 4"):
        read_transcript(p, strict=True)
    assert len(read_transcript(write(tmp_path, CHAIN, "ok.jsonl"), strict=True).messages) == 4


def test_unknown_entry_types_with_and_without_ids(tmp_path):
    p = write(tmp_path, [HEADER, msg("a", None), {"type": "future_thing", "id": "x", "parentId": "a"},
                         {"type": "opaque_note", "note": 1}, msg("b", "x", "assistant")])
    t = read_transcript(p)
    assert ids(t) == ["a", "b"] and t.report.unknown_types == 2 and t.report.gaps == []


def test_an_adjacent_duplicate_entry_is_one_entry(tmp_path):
    t = read_transcript(write(tmp_path, CHAIN[:3] + [CHAIN[2]] + CHAIN[3:]))
    assert ids(t) == ["a", "b", "c", "d"] and t.report.replays == [4]


def test_a_replay_of_an_earlier_line_at_the_end_does_not_move_the_leaf(tmp_path):
    t = read_transcript(write(tmp_path, CHAIN + [CHAIN[2]]))
    assert ids(t) == ["a", "b", "c", "d"] and t.report.replays == [6]


def test_a_parent_pointing_at_a_missing_entry_continues_with_the_previous_entry(tmp_path):
    t = read_transcript(write(tmp_path, CHAIN + [msg("e", "gone"), msg("f", "e", "assistant")]))
    assert ids(t) == ["a", "b", "c", "d", "e", "f"] and t.report.gaps == ["e"]


def test_crlf_line_ends_and_a_bom_are_read(tmp_path):
    p = write(tmp_path, CHAIN, sep=b"\r\n", trailer=b"\r\n")
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    t = read_transcript(p)
    assert ids(t) == ["a", "b", "c", "d"] and t.header_id == "sess-1" and t.report.skipped_lines == []


def test_raw_u2028_and_u2029_inside_strings_stay_in_their_line(tmp_path):
    text = "one\u2028two\u2029three\u0085four\x0bfive\x0c"
    t = read_transcript(write(tmp_path, [HEADER, msg("a", None, text=text), msg("b", "a", "assistant")]))
    assert t.messages[0].content == text and t.report.lines_total == 3
    assert "\u2028".encode() in t.path.read_bytes()


def test_an_empty_file_is_a_transcript_with_no_messages(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_bytes(b"")
    t = read_transcript(p)
    assert t.messages == [] and t.header is None and t.header_id == "empty" and t.report.lines_total == 0
    p.write_bytes(b"\n\n  \n")
    assert read_transcript(p).messages == []


def test_a_second_header_line_is_reported_and_ignored(tmp_path):
    t = read_transcript(write(tmp_path, CHAIN[:3] + [dict(HEADER, id="other")] + CHAIN[3:]))
    assert ids(t) == ["a", "b", "c", "d"] and t.report.extra_headers == [4] and t.header_id == "sess-1"


def test_v1_files_without_ids_put_every_message_on_the_path_in_file_order(tmp_path):
    v1 = [{"type": "session", "id": "old", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/"}] + [
        {"type": "message", "timestamp": "2025-01-01T00:00:0%dZ" % i,
         "message": {"role": "user" if i % 2 else "assistant", "content": f"t{i}"}} for i in range(1, 6)]
    t = read_transcript(write(tmp_path, v1))
    assert [m.content for m in t.messages] == ["t1", "t2", "t3", "t4", "t5"] and t.version == 1
    assert all(m.entry_id is None for m in t.messages)
    assert t.messages[0].created_at == "2025-01-01T00:00:01.000Z"  # no inner timestamp: the envelope's


def test_a_leaf_control_record_selects_its_target(tmp_path):
    entries = CHAIN + [msg("e", "d"), msg("f", "e", "assistant"),
                       {"type": "leaf", "id": "L1", "parentId": "f", "timestamp": "x", "targetId": "b"}]
    t = read_transcript(write(tmp_path, entries))
    assert ids(t) == ["a", "b"] and t.report.abandoned_entries == 4
    t2 = read_transcript(write(tmp_path, entries + [msg("g", "L1")], "chained.jsonl"))
    assert ids(t2) == ["a", "b", "g"]  # a child of the leaf record continues from its target
    bad = CHAIN + [{"type": "leaf", "id": "L2", "parentId": "d", "timestamp": "x", "targetId": "nope"}]
    assert ids(read_transcript(write(tmp_path, bad, "bad.jsonl"))) == ["a", "b", "c", "d"]


def test_a_side_mode_entry_does_not_move_the_leaf(tmp_path):
    t = read_transcript(write(tmp_path, CHAIN + [msg("s", "d", "assistant", appendMode="side")]))
    assert ids(t) == ["a", "b", "c", "d"] and t.report.abandoned_entries == 1


def test_non_persistable_roles_are_counted_not_returned(tmp_path):
    bash = {"type": "message", "id": "x", "parentId": "b", "timestamp": "t",
            "message": {"role": "bashExecution", "command": "ls", "output": "a", "timestamp": 1}}
    t = read_transcript(write(tmp_path, CHAIN[:3] + [bash, msg("c", "x")]))
    assert ids(t) == ["a", "b", "c"] and t.report.non_persistable == {"bashExecution": 1}


def test_a_file_that_is_not_a_transcript_is_an_error_naming_it(tmp_path):
    for name, data in [("data.json", b'{\n  "a": 1\n}\n'), ("t.csv", b"a,b\n1,2\n"),
                       ("blob.jsonl", os.urandom(64) + b"\xff\xfe"), ("obj.jsonl", b'{"a": 1}\n')]:
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(TranscriptError, match=name.replace(".", r"\.")):
            read_transcript(p)


def test_invalid_utf8_a_directory_and_an_unreadable_file_are_errors(tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes("caf\u00e9\n".encode("latin-1") * 3)
    with pytest.raises(TranscriptError, match="not UTF-8"):
        read_transcript(p)
    with pytest.raises(TranscriptError, match="directory"):
        read_transcript(tmp_path)
    locked = write(tmp_path, CHAIN, "locked.jsonl")
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):  # running as root: permissions do not apply
            pytest.skip("root can read mode-000 files")
        with pytest.raises(TranscriptError, match="cannot be read"):
            read_transcript(locked)
    finally:
        locked.chmod(0o600)


def test_an_invalid_utf8_line_among_good_lines_is_skipped(tmp_path):
    t = read_transcript(write(tmp_path, CHAIN[:3] + [b'{"type":"message","x":"\xff"}'] + CHAIN[3:]))
    assert ids(t) == ["a", "b", "c", "d"] and t.report.skipped_lines == [(4, "not UTF-8")]


def test_a_pathologically_nested_message_is_skipped_not_a_crash(tmp_path):
    deep = (b'{"type":"message","id":"z","parentId":"d","timestamp":"t","message":{"role":"assistant",'
            b'"content":[{"type":"x","v":' + b"[" * 1000 + b"]" * 1000 + b"}]}}")
    t = read_transcript(write(tmp_path, CHAIN + [deep]))
    assert ids(t) == ["a", "b", "c", "d"] and t.report.skipped_lines == [(6, "message nested too deeply")]


def test_created_at_keeps_milliseconds_and_lossless_claw_truncates_them(tmp_path):
    t = read_transcript(write(tmp_path, [HEADER, msg("a", None, ts=1767225600999)]))
    assert t.messages[0].created_at == "2026-01-01T00:00:00.999Z"
    assert t.messages[0].created_at_lc == "2026-01-01 00:00:00"


def test_token_formula_weights_cjk_astral_and_ascii():
    assert estimate_tokens("abcd") == 1 and estimate_tokens("漢字") == 3 and estimate_tokens("😀") == 2
    assert js_number(1.0) == "1" and js_number(1e21) == "1e+21" and js_number(1e-7) == "1e-7"
    assert js_number(0.000001) == "0.000001" and js_number(123.5) == "123.5"


# --------------------------------------------------------------------------- discovery
def test_discovery_takes_live_files_and_archives_only_when_named(tmp_path):
    d = tmp_path / "sessions"
    d.mkdir()
    names = ["abc.jsonl", "abc-topic-7.jsonl", "abc.jsonl.reset.2026-08-01T08-25-10.924Z",
             "abc.jsonl.deleted.2026-08-01T08-25-10.924Z", "abc.checkpoint.0f1e.jsonl",
             "abc.trajectory.jsonl", "abc.jsonl.corrupt-2026-01-01-deadbeef.jsonl", "sessions.json", "notes.txt"]
    for n in names:
        (d / n).write_text("")
    (d / "nested").mkdir()
    (d / "nested" / "deep.jsonl").write_text("")
    files, skipped = discover_transcripts([d], set())
    assert sorted(f.name for f in files) == ["abc-topic-7.jsonl", "abc.jsonl"]
    reasons = {p.name: r for p, r in skipped}
    assert "archive" in reasons["abc.jsonl.reset.2026-08-01T08-25-10.924Z"]
    assert reasons["abc.checkpoint.0f1e.jsonl"] == "compaction checkpoint copy"
    assert reasons["abc.trajectory.jsonl"] == "trajectory file"
    assert "corrupt" in reasons["abc.jsonl.corrupt-2026-01-01-deadbeef.jsonl"]
    archive = d / "abc.jsonl.reset.2026-08-01T08-25-10.924Z"
    files, skipped = discover_transcripts([archive, d / "abc.checkpoint.0f1e.jsonl"],
                                          {archive, d / "abc.checkpoint.0f1e.jsonl"})
    assert files == [archive] and skipped[0][1] == "compaction checkpoint copy"
    _, skipped = discover_transcripts([tmp_path / "missing.jsonl"], set())
    assert skipped[0][1] == "no such file or directory"


def test_sessions_json_maps_session_ids_to_keys_and_tolerates_junk(tmp_path):
    (tmp_path / "sessions.json").write_text(json.dumps({
        "agent:main:main": {"sessionId": "s1", "updatedAt": 1},
        "agent:main:telegram:direct:42": {"sessionId": "s2", "sessionFile": "s2-topic-9.jsonl"},
        "broken": "not an object", "nosid": {"updatedAt": 3}, "agent:x": {"sessionId": 7}}))
    assert load_session_keys(tmp_path) == {"s1": "agent:main:main", "s2": "agent:main:telegram:direct:42",
                                           "s2-topic-9": "agent:main:telegram:direct:42"}
    (tmp_path / "sessions.json").write_text("{not json")
    assert load_session_keys(tmp_path) == {}
    assert load_session_keys(tmp_path / "nowhere") == {}


# --------------------------------------------------------------------------- property
_garbage = st.one_of(
    st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b),
    st.sampled_from([b"{", b'{"type":"message","id":"zz', b"null", b"[]", b"\xff\xfe", b"42", b'"str"']))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 8), branch_at=st.integers(0, 7),
       garbage=st.lists(st.tuples(st.integers(0, 20), _garbage), max_size=6),
       texts=st.lists(st.text(max_size=12), min_size=16, max_size=16))
def test_garbage_lines_never_change_the_messages(tmp_path_factory, n, branch_at, garbage, texts):
    entries = [HEADER]
    prev = None
    for i in range(n):
        entries.append(msg(f"e{i}", prev, "user" if i % 2 == 0 else "assistant", texts[i]))
        prev = f"e{i}"
    for i in range(n, n + 3):  # a branch from an earlier entry, which becomes the active path
        parent = f"e{min(branch_at, n - 1)}" if i == n else f"e{i - 1}"
        entries.append(msg(f"e{i}", parent, "user", texts[i]))
    clean = [json.dumps(e, ensure_ascii=False).encode() for e in entries]
    dirty = list(clean)
    for pos, junk in sorted(garbage, reverse=True):
        try:
            value = json.loads(junk)
        except ValueError:
            value = None
        if isinstance(value, dict) or not junk.strip():
            continue
        dirty.insert(1 + pos % len(dirty), junk)  # never before the header
    d = tmp_path_factory.mktemp("prop")
    a, b = d / "clean.jsonl", d / "dirty.jsonl"
    a.write_bytes(b"\n".join(clean) + b"\n")
    b.write_bytes(b"\n".join(dirty) + b"\n")
    ta, tb = read_transcript(a), read_transcript(b)
    def key(t):
        return [(m.entry_id, m.role, m.content, m.token_count, m.identity_hash) for m in t.messages]

    assert key(ta) == key(tb)


def _estimate_tokens_per_code_point(text: str) -> int:
    """lossless-claw's estimateTokens as written: a loop over the code points, summing their weights."""
    import math

    def cjk(cp: int) -> bool:
        return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
                or 0x2A700 <= cp <= 0x2EBEF or 0x3000 <= cp <= 0x303F or 0x3040 <= cp <= 0x30FF
                or 0xAC00 <= cp <= 0xD7AF or 0xFF00 <= cp <= 0xFFEF)
    return math.ceil(sum(1.5 if cjk(ord(c)) else 2.0 if ord(c) > 0xFFFF else 0.25 for c in text))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=60))
def test_the_token_estimate_equals_lossless_claws_per_code_point_sum(text):
    assert estimate_tokens(text) == _estimate_tokens_per_code_point(text)


@pytest.mark.parametrize("edge", ["\u4dff\u4e00\u9fff\ua000", "\U0001ffff\U00020000\U0002a6df\U0002a6e0",
                                  "\U0002a6ff\U0002a700\U0002ebef\U0002ebf0\U0010ffff", "\u2fff\u3000\u30ff\u3100",
                                  "\uabff\uac00\ud7af\ud7b0\ud800\udfff", "\ufeff\uff00\uffef\ufff0é"])
def test_the_token_estimate_holds_at_every_range_boundary(edge):
    assert estimate_tokens(edge) == _estimate_tokens_per_code_point(edge)
