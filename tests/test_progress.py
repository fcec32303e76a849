"""Progress bars (issue 12 defect 8): on a terminal a bar for every phase of a run, from start to end;
nothing of tqdm without a terminal, under --json or under --quiet.

The CLI runs with its stderr on a pseudo-terminal (os.openpty), given a size: tqdm draws nothing on a
terminal zero columns wide, which is what a fresh pty reports.
"""
from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

from conftest import LCM_ETL, copy_fixture, make_native_target
from test_sources import PARTS_WITH_ORDINAL, peer_source

DEADLINE_S = 600   # a hung run, not a slow machine


def on_a_terminal(*args) -> tuple[int, str, str]:
    """Run lcm-etl with stderr on a 160-column pseudo-terminal: (exit code, stdout, what the terminal got)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen([str(LCM_ETL), *map(str, args)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave)
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:   # EIO: every holder of the terminal has closed it
                break
            if not data:
                break
            screen += data
        out = proc.communicate(timeout=DEADLINE_S)[0].decode()
    finally:
        os.close(master)
    return proc.returncode, out, screen.decode(errors="replace")


def bars(screen: str) -> list[str]:
    """The descriptions of the bars drawn, in order of first appearance."""
    seen = []
    for desc in re.findall(r"([a-z][a-z ]*[a-z]): +\d+%\|", screen):
        if desc not in seen:
            seen.append(desc)
    return seen


def test_a_new_target_shows_a_bar_for_every_phase_of_the_run_on_a_terminal(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    code, out, screen = on_a_terminal("migrate", "--src", src, "--dest", tmp_path / "out" / "lcm.sqlite")
    assert code == 0, screen
    assert bars(screen) == ["reading source", "planning", "staging", "building"], screen
    for step in ("messages", "parts and FTS rows", "copying into the target", "checking and linking"):
        assert step in screen, step
    assert "Done." in out


def test_the_reading_source_bar_counts_the_bytes_of_the_copy_up_to_the_source_size(tmp_path):
    from tqdm import tqdm

    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    size = sum(p.stat().st_size for p in (src, Path(f"{src}-wal")) if p.exists())
    code, _, screen = on_a_terminal("migrate", "--src", src, "--dest", tmp_path / "out" / "lcm.sqlite")
    assert code == 0, screen
    shown = tqdm.format_sizeof(size, divisor=1024)   # 308k: how tqdm writes a size
    assert re.search(rf"reading source: +0%\|[^|]*\| 0\.00B/{shown}B ", screen), screen
    assert re.search(rf"reading source: 100%\|[^|]*\| {shown}B/{shown}B ", screen), screen


def test_an_existing_target_shows_a_bar_for_every_phase_of_the_run_on_a_terminal(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    make_native_target(target).close()
    code, _, screen = on_a_terminal("migrate", "--src", src, "--dest", target)
    assert code == 0, screen
    assert bars(screen) == ["reading source", "planning", "staging", "preparing", "writing"], screen
    for step in ("indexing the plan", "reading the target", "flattening parts"):
        assert step in screen, step


def test_a_new_target_from_text_ids_shows_its_phases_too(tmp_path):
    src = peer_source(tmp_path, PARTS_WITH_ORDINAL)
    code, _, screen = on_a_terminal("migrate", "--src", src, "--dest", tmp_path / "out" / "lcm.sqlite")
    assert code == 0, screen
    assert bars(screen) == ["reading source", "planning", "staging", "building"], screen
    for step in ("messages", "flattening parts", "checking and linking"):
        assert step in screen, step


def test_no_bar_is_drawn_under_json_or_quiet_even_on_a_terminal(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    for flag, n in (("--json", 1), ("--quiet", 2)):
        code, _, screen = on_a_terminal("migrate", "--src", src, "--dest", tmp_path / f"out{n}" / "lcm.sqlite", flag)
        assert code == 0, screen
        assert screen == "", screen


def test_no_bar_is_drawn_without_a_terminal(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    proc = subprocess.run([str(LCM_ETL), "migrate", "--src", str(src), "--dest", str(tmp_path / "out" / "lcm.sqlite")],
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "%|" not in proc.stdout and "\r" not in proc.stdout


HIDDEN = Path(__file__).resolve().parent.parent / "fixtures" / "openclaw-hidden"
STATES = [a for s in ("cold", "evicted", "archive-tier", "pending") for a in ("--sessions", HIDDEN / s / "state")]


def test_reconcile_shows_a_ticker_while_it_reads_the_transcripts_and_bars_for_its_other_phases(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    code, out, screen = on_a_terminal("reconcile", "--src", src, *STATES, "--dest", tmp_path / "out" / "lcm.sqlite")
    assert code == 0, screen
    counts = [int(n) for n in re.findall(r"reading transcripts: (\d+) transcripts \[\d\d:\d\d\]", screen)]
    assert counts and counts[0] == 0 and counts == sorted(counts), screen   # from the first second, counting up
    assert bars(screen) == ["reading source", "planning", "building"], screen
    assert screen.index("reading source") < screen.index("reading transcripts") < screen.index("planning: ")
    assert "lcm-etl reconcile: Done." in out


def test_audit_shows_the_transcripts_ticker_on_a_terminal_and_nothing_under_json(tmp_path):
    target = tmp_path / "out" / "lcm.sqlite"
    make_native_target(target).close()
    code, _, screen = on_a_terminal("audit", *STATES, "--dest", target)
    assert code == 3, screen
    assert re.search(r"reading transcripts: \d+ transcripts \[", screen) and bars(screen) == ["planning"], screen
    for quiet in ("--quiet", "--json"):   # (one store under --json: on_a_terminal reads stdout only at the end)
        code, _, screen = on_a_terminal("audit", *(STATES if quiet == "--quiet" else STATES[-2:]), "--dest", target,
                                        quiet)
        assert (code, screen) == (3, ""), quiet


def test_reconcile_draws_nothing_when_piped(tmp_path):
    proc = subprocess.run([str(LCM_ETL), "reconcile", *map(str, STATES), "--dest", str(tmp_path / "t.sqlite")],
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "\r" not in proc.stdout and "transcripts [" not in proc.stdout


def test_inspect_shows_a_bar_whose_clock_runs_while_it_reads_and_nothing_under_quiet(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    code, out, screen = on_a_terminal("inspect", "--src", src)
    assert (code, bars(screen)) == (0, ["inspecting"]), screen
    assert out.startswith(f"source: {src}\n")
    assert on_a_terminal("inspect", "--src", src, "--quiet") == (0, "", "")
