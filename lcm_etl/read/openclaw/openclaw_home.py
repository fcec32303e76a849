"""Where an OpenClaw installation keeps its state, found the way OpenClaw 2026.9.6 itself finds it (its
`resolveStateDir`, `resolveRequiredHomeDir`, `applyCliProfileEnv` and agent database registry; the fixtures
in fixtures/openclaw-hidden/ were written by it).

    state dir   $OPENCLAW_STATE_DIR (a leading `~` is the effective home), else <home>/.openclaw, else the
                legacy <home>/.clawdbot when only it exists; <home> = $OPENCLAW_HOME (a leading `~` is $HOME),
                else $HOME
    --profile   <home>/.openclaw-<name> (`default`: <home>/.openclaw), as `openclaw --profile <name>`
    agent DBs   <state>/agents/<id>/agent/openclaw-agent.sqlite, and every database registered in
                <state>/state/openclaw.sqlite `agent_databases` (an agent with a custom agentDir keeps its
                database outside the state dir; the registry is the only place that says where)

Every answer is computed from the environment passed in (the process's by default), so nothing here is global.
"""
from __future__ import annotations

import os
import re
from lcm_etl.sqlite_runtime import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from lcm_etl import sqlite_runtime
from lcm_etl.read.findings import finding
from lcm_etl.errors import BadInput, LcmEtlError
from lcm_etl.read.snapshot.sqlite_copy import expand, take_snapshot

STATE_NAME = ".openclaw"
LEGACY_NAME = ".clawdbot"
REGISTRY = Path("state") / "openclaw.sqlite"
LCM_DB = "lcm.db"
# OpenClaw's isValidProfileName (profile-utils): a name that is also a safe folder suffix
_PROFILE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.IGNORECASE)


