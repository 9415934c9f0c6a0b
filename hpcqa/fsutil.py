"""File writes that readers on other ranks or nodes may race with: write aside, then rename."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_text(path: str | Path, text: str, mode: int | None = None) -> Path:
    """Write `text` to `path` so that readers see the old file or the whole new one, never a part.
    The temporary name carries host and pid: ranks on several nodes may write the same shared path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    tmp.write_text(text)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, p)
    return p


@contextlib.contextmanager
def owner_umask(group_readable: bool = False):
    """While submitting: files and folders hpcqa (and submitit, and Slurm's logs: sbatch passes its umask on) creates
    are never group- or other-writable, whatever the user's umask; group-readable only where the config asks."""
    old = os.umask(0o027 if group_readable else 0o077)
    try:
        yield
    finally:
        os.umask(old)
