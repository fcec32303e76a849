"""When a transcript message was created (docs/mapping.md, "JSONL transcripts"): its `timestamp`, else `createdAt`,
`created_at`, else its envelope's `timestamp`, each epoch milliseconds or ISO 8601 text; the first that parses."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def created_at(msg: dict, envelope: dict) -> tuple[str | None, str | None]:
    """The message's creation time as Remnic's `created_at` (ISO, milliseconds, Z) and as lossless-claw writes it
    (to the second, no zone); (None, None) when no value parses."""
    values = (msg.get("timestamp"), msg.get("createdAt"), msg.get("created_at"), envelope.get("timestamp"))
    dt = next((dt for dt in map(_iso, values) if dt is not None), None)
    if dt is None:
        return None, None
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z", dt.strftime("%Y-%m-%d %H:%M:%S")


def _iso(ts: Any) -> datetime | None:
    if isinstance(ts, bool):
        return None
    if isinstance(ts, (int, float)):
        try:
            return _EPOCH + timedelta(milliseconds=int(ts))
        except (OverflowError, ValueError):
            return None
    if isinstance(ts, str) and ts.strip():
        s = ts.strip().replace(" ", "T", 1)
        if s.endswith(("Z", "z")):
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            return None
        return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)
    return None
