#!/bin/bash
# Install everything the tests need on a fresh machine, then run them. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python3 -m pytest -q -ra tests "$@"
