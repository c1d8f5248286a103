"""`python -m ds4_converge.cli` is `ds4-converge` (tests and benchmarks run it this way)."""
import sys

from ds4_converge.cli.main import main

sys.exit(main())
