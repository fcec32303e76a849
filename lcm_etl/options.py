"""The options the commands share, declared once (stacked click decorators) so every command spells them the
same, and their value types: a value no command can use is refused where the option is parsed (exit 2, one
line, the same for every command), never later by DuckDB or the writer as an internal error."""
from __future__ import annotations

import os

import click

from lcm_etl.run_options import DEFAULT_MEMORY_LIMIT, size_bytes

MIN_MEMORY = 10**6   # below a megabyte DuckDB cannot even open its in-memory database


class MemorySize(click.ParamType):
    """A DuckDB memory budget such as 96MB; passed on as the user wrote it, once known to be one."""
    name = "size"

    def convert(self, value, param, ctx):
        size = size_bytes(value)
        if size is None or size < MIN_MEMORY:
            self.fail(f"{value!r} is not a memory size of at least 1MB such as 96MB, 2GB or 512MiB", param, ctx)
        return value.strip()


class TextPath(click.ParamType):
    """A path that is text: lcm-etl writes paths into reports, metadata and the ledger, which are UTF-8.
    A name with other bytes arrives as lone surrogates (PEP 383) and is refused here, shown as its bytes."""
    name = "path"

    def convert(self, value, param, ctx):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(value).decode("utf-8", "backslashreplace")
            self.fail(f"{shown} is not valid UTF-8; lcm-etl records paths as text: rename it or pass a path "
                      "without those bytes", param, ctx)
        return value


MEMORY_SIZE = MemorySize()
TEXT_PATH = TextPath()


SOURCE_HELP = "lossless-claw database (default: lcm.db in OpenClaw's state folder, found as OpenClaw finds it)"


def source_option(f, help: str = SOURCE_HELP):
    return click.option("--src", "src", metavar="PATH", type=TEXT_PATH, help=help)(f)


def inspected_option(f):
    """inspect's --src: a lossless-claw database or one of OpenClaw's session stores (lcm_etl/commands/inspect.py)."""
    return source_option(f, SOURCE_HELP.replace("lossless-claw database", "lossless-claw database or an OpenClaw "
                                                "session store (agents/<id>/agent/openclaw-agent.sqlite)"))


def target_options(role: str):
    """--dest / --memory-dir; `role` says what the command does with the target ("to write", "to check")."""
    def decorate(f):
        f = click.option("--memory-dir", metavar="DIR", type=TEXT_PATH,
                         help="Remnic memory dir; the target is DIR/state/lcm.sqlite. With neither option: the "
                              "memory dir Remnic uses, found as Remnic finds it (an active space, "
                              "$REMNIC_MEMORY_DIR, memoryDir in its config file, ~/.remnic/memory, "
                              "~/.engram/memory, else ~/.openclaw/workspace/memory/local; docs/cli.md, \"The "
                              "target\")")(f)
        return click.option("--dest", metavar="PATH", type=TEXT_PATH,
                            help=f"Remnic LCM database (lcm.sqlite) {role}")(f)
    return decorate


def output_options(f):
    """--json, --quiet, --debug, -v: every command prints the same way."""
    f = click.option("--verbose", "-v", count=True, help="-v: the time of each stage on stderr, and a traceback on "
                                                        "errors (as --debug); -vv: of each SQL step too")(f)
    f = click.option("--debug", is_flag=True, help="show a traceback on errors")(f)
    f = click.option("--quiet", "-q", is_flag=True, help="print nothing but errors; the exit code tells the outcome")(f)
    return click.option("--json", "as_json", is_flag=True, help="print the report as one JSON object (no progress bar)")(f)


def key_by_option(f):
    return click.option("--key-by", type=click.Choice(["session-id", "session-key"]), default="session-id",
                        show_default=True, help="what Remnic session ids are made of (docs/mapping.md says when to choose which)")(f)


def session_filter_option(f):
    return click.option("--session-filter", multiple=True, metavar="ID",
                        help="only this resolved session id (repeatable); an id no session has is exit 2")(f)


def transcripts_options(f):
    """--sessions and --exclude-deleted: what reconcile (and audit) read of OpenClaw's transcripts. Everything
    OpenClaw still holds is read by default (docs/mapping.md, "Everything OpenClaw holds"); the flag only narrows."""
    f = click.option("--exclude-deleted", is_flag=True,
                     help="leave out the archives of sessions deleted on purpose (a deleted archive whose session "
                          "no longer exists); they are listed either way. Evicted, reset and cold windows are "
                          "still read")(f)
    return click.option("--sessions", "sessions", multiple=True, metavar="PATH", type=TEXT_PATH,
                        help="an openclaw-agent.sqlite session store (or the folder holding it), an agent folder, a "
                             "state folder, a .jsonl transcript or a sessions folder (repeatable; default: every agent's store and legacy "
                             "JSONL in OpenClaw's state folder: $OPENCLAW_STATE_DIR, else $OPENCLAW_HOME/.openclaw, "
                             "else ~/.openclaw, else ~/.clawdbot; a state folder's agent databases registered "
                             "elsewhere are read too)")(f)


def profile_option(f):
    """--profile: the state folder of `openclaw --profile NAME` instead of the default one."""
    return click.option("--profile", metavar="NAME",
                        help="read OpenClaw's profile NAME, as `openclaw --profile NAME`: the state folder "
                             "<home>/.openclaw-NAME (default: <home>/.openclaw), <home> being $OPENCLAW_HOME, else "
                             "$HOME")(f)


def run_options(f):
    f = output_options(f)
    f = key_by_option(f)
    f = session_filter_option(f)
    return click.option("--dry-run", is_flag=True, help="write nothing, create no file or folder; report what a real run would do")(f)


def memory_limit_option(f):
    return click.option("--memory-limit", type=MEMORY_SIZE, default=DEFAULT_MEMORY_LIMIT, show_default=True, metavar="SIZE",
                        help="DuckDB's memory budget for planning (96MB, 2GB, 512MiB...); it spills to a private folder beyond it")(f)


def lock_timeout_option(f):
    return click.option("--lock-timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
                        metavar="SECONDS", help="how long to wait for a target locked by another writer or lcm-etl "
                                                "run, then fail (exit 1)")(f)


def write_options(f):
    f = memory_limit_option(f)
    f = lock_timeout_option(f)
    f = click.option("--batch-rows", type=click.IntRange(min=100), default=50_000, metavar="N", show_default=True,
                     help="rows per write transaction on an existing target (keeps a live Remnic unblocked)")(f)
    return f


def watch_options(f):
    f = click.option("--interval", type=click.FloatRange(min=0.01), default=None, metavar="SECONDS",
                     help="with --watch: poll period, and how long the inputs must stay quiet before a sync "
                          "[default: 0.5]")(f)
    f = click.option("--watch", is_flag=True, help="stay running; sync again whenever the inputs change "
                                                   "(Ctrl-C or SIGTERM stops, exit 0)")(f)
    return f
