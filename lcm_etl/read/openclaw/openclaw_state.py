"""What `--sessions` names, sorted into what reconcile reads: session stores, live JSONL files, archives.

OpenClaw's state folder (found as OpenClaw finds it: lcm_etl/read/openclaw/openclaw_home.py) holds one folder per agent:

    agents/<agentId>/agent/openclaw-agent.sqlite        the session store (OpenClaw 2026.7.2+)
    agents/<agentId>/sessions/<id>.jsonl                 a live JSONL transcript (legacy: OpenClaw <= 2026.7.1)
    agents/<agentId>/sessions/<id>.jsonl.deleted.<ts>.<generation>.zst    a published archive (and .reset.)
    agents/<agentId>/session-sqlite-import-archive/<key>.<id>.jsonl.imported-<ms>   the doctor's originals

and registers every agent database in `state/openclaw.sqlite` (an agent with a custom agentDir keeps its store
outside the state folder). `--sessions` takes any of: a store or the folder holding it, an agent folder, a state
folder (its agents' and its registered stores), a sessions folder, a JSONL file (or an archive file). Without it,
the state folder is read whole. Archives found in a folder are listed and read (--exclude-deleted leaves out those of
sessions deleted on purpose); a file named on the command line is always read.
"""
from __future__ import annotations

import os
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from lcm_etl import sqlite_runtime
from lcm_etl.sqlite_runtime import sqlite3
from lcm_etl.read.findings import Unreadable, finding, open_regular, read_regular
from lcm_etl.read.openclaw.openclaw_home import is_state_dir, registered_databases, state_dir
from lcm_etl.read.snapshot.sqlite_copy import SQLITE_HEADER
from lcm_etl.read.transcript.transcript_files import LEGACY_STORE, classify_file_name, discover_transcripts, file_stem

STORE_NAME = "openclaw-agent.sqlite"
IMPORT_ARCHIVE = "session-sqlite-import-archive"


@dataclass
class Inputs:
    stores: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)              # live JSONL transcripts
    archive_files: list[Path] = field(default_factory=list)      # archives found in folders
    named: set[Path] = field(default_factory=set)                # files named on the command line: always read
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    seen: set[Path] = field(default_factory=set)                 # the real paths of all of the above (_add)
    registered: dict[Path, str] = field(default_factory=dict)    # a store found by a registry: where it is named
    findings: list[dict] = field(default_factory=list)           # folders, registries, registered stores unread


def is_sqlite(path: Path) -> bool:
    try:
        with open(open_regular(path), "rb") as fh:   # a FIFO is never opened (findings.open_regular)
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except (OSError, Unreadable):
        return False


def is_session_store(db: Path, query: str = "mode=ro") -> bool:
    """A (snapshot of a) SQLite file holding OpenClaw's transcripts and no lossless-claw messages."""
    try:
        with closing(sqlite_runtime.connect(db, query)) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except (sqlite3.Error, UnicodeDecodeError):   # not SQLite, or a damaged schema: the reader says what is wrong
        return False
    return "transcript_events" in names and "messages" not in names


def find_inputs(paths: list[Path]) -> Inputs:
    """Sort the named paths (none: the state folder) into stores, live files and archives."""
    out = Inputs()
    for p in paths or [state_dir()]:   # the default installation's (OpenClaw's own rules)
        if p.is_dir():
            _look(_folder, p, out)
        elif p.exists():
            _named_file(p, out)
        else:
            out.skipped.append((p, "no such file or directory"))
    return out


def _look(into, folder: Path, out: Inputs) -> None:
    """`into(folder, out)`; a folder that cannot be listed (another user's mode bits) is a finding, and the
    folders beside it are still read."""
    try:
        into(folder, out)
    except OSError as exc:
        # listing a folder fails on the folder, looking at a file in it on the file: either way, name the folder
        named = Path(exc.filename) if exc.filename else folder
        where = named if os.path.isdir(named) and not os.access(named, os.R_OK | os.X_OK) else named.parent
        out.findings.append(finding("folder", where, f"cannot be read ({exc.strerror or exc})"))


