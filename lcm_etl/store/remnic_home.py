"""Where Remnic reads its LCM store: `<memory dir>/state/lcm.sqlite`, the memory dir found as Remnic's own CLI
finds it (`resolveMemoryDir` in Remnic's packages/remnic-cli/src/index.ts, the spaces manifest as its
packages/remnic-core/src/spaces reads it), so that a run without --dest or --memory-dir writes the file Remnic opens.

The rules, first match wins (RULES below, in this order):

    active space   the spaces manifest <home>/.config/engram/spaces/manifest.json, when it exists: the memoryDir
                   of its activeSpaceId's space (an active space no longer listed falls through, as in Remnic)
    environment    $REMNIC_MEMORY_DIR, else $ENGRAM_MEMORY_DIR
    config file    memoryDir in Remnic's config: $REMNIC_CONFIG_PATH, else $ENGRAM_CONFIG_PATH, else the first
                   that exists of ./remnic.config.json, ./engram.config.json, <home>/.config/remnic/config.json,
                   <home>/.config/engram/config.json; the `remnic` block's (else the `engram` block's), else the
                   top level's (resolveRemnicConfigRecord)
    standalone     <home>/.remnic/memory when it exists, else <home>/.engram/memory when it exists
    OpenClaw       <home>/.openclaw/workspace/memory/local

<home> is $HOME, else the account's home. A leading `~`, `$HOME` or `${HOME}` in any of these values is <home>;
a relative value is taken from the working directory (node's path.resolve). A config file or manifest Remnic
cannot parse is exit 2 here: Remnic fails on it too, so no file can be named as the one it reads.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from lcm_etl.errors import BadInput

MANIFEST = Path(".config") / "engram" / "spaces" / "manifest.json"
CONFIG_FILES = ("./remnic.config.json", "./engram.config.json", "~/.config/remnic/config.json",
                "~/.config/engram/config.json")
STANDALONE = ("~/.remnic/memory", "~/.engram/memory")
OPENCLAW_DIR = "~/.openclaw/workspace/memory/local"
LCM_STORE = Path("state") / "lcm.sqlite"


@dataclass(frozen=True)
class Found:
    """A memory dir and the rule that chose it, as the report's first line says it."""
    memory_dir: Path
    rule: str


@dataclass(frozen=True)
class Where:
    """What the rules read: the environment, the home and the working directory (nothing global)."""
    env: Mapping[str, str]
    home: Path

    def path(self, value: str) -> Path:
        """Remnic's expandTildePath, then path.resolve."""
        for prefix in ("${HOME}", "$HOME", "~"):
            if value == prefix or value.startswith((prefix + "/", prefix + "\\")):
                value = str(self.home) + value[len(prefix):]
                break
        return Path(os.path.abspath(value))

    def var(self, name: str) -> str | None:
        return self.env.get(name) or None   # Remnic's readCompatEnv: an empty value is no value


def _active_space(where: Where) -> Found | None:
    manifest = where.home / MANIFEST
    if not manifest.exists():   # Remnic's existsSync, here and below: what exists is read, or fails as in Remnic
        return None
    data = _json(manifest, "spaces manifest")
    spaces = data.get("spaces") if isinstance(data, dict) else None
    active = data.get("activeSpaceId") if isinstance(data, dict) else None
    for space in spaces if isinstance(spaces, list) else []:
        if isinstance(space, dict) and space.get("id") == active and _text(space.get("memoryDir")):
            return Found(where.path(space["memoryDir"]), f"active space {active!r} in {manifest}")
    return None


def _environment(where: Where) -> Found | None:
    for name in ("REMNIC_MEMORY_DIR", "ENGRAM_MEMORY_DIR"):
        value = where.var(name)
        if value:
            return Found(where.path(value), name)
    return None


def config_file(where: Where) -> Path | None:
    """Remnic's config file (resolveConfigPath): a path from the environment whether or not it exists, else the
    first candidate that exists; None when there is none."""
    named = where.var("REMNIC_CONFIG_PATH") or where.var("ENGRAM_CONFIG_PATH")
    if named:
        return where.path(named)
    return next((p for p in map(where.path, CONFIG_FILES) if p.exists()), None)


def _config(where: Where) -> Found | None:
    path = config_file(where)
    if path is None or not path.exists():
        return None
    data = _json(path, "config file")
    if not isinstance(data, dict):
        raise BadInput(f"Remnic's config file is not a JSON object: {path} (fix it, or pass --memory-dir or --dest)")
    nested = data.get("remnic") if data.get("remnic") is not None else data.get("engram")
    for record in (nested, data):
        if isinstance(record, dict) and _text(record.get("memoryDir")):
            return Found(where.path(record["memoryDir"]), f"memoryDir in {path}")
    return None


def _standalone(where: Where) -> Found | None:
    for folder in STANDALONE:
        if where.path(folder).exists():
            return Found(where.path(folder), f"{folder} exists")
    return None


def _openclaw(where: Where) -> Found:
    return Found(where.path(OPENCLAW_DIR), f"Remnic's default when neither {' nor '.join(STANDALONE)} exists")


RULES: tuple[Callable[[Where], Found | None], ...] = (_active_space, _environment, _config, _standalone, _openclaw)


def remnic_memory_dir(env: Mapping[str, str] | None = None) -> Found:
    """The memory dir Remnic uses, and why."""
    env = os.environ if env is None else env
    where = Where(env, Path(env.get("HOME") or Path.home()))
    for rule in RULES:
        found = rule(where)
        if found is not None:
            return found
    raise AssertionError("the last rule always answers")


def _text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _json(path: Path, what: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"Remnic's {what} cannot be read: {path} ({exc}); Remnic fails on it too: fix it, or pass "
                       "--memory-dir or --dest") from None
