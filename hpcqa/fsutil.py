"""The one door for files: reading what a user, another user or a dying node could have written (a regular file
only, opened without blocking, a size cap, JSON depth-safe), and writing so that readers see the old file or the
whole new one (write aside, then rename; a failure removes what was half-made). tests/test_structure.py fails
when a module reads a file another way."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import resource
import socket
import stat
import threading
from pathlib import Path
from typing import Any


def open_regular(path: str | os.PathLike, follow: bool = False) -> int:
    """A file descriptor for reading `path` only if it is a regular file: opened without following a link (unless
    `follow`: a file the user named, such as a config or a hostfile, may be a link) and without blocking (a FIFO
    would), then checked with fstat. OSError otherwise: ELOOP for a link, EINVAL (strerror "not a regular file")
    for a folder, FIFO or device. What a job's program can leave in its folder goes through this."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | (0 if follow else os.O_NOFOLLOW))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


READ_BLOCK = 1 << 20


def read_bytes(path: str | os.PathLike, limit: int, follow: bool = False) -> bytes:
    """The bytes of the regular file at `path` (open_regular), at most `limit` of them: OSError EFBIG (strerror
    "larger than N bytes") for a longer one -- /dev/zero or a 2 GiB file named by mistake is never read whole."""
    fd = open_regular(path, follow)
    try:
        if os.fstat(fd).st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {_size(limit)}", str(path))
        chunks, got = [], 0
        while (
            got <= limit
        ):  # in blocks: /proc/sys refuses one read larger than the kernel allocates (ENOMEM)
            block = os.read(fd, min(READ_BLOCK, limit + 1 - got))
            if not block:
                break
            chunks.append(block)
            got += len(block)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {_size(limit)}", str(path))
    return data


def read_head(path: str | os.PathLike, limit: int, follow: bool = False) -> bytes:
    """The first `limit` bytes of the regular file at `path` (open_regular): for readers that look at a file's
    start (a SQLite file's pages, a log's tail is logtail's)."""
    with os.fdopen(open_regular(path, follow), "rb") as f:
        return f.read(limit)


def read_tail(path: str | os.PathLike, limit: int, follow: bool = False) -> tuple[int, bytes]:
    """The size of the regular file at `path` (open_regular) and its last `limit` bytes: for readers that look at
    a file's end (has an append-only journal's last write ended its line?)."""
    with os.fdopen(open_regular(path, follow), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return size, f.read(limit)


KERNEL_MAX_BYTES = 16 << 20  # /proc/self/maps of a process with many libraries: a few hundred KiB


def read_kernel(path: str | os.PathLike) -> str:
    """A file the kernel makes (/proc, /sys): read through the same door (its links, /proc/self, followed)."""
    return read_text(path, KERNEL_MAX_BYTES, follow=True, errors="replace")


def read_text(
    path: str | os.PathLike, limit: int, follow: bool = False, errors: str = "strict"
) -> str:
    """read_bytes decoded as UTF-8 (ValueError when it is not, unless errors="replace")."""
    return read_bytes(path, limit, follow).decode("utf-8", errors)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} bytes"


MAX_JSON_BYTES = (
    64 << 20
)  # hpcqa's own files are kilobytes; a worktree manifest of 100,000 files a few MB
MAX_DEPTH = (
    32  # levels of objects and lists: hpcqa's files have at most 5; printing deeper ones recurses
)


class _NotFinite(ValueError):
    pass


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise _NotFinite(f"{text} is not a finite number")
    return x


def _no_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not JSON's")


def load_json(
    path: str | os.PathLike, limit: int = MAX_JSON_BYTES, follow: bool = False
) -> tuple[dict | None, str | None]:
    """The JSON object in the file at `path`, read through read_bytes: (object, None); (None, None) when there is
    no file; (None, why) when there is one that is damaged (a link, a FIFO, too large, empty, not JSON, a number
    that is not finite, nested deeper than MAX_DEPTH, not an object at the top). Never an exception or a hang:
    job files, stores and caches that any program or user could have left all go through this."""
    try:
        data = read_bytes(path, limit, follow)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, _unreadable(e)
    except ValueError:
        return None, "not a path"
    if not data.strip():
        return None, "empty (being written, or cut short)"
    try:
        got = json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except _NotFinite:
        return None, "a number that is not finite (NaN, Infinity or 1e999)"
    except (ValueError, RecursionError):
        return None, "not JSON (cut short, or not hpcqa's)"
    if not isinstance(got, dict):
        return None, f"JSON, but a {type(got).__name__}, not an object"
    if deeper_than(got, MAX_DEPTH):
        return None, f"nested deeper than {MAX_DEPTH} levels (hpcqa's files are a few)"
    return got, None


def _unreadable(e: OSError) -> str:
    if e.errno == errno.EINVAL and e.strerror == "not a regular file":
        return "not a regular file"
    if e.errno == errno.EFBIG:
        return str(e.strerror)
    if e.errno in (errno.ELOOP, errno.EACCES, errno.EPERM):
        return "a link, or not readable"
    return f"not readable ({os.strerror(e.errno or 0)})"


def deeper_than(obj: Any, limit: int) -> bool:
    """Whether the JSON value nests objects or lists more than `limit` deep (iterative: no recursion to run out)."""
    todo = [(obj, 1)]
    while todo:
        x, depth = todo.pop()
        if depth > limit:
            return True
        items = x.values() if isinstance(x, dict) else x if isinstance(x, list) else ()
        todo.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return False


def file_sha256(path: str | os.PathLike, follow: bool = True) -> str:
    """The hex sha256 of a regular file's bytes (open_regular), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with os.fdopen(open_regular(path, follow), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_text(path: str | Path, text: str, mode: int | None = None) -> Path:
    """Write `text` to `path` so that readers see the old file or the whole new one, never a part.
    The temporary name carries host and pid: ranks on several nodes may write the same shared path."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None) -> Path:
    """atomic_write_text's bytes: written aside, then renamed; nothing is left behind when it fails."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}")
    try:
        tmp.write_bytes(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:  # a full disk, a file-size limit, a signal: no half-written file is left
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return p


def no_room(folder: str | os.PathLike) -> str | None:
    """Why a write in `folder` fails though nothing is damaged -- its file system full or mounted read-only, or this
    process's file-size limit -- as a reason to print, or None. For libraries (SQLite) whose own words ("disk I/O
    error") hide the errno."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "its file system is mounted read-only (EROFS)"
    free = (st.f_bfree if os.getuid() == 0 else st.f_bavail) * st.f_frsize
    if free < 64 << 10:
        return "its file system is full (ENOSPC)"
    cap = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if cap != resource.RLIM_INFINITY:
        return f"this process may write files of at most {cap:,} bytes (ulimit -f; EFBIG)"
    return None


def write_failure(e: OSError, path: str | os.PathLike | None = None) -> str:
    """One line for a write that failed: the path (`path` when given: the error's own may name the source of a
    copy), what the system said, and its errno's name (ENOSPC, EFBIG, EROFS, EDQUOT ...), which is what an
    administrator searches for."""
    return "cannot write " + failure(e, path)


def failure(e: OSError, path: str | os.PathLike | None = None) -> str:
    """`path: what the system said (ERRNO)`, for an OSError met where no check named it."""
    where = path or e.filename or "a file"
    name = errno.errorcode.get(e.errno or 0, "")
    return f"{where}: {e.strerror or e}" + (f" ({name})" if name else "")


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
