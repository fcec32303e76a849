"""`audit --junit FILE`: the audit as JUnit XML, the format CI systems show in their test view.

One test case per session audited (every session of the source's conversations and of the transcripts, and any
other session a finding names); a session with findings fails, with what is pending or different as the reason,
so a nightly audit shows which sessions fell behind. Findings of no session are one test case of their own.
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Iterable

from lcm_etl.errors import BadInput, RunFailed
from lcm_etl.report import RunReport, now_iso, one_line

SUITE = "lcm-etl audit"
NO_SESSION = "(no session)"
PENDING = "missing in target"   # the problem of a fact a migrate or reconcile would write: pending, not different


def check_junit_path(path: Path) -> None:
    """Before the audit runs: a report that could not be written would waste it (exit 2, nothing read)."""
    if path.is_dir():
        raise BadInput(f"--junit {path}: is a folder; give the file to write")
    if not path.parent.is_dir():
        raise BadInput(f"--junit {path}: the folder {path.parent} does not exist")


def junit_xml(report: RunReport, findings: list[dict], sessions: Iterable[str]) -> bytes:
    by_session: dict[str, list[dict]] = {}
    for f in findings:
        by_session.setdefault(f["session_id"] or NO_SESSION, []).append(f)
    names = sorted(set(sessions) | set(by_session))
    failed = sum(name in by_session for name in names)
    root = ET.Element("testsuites", name=SUITE, tests=str(len(names)), failures=str(failed), errors="0",
                      time=f"{report.elapsed_s:.3f}")
    # XML 1.0 cannot hold most control characters even escaped: ids and paths are shown as the text report shows them
    suite = ET.SubElement(root, "testsuite", name=f"{SUITE}: {one_line(report.target or '')}", tests=str(len(names)),
                          failures=str(failed), errors="0", skipped="0", time=f"{report.elapsed_s:.3f}",
                          timestamp=now_iso())
    for name in names:
        case = ET.SubElement(suite, "testcase", classname=SUITE, name=one_line(name), time="0")
        if name in by_session:
            _failure(case, by_session[name])
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _failure(case: ET.Element, findings: list[dict]) -> None:
    counts = Counter(f"{f['kind']}: {f['problem']}" for f in findings)
    pending = all(f["problem"] == PENDING for f in findings)
    failure = ET.SubElement(case, "failure", type="pending" if pending else "different",
                            message="; ".join(f"{what} ({n})" for what, n in sorted(counts.items())))
    failure.text = "\n".join(one_line(f"{f['kind']}: {f['problem']}  {f['source_id']}"
                                      + (f"  ({f['detail']})" if f["detail"] else "")) for f in findings)


def write_junit(path: Path, body: bytes) -> None:
    """Whole or not at all: a CI that reads the file never sees half a report."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(body)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RunFailed(f"--junit {path}: could not be written ({exc.strerror or exc})") from None
