#!/usr/bin/env python3
"""Rewrite the generated documents: transforms/README.md (from lcm_etl/planning/pipeline.py) and the option table of
docs/cli.md (from the click commands). Tests fail when a committed copy drifts; run this after changing either."""
from lcm_etl.cli import cli
from lcm_etl.docgen import CLI_DOC, README, cli_doc, transforms_readme

README.write_text(transforms_readme(), encoding="utf-8")
CLI_DOC.write_text(cli_doc(CLI_DOC.read_text(encoding="utf-8"), cli), encoding="utf-8")
