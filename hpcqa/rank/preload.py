"""Which preloadable libraries (tcmalloc, jemalloc, Intel's libiomp5) this machine has, and where.

Decided where the rank runs: the plan names what is wanted (HPCQA_PRELOAD=tcmalloc:iomp), and each rank looks on
its own node -- the dynamic loader's search path (LD_LIBRARY_PATH, /etc/ld.so.conf and its includes, the
system's library folders), the environment's own prefix (pip's intel-openmp puts libiomp5.so in <prefix>/lib,
conda in $CONDA_PREFIX/lib). The submit host runs the same lookup for the dry run's prediction only.
No subprocess: the folders ldconfig would read are read directly.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Mapping

from hpcqa import fsutil

LIBRARIES = {
    "tcmalloc": ("libtcmalloc.so", "libtcmalloc.so.4", "libtcmalloc_minimal.so.4"),
    "jemalloc": ("libjemalloc.so", "libjemalloc.so.2"),
    "iomp": ("libiomp5.so",),
}
WANTED = "HPCQA_PRELOAD"  # the plan's names, colon-separated
FOUND = (
    "HPCQA_PRELOADED"  # what the rank resolved: name=path (empty path: not found), ';'-separated
)
SYSTEM_DIRS = (
    "/usr/local/lib",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)


def find_library(names: tuple[str, ...], dirs: list[str], exists=os.path.exists) -> str | None:
    for d in dirs:
        for n in names:
            p = os.path.join(d, n)
            if exists(p):
                return p
    return None


def ld_so_conf_dirs(path: str = "/etc/ld.so.conf", depth: int = 0) -> list[str]:
    """The folders /etc/ld.so.conf names (following `include` globs): what ldconfig caches."""
    try:
        text = fsutil.read_text(path, 1 << 20, follow=True, errors="replace")
        lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    except OSError:
        return []
    out = []
    for line in filter(None, lines):
        if line.startswith("include") and depth < 4:
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(path), pattern)
            for inc in sorted(glob.glob(pattern)):
                out += ld_so_conf_dirs(inc, depth + 1)
        elif os.path.isabs(line):
            out.append(line)
    return out


def library_dirs(env: Mapping[str, str] | None = None, prefix: str | None = None) -> list[str]:
    """Where to look, in order: LD_LIBRARY_PATH, the environment's prefix (conda's, then this interpreter's),
    the loader's configured folders, the system's."""
    env = os.environ if env is None else env
    dirs = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    if env.get("CONDA_PREFIX"):
        dirs.append(os.path.join(env["CONDA_PREFIX"], "lib"))
    dirs.append(os.path.join(prefix or sys.prefix, "lib"))
    dirs += ld_so_conf_dirs() + list(SYSTEM_DIRS)
    return list(dict.fromkeys(dirs))  # each once, in order


def available(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """name -> path of every known library found here."""
    dirs = library_dirs(env)
    return {name: p for name, files in LIBRARIES.items() if (p := find_library(files, dirs))}


def resolve(wanted: list[str], dirs: list[str]) -> tuple[list[str], dict[str, str]]:
    """(paths to preload, name -> path or "" where not found) for the names wanted, looked up in `dirs`."""
    found = {
        name: find_library(LIBRARIES.get(name, (f"lib{name}.so",)), dirs) or "" for name in wanted
    }
    return [p for p in found.values() if p], found


def encode(found: Mapping[str, str]) -> str:
    return ";".join(f"{k}={v}" for k, v in found.items())


def decode(text: str | None) -> dict[str, str]:
    return dict(item.split("=", 1) for item in (text or "").split(";") if "=" in item)
