"""What the submitting host has, for planning: sbatch on PATH, the oneCCL bindings, libraries to preload,
the tuned layouts. Looks, imports nothing heavy (no torch). The pure plan (hpcqa.core.plan) gets the answer
as a HostProbe value.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from typing import Mapping

from hpcqa.record import tuned as tune
from hpcqa.core.frozen import FrozenDict, freeze
from hpcqa.core.plan import HostProbe

LIBRARIES = {
    "tcmalloc": ("libtcmalloc.so", "libtcmalloc.so.4", "libtcmalloc_minimal.so.4"),
    "jemalloc": ("libjemalloc.so", "libjemalloc.so.2"),
    "iomp": ("libiomp5.so",),
}

def find_library(names: tuple[str, ...], dirs: list[str], exists=os.path.exists) -> str | None:
    for d in dirs:
        for n in names:
            p = os.path.join(d, n)
            if exists(p):
                return p
    return None


def library_dirs(env: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    dirs = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    if env.get("CONDA_PREFIX"):
        dirs.append(os.path.join(env["CONDA_PREFIX"], "lib"))
    dirs += [os.path.join(sys.prefix, "lib"), "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
             "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    return dirs


def probe_host() -> HostProbe:
    """Look at this host: sbatch on PATH, ccl bindings importable, libraries to preload. No torch import."""
    dirs = library_dirs()
    libs = {}
    for name, files in LIBRARIES.items():
        p = find_library(files, dirs)
        if p:
            libs[name] = p
    return HostProbe(has_sbatch=shutil.which("sbatch") is not None,
                     ccl_bindings=importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None,
                     libraries=FrozenDict(libs), python=sys.executable, tuned=freeze(tune.load_store()))


