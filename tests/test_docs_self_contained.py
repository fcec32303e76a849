"""The project's docs, code and tests state its contract themselves (issue 24, item 19): a user's clone holds
neither the contract nor the folder of reference facts beside the project, so nothing in it may send the reader
there."""
from __future__ import annotations

import re

from conftest import ROOT

# the contract's section sign, its file, and the reference folder beside the project (spelled so that this file
# does not match itself)
CITATION = re.compile("|".join([r"\bSPEC\b", "\u00a7", r"\.\./shared\b", r"\bshared/", r"\breference/[\w-]+\.md",
                                r"\breference \d"]))
SUFFIXES = {".md", ".py", ".sql", ".json", ".toml", ".cfg", ".txt", ".in"}
# copied verbatim from the contract's independent checkers (their headers say so): not the project's to edit
VERBATIM = {ROOT / "tests" / "tools"}
SKIPPED = {".venv", ".git", "build", "out", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def project_files():
    for path in sorted(ROOT.rglob("*")):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIPPED or any(v in path.parents for v in VERBATIM) or not path.is_file():
            continue
        if path.suffix in SUFFIXES or path.name in ("Makefile", "README"):
            yield path


def test_no_doc_code_or_test_cites_the_contract_or_its_reference_files():
    found = []
    for path in project_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if CITATION.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_the_scan_sees_the_docs_the_steps_and_the_code():
    names = {str(p.relative_to(ROOT)) for p in project_files()}
    assert {"README.md", "docs/design.md", "docs/mapping.md", "transforms/74_part_rows.sql", "lcm_etl/cli.py",
            "docs/schemas/run-report.schema.json", "Makefile"} <= names
