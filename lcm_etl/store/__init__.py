"""The target store: Remnic's schema and its checks, lcm-etl's own tables (the ledger, provenance), one run per
target. Planning reads it (what the target holds, the previous run's marks) and loading writes it."""
