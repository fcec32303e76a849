"""Planning: DuckDB's plan and what a sync re-run re-plans."""
