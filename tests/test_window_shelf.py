"""Transcripts (lcm_etl/read/window_shelf.py): a list whose shelved entries live in the run's folder behaves as the
list of the transcripts it was given, in order, by index and in iteration, and gives a shelved window its reload
back."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lcm_etl.read.transcript.transcripts import ReadMark, Transcript, TranscriptReport
from lcm_etl.read.window_shelf import Transcripts


def transcript(n: int, path: str = "/stores/a.sqlite") -> Transcript:
    return Transcript(Path(path), f"session-{n}", None, 4, [], TranscriptReport(lines_total=n),
                      mark=ReadMark(n, f"watermark:{n}", n, n, f"tip-{n}", 0, n), read_count=n, staged=True,
                      identities="spooled")


def facts(t: Transcript) -> tuple:
    return t.path, t.header_id, t.mark, t.report.lines_total, t.read_count


# an operation: ("shelve", n), ("append", n), ("replace", index, n) or ("get", index)
operations = st.lists(st.one_of(
    st.tuples(st.just("shelve"), st.integers(0, 10_000)),
    st.tuples(st.just("append"), st.integers(0, 10_000)),
    st.tuples(st.just("replace"), st.integers(0, 50), st.integers(0, 10_000)),
    st.tuples(st.just("get"), st.integers(0, 50))), max_size=40)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_shelved_appended_and_replaced_transcripts_read_back_as_the_list_they_were_given(tmp_path_factory, ops):
    folder = tmp_path_factory.mktemp("shelf")
    shelf, model = Transcripts(folder), []
    try:
        for op in ops:
            if op[0] == "get":
                if model:
                    assert facts(shelf[op[1] % len(model)]) == facts(model[op[1] % len(model)])
            elif op[0] == "replace":
                if not model:
                    continue
                i = op[1] % len(model)
                shelf[i] = transcript(op[2])
                model[i] = transcript(op[2])
            else:
                t = transcript(op[1])
                shelf.shelve(t) if op[0] == "shelve" else shelf.append(t)
                model.append(transcript(op[1]))
        assert len(shelf) == len(model)
        assert [facts(t) for t in shelf] == [facts(t) for t in model]                        # in iteration
        assert [facts(shelf[i]) for i in reversed(range(len(shelf)))] == [facts(t) for t in reversed(model)]  # by index
        assert shelf.paths() == {t.path for t in model}
        assert {i for i, _ in shelf.in_memory()} == {i for i, op in enumerate(_kinds(ops)) if op != "shelve"}
    finally:
        shelf.close()


def _kinds(ops) -> list[str]:
    """What each index holds after the operations: shelved, or in memory (appended or replaced)."""
    kinds: list[str] = []
    for op in ops:
        if op[0] == "replace":
            if kinds:
                kinds[op[1] % len(kinds)] = "replace"
        elif op[0] != "get":
            kinds.append(op[0])
    return kinds


def test_a_shelved_transcript_is_kept_in_the_file_not_in_memory(tmp_path):
    shelf = Transcripts(tmp_path)
    try:
        shelf.shelve(transcript(1))
        assert shelf.shelved() == 1 and list(shelf.in_memory()) == []
        assert (tmp_path / "windows.sqlite").exists()
        assert facts(shelf[0]) == facts(transcript(1))
    finally:
        shelf.close()


def test_a_shelved_window_gets_its_reload_back_from_what_it_was_shelved_with(tmp_path):
    """A reload holds the open store, which cannot be pickled: shelve keeps what remakes it, revive remakes it."""
    revived = []

    def revive(t: Transcript, remake) -> None:
        revived.append(remake)
        t.reload = lambda: remake

    shelf = Transcripts(tmp_path, revive)
    try:
        t = transcript(1)
        t.reload = lambda: "cannot be pickled"   # a lambda, as an open store, has no pickle
        with pytest.raises((pickle.PicklingError, AttributeError)):
            pickle.dumps(t)
        shelf.shelve(t, ("record", True))
        assert t.reload() == "cannot be pickled"          # the caller's transcript keeps its own
        assert shelf[0].reload() == ("record", True) and revived == [("record", True)]
    finally:
        shelf.close()


def test_a_transcript_that_holds_its_plan_rows_is_not_shelved(tmp_path):
    """Its rows are not in the spool: shelved, the plan (which reads the in-memory ones' tables) would lose them."""
    t = transcript(1)
    t.identities = ("messages", "parts", "abandoned")
    with pytest.raises(AssertionError, match="only a spooled transcript"):
        Transcripts(tmp_path).shelve(t)


def test_transcripts_are_only_appended_and_replaced_never_inserted_or_deleted(tmp_path):
    """Their order is their id: message_id = order << 32 | index."""
    shelf = Transcripts(tmp_path)
    shelf.append(transcript(1))
    with pytest.raises(TypeError, match="only appended"):
        shelf.insert(0, transcript(2))
    with pytest.raises(TypeError, match="never deleted"):
        del shelf[0]


def test_dropping_the_content_keeps_the_count_the_report_tells(tmp_path):
    shelf = Transcripts(tmp_path)
    t = transcript(3)
    t.read_count = None
    t.messages = ["m1", "m2"]   # type: ignore[list-item]
    shelf.append(t)
    shelf.drop_content()
    assert shelf[0].messages == [] and shelf[0].count() == 2
