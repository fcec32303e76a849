"""What users of sqlite-utils and dlt expect of a command line (issue 38), in one place for every command:
examples and the command's own exit codes at the end of its --help, the options read from LCM_ETL_<OPTION>,
-v/-vv on stderr, and under --json an error as a JSON object on stdout as well."""
from __future__ import annotations

import sys

import click

from lcm_etl.errors import EXIT_CODES, EXIT_PENDING


# options that name one thing two ways: given one on the command line, the other's LCM_ETL_ variable is not used
_EITHER = (("dest", "memory_dir"), ("src", "profile"))


def command_line_wins(kwargs: dict) -> None:
    """`--dest X` with LCM_ETL_MEMORY_DIR set means X, not "give one of them" (FROM_ENVIRONMENT)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    source = ctx.get_parameter_source
    for pair in _EITHER:
        for given, other in (pair, pair[::-1]):
            if (kwargs.get(given) is not None and source(given) == click.core.ParameterSource.COMMANDLINE
                    and source(other) == click.core.ParameterSource.ENVIRONMENT):
                kwargs[other] = None


def json_error(line: str, code: int) -> None:
    """Under --json an error is a JSON object on stdout too, so a program reading stdout is told why it is empty
    of a report: {"error": the line on stderr without its prefix, "exit_code": ...}."""
    import orjson

    error = line.removeprefix("lcm-etl: ").removeprefix("error: ")
    click.echo(orjson.dumps({"error": error, "exit_code": code}).decode())


def log_to_stderr(verbose: int) -> None:
    """-v: each stage's time (lcm_etl/steps/engine.py), -vv: each SQL step's time and row counts too."""
    import logging

    log = logging.getLogger("lcm_etl")
    log.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("lcm-etl: %(message)s"))
    log.addHandler(handler)


# what each command's --help shows under "Examples:" (docs/cli.md has more); a test checks every command has some
EXAMPLES = {
    "migrate": ["lcm-etl migrate --src ~/.openclaw/lcm.db --memory-dir ~/.remnic/memory",
                "lcm-etl migrate --src ~/.openclaw/lcm.db --dest /tmp/try/lcm.sqlite --dry-run",
                "lcm-etl migrate --watch --src ~/.openclaw/lcm.db --memory-dir ~/.remnic/memory",
                "lcm-etl migrate --discover /srv/openclaw --dest-root /srv/remnic --jobs 4"],
    "reconcile": ["lcm-etl reconcile --memory-dir ~/.remnic/memory      # every transcript OpenClaw holds",
                  "lcm-etl reconcile --sessions ~/.openclaw/agents/main --dest /tmp/try/lcm.sqlite --dry-run"],
    "audit": ["lcm-etl audit --memory-dir ~/.remnic/memory",
              "lcm-etl audit --src ~/.openclaw/lcm.db --dest /tmp/try/lcm.sqlite --junit audit.xml"],
    "inspect": ["lcm-etl inspect --src ~/.openclaw/lcm.db",
                "lcm-etl inspect --src ~/.openclaw/agents/main/agent/openclaw-agent.sqlite --json"],
    "steps": ["lcm-etl steps migrate --sql"],
    "runs": ["lcm-etl runs --memory-dir ~/.remnic/memory",
             "lcm-etl runs --dest /tmp/try/lcm.sqlite --csv > runs.csv"],
    "undo": ["lcm-etl undo 3f2a9c41 --memory-dir ~/.remnic/memory --dry-run"],
    "cache": ["lcm-etl cache", "lcm-etl cache --prune"],
}
DOCS = "docs/cli.md (in the source tree) explains every command and option"


def epilog(command: str | None = None) -> str:
    """--help's end: examples, the exit codes this command can give (3 is audit's alone), the docs pointer.
    click rewraps an epilog's paragraphs; \\b keeps the lines as written."""
    codes = {code: meaning for code, meaning in EXIT_CODES.items() if code != EXIT_PENDING or command in (None, "audit")}
    if command is not None:   # the group's list says what 0 means for audit; a command's, for itself
        codes[0] = "the target holds every source fact" if command == "audit" else "success"
    examples = ("\b\nExamples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[command]) + "\n\n"
                if command in EXAMPLES else "")
    return (examples + "\b\nExit codes:\n" + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in codes.items())
            + f"\n\nMore: {DOCS}; `lcm-etl COMMAND --help` for one command.")


# the options people repeat, taken from LCM_ETL_<OPTION> when not given (LCM_ETL_MEMORY_DIR=~/.remnic/memory);
# no other: a flag such as --clear or --force set in the environment would act unasked (docs/cli.md lists these)
FROM_ENVIRONMENT = ("src", "dest", "memory_dir", "sessions", "profile", "key_by", "memory_limit", "lock_timeout")


def settings_from_environment(group: click.Group) -> None:
    """click's auto_envvar_prefix, one prefix for every command (click's own default adds the command's name:
    LCM_ETL_MIGRATE_DEST), for the FROM_ENVIRONMENT options alone; their --help names the variable. The group's own
    options (--version) read none: the prefix is set per command, not for the group."""
    for command in group.commands.values():
        command.context_settings.setdefault("auto_envvar_prefix", "LCM_ETL")
        for param in command.params:
            if isinstance(param, click.Option):
                param.allow_from_autoenv = param.show_envvar = param.name in FROM_ENVIRONMENT
