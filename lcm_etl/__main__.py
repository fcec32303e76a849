"""`python -m lcm_etl`: the same command line as `lcm-etl`."""
from lcm_etl.cli import main

main()
