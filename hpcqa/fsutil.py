"""File writes that readers on other ranks or nodes may race with: write aside, then rename."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
import stat
from pathlib import Path


def open_regular(path: str | Path) -> int:
    """A file descriptor for reading `path` only if it is a regular file: opened without following a link and without
    blocking (a FIFO would), then checked with fstat. OSError otherwise: ELOOP for a link, EINVAL (strerror "not a
    regular file") for a folder, FIFO or device. What a job's program can leave in its folder goes through this."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


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


def unwritable(folder: str | Path) -> str | None:
    """Why this process cannot create files in `folder` (made first, with its parents, when missing), or None. Tried,
    not predicted from mode bits: a volume's ownership, ACLs, root squash and read-only mounts all show here. The
    answer names the first folder that refused, its owner, group and mode, and this process's user and groups."""
    p = Path(folder)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".hpcqa-write-test-{socket.gethostname()}-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return None
    except OSError as e:
        where = Path(e.filename) if e.filename else p
        while not where.exists() and where != where.parent:
            where = where.parent
        if where.is_file():
            where = where.parent
        try:
            st = where.stat()
            about = (
                f"{where} is owned by {st.st_uid}:{st.st_gid} with mode {st.st_mode & 0o7777:04o}"
            )
        except OSError:
            about = f"{where} cannot be read"
        return (
            f"cannot write in {p} ({e.strerror}): {about}; this process is UID {os.getuid()}, groups "
            f"{','.join(str(g) for g in sorted(set(os.getgroups()) | {os.getgid()}))}"
        )


def own_folder(path: str | Path) -> Path:
    """`path` as a real folder, made if missing. A link (or a file) where the folder should be is an OSError, never
    followed: whatever a job's program left there decides nothing about where hpcqa writes."""
    p = Path(path)
    try:
        p.mkdir()
    except FileExistsError:
        pass
    if p.is_symlink() or not p.is_dir():
        raise OSError(
            40, f"{p} is a link or not a folder: not written through", str(p)
        )  # 40: ELOOP
    return p


def real_folders(base: Path, rel: str | Path) -> Path:
    """base/rel as real folders, each component made where missing; a component that is a link or a file (left by
    the program that runs in `base`) is removed -- the link itself, never what it points at -- and made a folder."""
    p = Path(base)
    for part in Path(rel).parts:
        p = p / part
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            p.unlink()
        p.mkdir(exist_ok=True)
    return p
