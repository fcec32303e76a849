"""The --json reports' JSON Schemas (docs/cli.md, "--json reports"), installed with the package as lcm_etl.schemas:
`python -c "import importlib.resources as r; print(r.files('lcm_etl.schemas'))"` prints their folder."""
