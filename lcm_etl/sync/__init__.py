"""The sync decision: how a run reads each source and what it re-plans, and why (docs/design.md, "The re-run
decision"). Nothing else decides it.

- `decision`: the ways (no-op, WAL only, pages compared, marks, full plan, offsets) and the report's `sync:` line;
- `lcm_db`: migrate's decision for one lcm.db into one target, step by step as the run reads what it needs;
- `shortcut`: the no-op proof (the source's files and the target's tables unchanged since the last run);
- `identity`: one source identity (its real path and the database there) for marks, provenance and the ledger.

reconcile decides file by file where its last complete run stopped (lcm_etl/read/transcript_offsets.py,
store_reads.py for a session store's windows), and says so through `decision.of_transcripts`.
"""
