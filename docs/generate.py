#!/usr/bin/env python3
"""Rewrite the generated documents: transforms/README.md (from lcm_etl/steps/pipeline.py), the option table of
docs/cli.md (from the click commands) and the exit codes of README.md and docs/cli.md (from lcm_etl/errors.py). Tests fail when a committed copy drifts; run this after changing either."""
from lcm_etl.cli import cli
from lcm_etl.docgen import CLI_DOC, README, USER_README, cli_doc, transforms_readme, user_readme

README.write_text(transforms_readme(), encoding="utf-8")
CLI_DOC.write_text(cli_doc(CLI_DOC.read_text(encoding="utf-8"), cli), encoding="utf-8")
USER_README.write_text(user_readme(USER_README.read_text(encoding="utf-8")), encoding="utf-8")
