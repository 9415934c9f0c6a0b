"""`python -m hpcqa.rank --plan PLAN.json -- COMMAND...`: the rank wrapper (hpcqa.rank.wrapper)."""

import sys

from hpcqa.rank.wrapper import main

sys.exit(main(sys.argv[1:]))