def _named_file(p: Path, out: Inputs) -> None:
    out.named.add(p.resolve())
    if is_sqlite(p):
        _add(out, out.stores, p)
        return
    if classify_file_name(p.name) == "archive":
        _add(out, out.archive_files, p)
    else:
        files, skipped = discover_transcripts([p], {p})
        for f in files:
            _add(out, out.files, f)
        out.skipped += skipped


def _folder(p: Path, out: Inputs) -> None:
    agents = p / "agents"
    if is_state_dir(p):                     # a state folder: every agent's, then the stores it registers elsewhere
        for agent in sorted(a for a in agents.iterdir() if a.is_dir()) if agents.is_dir() else []:
            _look(_agent, agent, out)
        _look(_registered, p, out)
    elif (p / "agent").is_dir() or (p / "sessions").is_dir() or (p / IMPORT_ARCHIVE).is_dir():
        _agent(p, out)                      # an agent folder
    elif (p / STORE_NAME).is_file():        # the folder that holds a store (an agent's agent/): its store
        _add(out, out.stores, p / STORE_NAME)
    else:
        _sessions(p, out)                   # a sessions folder (or any folder of transcripts)


def _registered(state: Path, out: Inputs) -> None:
    registered = registered_databases(state)
    for store, where in registered.stores.items():   # one already found under agents/ is the same file: read once
        if _add(out, out.stores, store):
            out.registered[store] = where
    out.findings += registered.findings


def _agent(agent: Path, out: Inputs) -> None:
    os.listdir(agent)   # an agent folder that cannot be listed is the finding, not each folder in it
    _look(_agent_store, agent / "agent", out)
    for folder in (agent / "sessions", agent / IMPORT_ARCHIVE):
        _look(_sessions, folder, out)


def _agent_store(folder: Path, out: Inputs) -> None:
    if (folder / STORE_NAME).is_file():
        _add(out, out.stores, folder / STORE_NAME)


def _sessions(folder: Path, out: Inputs) -> None:
    if not folder.is_dir():
        return
    files, skipped = discover_transcripts([folder], set())
    for f in files:
        _add(out, out.files, f)
    for path, reason in skipped:
        if classify_file_name(path.name) == "archive":
            _add(out, out.archive_files, path)
        else:
            out.skipped.append((path, reason))


def _add(out: Inputs, into: list[Path], p: Path) -> bool:
    """`p` into its list once, by real path (a symlink or another spelling of a file is the same file). A set, not a
    scan of the list: a folder of 1,000 archives took 500,000 resolve() calls, about 100 s. True: it was new."""
    real = p.resolve()
    if real in out.seen:
        return False
    out.seen.add(real)
    into.append(p)
    return True


def archive_kind(path: Path) -> str:
    """'deleted', 'reset', 'bak' or 'imported' (the doctor's original), from an archive file's name."""
    name = path.name
    for kind in ("deleted", "reset", "bak"):
        if f".jsonl.{kind}." in name:
            return kind
    return "imported" if ".jsonl.imported-" in name else "archive"


def archive_session_id(path: Path) -> str:
    """The session id an archive file's name holds: `<id>.jsonl.<kind>...`, or the doctor's
    `<sanitized key>.<id>.jsonl.imported-<ms>` (the key's ':' became '_', so it cannot be told apart
    from a '.' inside it: the id is the last dotted part before .jsonl)."""
    stem = file_stem(path)
    return stem.rsplit(".", 1)[-1] if archive_kind(path) == "imported" else stem


def legacy_session_keys(folder: Path) -> dict[str, str]:
    """session id -> session key from the doctor's `legacy-store.sessions.json.imported-*` beside its originals
    (the sessions.json that the import replaced)."""
    keys: dict[str, str] = {}
    for f in sorted(folder.glob(f"{LEGACY_STORE}*")):
        try:
            store = orjson.loads(read_regular(f))
        except (Unreadable, orjson.JSONDecodeError):
            continue
        if isinstance(store, dict):
            for key, value in store.items():
                sid = value.get("sessionId") if isinstance(value, dict) else None
                if isinstance(sid, str) and sid.strip() and key.strip():
                    keys.setdefault(sid.strip(), key)
    return keys