def _environ(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def _set(env: Mapping[str, str], name: str) -> str | None:
    value = (env.get(name) or "").strip()
    return value or None


def _os_home(env: Mapping[str, str]) -> Path:
    """$HOME, else $USERPROFILE, else the account's home (OpenClaw's fallbacks, in its order)."""
    found = _set(env, "HOME") or _set(env, "USERPROFILE")
    return Path(found) if found else Path.home()


def _tilde(value: str, home: Path) -> Path:
    """A leading `~` (alone or before a separator) against `home`; then absolute, as node's path.resolve."""
    if value == "~" or value.startswith(("~/", "~\\")):
        value = str(home) + value[1:]
    return Path(os.path.abspath(value))


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """OpenClaw's effective home (resolveRequiredHomeDir): $OPENCLAW_HOME, its `~` being $HOME; else $HOME."""
    env = _environ(env)
    custom = _set(env, "OPENCLAW_HOME")
    return _tilde(custom, _os_home(env)) if custom else _os_home(env)


def state_dir(env: Mapping[str, str] | None = None, profile: str | None = None) -> Path:
    """The state dir OpenClaw uses (resolveStateDir), or the one `openclaw --profile <profile>` uses."""
    env = _environ(env)
    home = home_dir(env)
    explicit = _set(env, "OPENCLAW_STATE_DIR")
    if profile is not None:
        chosen = profile_dir(profile, home)
        # applyCliProfileEnv keeps an explicit OPENCLAW_STATE_DIR, unless it is merely the state dir of the
        # profile the environment inherited (switching profiles switches that one too)
        inherited = _set(env, "OPENCLAW_PROFILE") or "default"
        if explicit is None or _tilde(explicit, home) == _named(inherited, home):
            return chosen
    if explicit is not None:
        return _tilde(explicit, home)
    current, legacy = home / STATE_NAME, home / LEGACY_NAME
    return legacy if not current.exists() and legacy.exists() else current


def profile_dir(profile: str, home: Path) -> Path:
    """<home>/.openclaw-<profile> (resolveProfileStateDir); `default`, in any case, is <home>/.openclaw."""
    if not is_profile_name(profile):
        raise BadInput(f"--profile {profile!r} is not a profile name: letters, digits, '_' and '-', starting with a "
                       "letter or digit, at most 64 characters (as OpenClaw's --profile)")
    return _named(profile, home)


def is_profile_name(name: str) -> bool:
    return _PROFILE.fullmatch(name) is not None


def _named(profile: str, home: Path) -> Path:
    return home / (STATE_NAME if profile.lower() == "default" else f"{STATE_NAME}-{profile}")


def default_lcm_db(env: Mapping[str, str] | None = None) -> Path:
    """lossless-claw's database of the default installation: <state dir>/lcm.db."""
    return state_dir(env) / LCM_DB


def lcm_db_beside(sessions: list[Path], env: Mapping[str, str] | None = None) -> Path:
    """The lcm.db that goes with what --sessions names: the named state folder's (not the caller's home's), or
    the default installation's when no state folder is named. Two named state folders that each hold one are
    ambiguous: which one the transcripts are to be checked against is the user's to say (--src)."""
    states = [p for p in sessions if p.is_dir() and is_state_dir(p)]
    if not states:
        return default_lcm_db(env)
    held = [s / LCM_DB for s in states if (s / LCM_DB).is_file()]
    if len(held) > 1:
        raise BadInput(f"--sessions names {len(held)} state folders that each hold an lcm.db ({held[0]}, {held[1]}): "
                       "pass --src with the one to audit, or audit each state folder on its own")
    return held[0] if held else states[0] / LCM_DB


@dataclass(frozen=True)
class Sources:
    """What `reconcile` and `audit` read, one decision for both (so the two judge the same sources): the
    transcripts --sessions names (or the --profile's state folder; nothing named: the default state folder, its
    agents and the databases it registers), and the lcm.db whose rows count: --src, else the one beside the named
    state folder (or the default installation's), read when it exists (`lcm_db`)."""
    sessions: list[str]
    src: Path | None            # --src: must exist
    beside: Path | None         # no --src: the lcm.db looked for
    installation: bool          # nothing named, and the default state folder is one: read it whole

    @property
    def lcm_db(self) -> Path | None:
        return self.src or (self.beside if self.beside is not None and self.beside.exists() else None)


def sources(src: str | None, sessions: list[str], profile: str | None, env: Mapping[str, str] | None = None) -> Sources:
    named = profile_sessions(profile, sessions, env)
    if src:
        return Sources(named, expand(src), None, False)
    return Sources(named, None, lcm_db_beside([expand(p) for p in named], env),
                   not named and is_state_dir(state_dir(env)))


def profile_sessions(profile: str | None, sessions: list[str], env: Mapping[str, str] | None = None) -> list[str]:
    """What a command reads of OpenClaw's transcripts: --sessions, or the --profile's state folder."""
    if profile is None:
        return sessions
    if sessions:
        raise BadInput("--profile names the state folder to read and --sessions the paths to read instead: "
                       "give one of them")
    return [str(profile_state(profile, env))]


def profile_state(profile: str, env: Mapping[str, str] | None = None) -> Path:
    """The --profile's state folder, which must exist (a misspelt profile is not an empty installation)."""
    state = state_dir(env, profile=profile)
    if not state.is_dir():
        raise BadInput(f"no OpenClaw state folder for --profile {profile}: {state} does not exist")
    return state


def is_state_dir(folder: Path) -> bool:
    """A folder OpenClaw keeps state in: agent folders, or the gateway's state DB (its agents may all live
    in custom agentDirs elsewhere)."""
    try:
        return (folder / "agents").is_dir() or (folder / REGISTRY).is_file()
    except OSError:   # a state/ folder that cannot be read: a state folder still (its registry read is a finding)
        return True


@dataclass
class Registered:
    """The databases a state dir's registry names: those that exist (each with the registry's words for it), and
    findings (audit's FINDING_KEYS) for a registry that cannot be read or a database it names in vain: an agent
    never read is history audit cannot vouch for."""
    stores: dict[Path, str] = field(default_factory=dict)
    findings: list[dict] = field(default_factory=list)


def registry_finding(problem: str, path: Path, detail: str) -> dict:
    return finding("agent database", path, problem, detail=detail)


def registered_databases(state: Path) -> Registered:
    """Every agent database `<state>/state/openclaw.sqlite` registers (agent_databases.path: relative to the state
    dir, or absolute). No registry, or one without the table (installs before 2026.7.2), registers nothing. The
    registry is read from a private snapshot: opening it in place would create -shm/-wal files beside it."""
    found = Registered()
    registry = state / REGISTRY
    if not registry.is_file():
        return found
    try:
        snapshot = take_snapshot(registry, "OpenClaw state database")
    except LcmEtlError as exc:
        found.findings.append(registry_finding("registry not read", registry, str(exc)))
        return found
    try:
        with closing(sqlite_runtime.connect(snapshot.path)) as con:
            held = sqlite_runtime.has_table(con, "agent_databases")
            rows = con.execute("SELECT agent_id, path FROM agent_databases ORDER BY agent_id, path").fetchall() \
                if held else []
    except sqlite3.Error as exc:   # a damaged file: which agents it registers is unknown
        found.findings.append(registry_finding("registry not read", registry, f"its agent_databases: {exc}"))
        rows = []
    finally:
        snapshot.close()
    for agent, stored in rows:
        if not isinstance(stored, str) or not stored.strip():
            continue
        path = Path(stored) if os.path.isabs(stored) else state / stored
        where = f"registered for agent {agent} in {registry}"
        try:
            there = path.is_file()
        except OSError as exc:   # a custom agentDir another user's mode bits hide
            found.findings.append(registry_finding(f"registered, cannot be read ({exc.strerror or exc})", path, where))
            continue
        if there:
            found.stores[path] = where
        else:
            found.findings.append(registry_finding("registered, not found", path, where))
    return found
