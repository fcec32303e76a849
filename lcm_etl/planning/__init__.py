"""Planning: the declared pipelines, the step runner, DuckDB's plan and what a sync re-run re-plans."""
