"""The sync decision: how a run reads each source and what it re-plans, and why (docs/design.md, "The re-run
decision"). Nothing else decides it; reconcile's per-transcript half is in the read layer (below).

- `decision`: the ways (no-op, pages compared, marks, full plan, offsets) and the report's `sync:` line;
- `lcm_db`: migrate's decision for one lcm.db into one target, step by step as the run reads what it needs;
- `shortcut`: the no-op proof (the source's files and the target's tables unchanged since the last run);
- `identity`: one source identity (its real path and the database there) for marks, provenance and the ledger.

reconcile decides per transcript (a JSONL file or a session store window) whether to read it from where its last
complete run stopped or whole, and why, in lcm_etl/read/sessions/transcript_decision.py — in the read layer, beside the
readers that act on it (transcript_offsets.py, store_reads.py), since planning reads transcripts through it and may
not import this package; `decision.of_transcripts` counts its causes into the `sync:` line.
"""
