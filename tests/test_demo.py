"""`make demo` (issue 38): demo.sh, the steps a newcomer takes on the bundled fixtures, in at most 40 lines of at
most 100 columns, ending with where the result is and three commands to try next; the Makefile installs for it
only what it runs."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from conftest import LCM_ETL, ROOT


def test_the_demo_prints_at_most_40_lines_of_100_columns_and_ends_with_the_result_and_three_next_commands(tmp_path):
    shutil.copy(ROOT / "demo.sh", tmp_path)
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")   # read only: sources are never written
    (tmp_path / ".venv").symlink_to(LCM_ETL.parent.parent)   # the demo names .venv/bin/lcm-etl, as make runs it
    env = {k: v for k, v in os.environ.items() if k not in ("LCM_ETL_WIDTH", "LCM_ETL")}
    proc = subprocess.run(["sh", "demo.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert (proc.returncode, proc.stderr) == (0, "")
    lines = proc.stdout.splitlines()
    assert len(lines) <= 40, proc.stdout
    assert [line for line in lines if len(line) > 100] == []
    for outcome in ("    lcm-etl migrate: Done.", "    lcm-etl audit: PENDING", "    lcm-etl reconcile: Done.",
                    "    lcm-etl audit: CLEAN - the target holds every source fact"):
        assert outcome in lines
    assert lines[-5:-3] == [
        "The result: build/demo/lcm.sqlite, a Remnic LCM store (Remnic reads <memory dir>/state/lcm.sqlite).",
        "The reports in full: build/demo/1-inspect.txt ... build/demo/5-audit.txt. Next, try:"]
    nexts = [re.sub(r"\s+#.*", "", line).split() for line in lines[-3:]]
    cli = ".venv/bin/lcm-etl"
    assert [n[:2] for n in nexts] == [[cli, "runs"], [cli, "undo"], [cli, "migrate"]]
    runs = subprocess.run(nexts[0], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert runs.returncode == 0 and runs.stdout.count(" complete ") == 2   # the migrate's and the reconcile's
    for n, name in enumerate(("inspect", "migrate", "audit", "reconcile", "audit"), 1):
        assert (tmp_path / "build" / "demo" / f"{n}-{name}.txt").stat().st_size > 0


def test_the_makefiles_demo_installs_the_package_without_the_test_and_lint_extras():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo = makefile[makefile.index("$(DEMO_STAMP): pyproject.toml"):makefile.index("\nbytecode:")]
    installs = [line.rstrip(" ;\\") for line in demo.splitlines() if " install " in line]
    assert installs and all(line.endswith(" -e .") and "-qq" in line and "[" not in line for line in installs)
    assert "demo: $(DEMO_STAMP)\n" in makefile and "test: $(STAMP)\n" in makefile
