"""`python -m lcm_etl`: the same command line as `lcm-etl`."""
from .cli import main

main()
