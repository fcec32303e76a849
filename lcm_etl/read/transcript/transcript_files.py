"""Which files in an OpenClaw sessions folder are transcripts, and the session key each one is filed under.

OpenClaw names a live transcript ``<session id>.jsonl`` (or ``<id>-topic-<t>.jsonl``) and keeps beside it
archives, compaction checkpoints, trajectories and corrupt-header backups that must not be imported as
sessions of their own; ``sessions.json`` maps session keys to session ids and files.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from lcm_etl.read.findings import Unreadable, read_regular

_SESSION_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$", re.IGNORECASE)
# published archives (`.reset.`/`.deleted.`/`.bak.`) and the doctor's originals of imported files (`.imported-<ms>`)
_ARCHIVE_RE = re.compile(r"\.jsonl\.(reset|deleted|bak)\.[^/]+$|\.jsonl\.imported-\d+$")


def file_stem(path: Path) -> str:
    """The session id a file name stands for: its name up to ``.jsonl`` (archives keep it: ``<id>.jsonl.reset.<ts>``)."""
    name = path.name
    return name[: name.index(".jsonl")] if ".jsonl" in name else path.stem


# the doctor's copy of the sessions.json its import replaced (openclaw_state.py reads the keys in it)
LEGACY_STORE = "legacy-store.sessions.json.imported-"


def classify_file_name(name: str) -> str:
    """'live', 'archive', or the reason a file in a sessions folder is not a transcript."""
    if name == "sessions.json" or name.startswith("sessions.json."):
        return "session store"
    if ".checkpoint." in name:
        return "compaction checkpoint copy"
    if name.endswith(".trajectory.jsonl") or ".trajectory-path." in name:
        return "trajectory file"
    if ".corrupt-" in name:
        return "corrupt-header backup"
    if _ARCHIVE_RE.search(name):
        return "archive"
    if name.endswith(".jsonl") and _SESSION_ID_RE.match(name[:-6]):
        return "live"
    return "not a transcript file name"


def discover_transcripts(paths: list[Path], explicit: set) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Transcript files to read, and (path, reason) for what was left out.

    A folder is scanned non-recursively for live ``<id>.jsonl`` / ``<id>-topic-<t>.jsonl`` files.
    Archives (``.reset.``/``.deleted.``/``.bak.``) are taken only when named explicitly as a file;
    checkpoint copies, trajectories and ``.corrupt-`` backups never are. An explicitly named file with
    any other name is taken (``read_transcript`` then decides whether it is a transcript).
    """
    explicit_resolved = {Path(p).expanduser().resolve() for p in explicit}
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[Path] = set()

    def consider(p: Path, named: bool) -> None:
        kind = classify_file_name(p.name)
        if kind == "session store" or p.name.startswith(LEGACY_STORE):
            return   # read for the session keys (session_keys, openclaw_state.py): not a file left out
        ok = kind == "live" or (named and kind in ("archive", "not a transcript file name"))
        if not ok:
            reason = "archive (name the file explicitly to import it)" if kind == "archive" else kind
            skipped.append((p, reason))
        elif p.resolve() not in seen:
            seen.add(p.resolve())
            files.append(p)

    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if not child.is_dir():   # a FIFO or device named as a transcript too: its read says what it is
                    consider(child, False)
        elif p.exists():
            consider(p, p.resolve() in explicit_resolved)
        else:
            skipped.append((p, "no such file or directory"))
    return files, skipped


def load_session_keys(folder: Path | str) -> dict[str, str]:
    """session id -> session key from ``<folder>/sessions.json``; malformed entries are ignored."""
    try:   # a FIFO named sessions.json is never opened (findings.read_regular)
        store = orjson.loads(read_regular(Path(folder, "sessions.json")))
    except (Unreadable, orjson.JSONDecodeError):
        return {}
    keys: dict[str, str] = {}
    if not isinstance(store, dict):
        return keys
    for key, value in store.items():
        if not isinstance(value, dict) or not key.strip():
            continue
        sid = value.get("sessionId")
        if isinstance(sid, str) and sid.strip():
            keys.setdefault(sid.strip(), key)
        sfile = value.get("sessionFile")
        if isinstance(sfile, str) and sfile.strip():
            keys.setdefault(file_stem(Path(sfile.strip())), key)
    return keys
