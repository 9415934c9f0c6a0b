"""The folder a user command runs in (`job.command`), as it was at submit: listed and digested there, copied
content-addressed into the job root (<root>/code/work-<digest>/work: a sweep's tasks and every requeued attempt
share it), and verified by every rank before the command starts -- each listed file present with its digest -- so
a queued job runs what was submitted even if the checkout changes meanwhile. Files the command names outside the
folder (a script given by absolute path, a data file) are not copied: their digests are recorded at submit and
checked at the rank, which refuses to start when one changed.

Left out of the copy: hidden entries (.git, .venv ...), __pycache__, virtual environments (a pyvenv.cfg), the job
output root, symlinks (never followed: a link to /proc/self/environ would copy the submitting environment). A
copy holding anything its list does not (a planted module, a .pyc) does not verify.

The program does not run in that shared copy: each job gets its own working folder (<job folder>/work), laid from
the verified copy by the ranks before every attempt (`lay`): the submitted files, each as submitted, and whatever
the job's earlier attempts wrote there (`--output_dir out` resumes its own checkpoint, never another job's).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from hpcqa.errors import HpcqaError
from hpcqa.fsutil import file_sha256, real_folders, write_failure
from hpcqa.record.jobdir import read_json, write_json

MANIFEST = "MANIFEST.json"
PROVENANCE = "provenance.json"
TREE = "work"
MAX_FILES, MAX_BYTES = 20000, 256 << 20


class WorkError(HpcqaError):
    exit_code = 2


@dataclass(frozen=True)
class WorkTree:
    source: str  # the folder as submitted
    digest: str
    files: Mapping[str, str]  # relative path -> sha256
    size: int
    skipped: tuple[str, ...] = ()  # what was left out, for the dry run
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def folder(self, code_root: Path) -> Path:
        return code_root / f"work-{self.digest}"


def _skip_dir(path: str, name: str, exclude: Sequence[str]) -> str | None:
    if name.startswith("."):
        return "hidden"
    if name == "__pycache__":
        return "bytecode"
    if os.path.islink(path):
        return "a symlinked folder"
    if os.path.exists(os.path.join(path, "pyvenv.cfg")):
        return "a virtual environment"
    if any(os.path.realpath(path) == os.path.realpath(e) for e in exclude):
        return "the job output root"
    return None


def list_digest(files: Mapping[str, str]) -> str:
    """The copy's digest: over its list of (relative path, sha256), sorted by path."""
    h = hashlib.sha256()
    for rel, sha in sorted(files.items()):
        h.update(f"{rel}\0{sha}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:16]


def scan(
    folder: str, exclude: Sequence[str] = (), provenance: Mapping[str, Any] | None = None
) -> WorkTree:
    """List and digest `folder` (what would be copied); refuses a folder too large to copy per submission."""
    if not os.path.isdir(folder):
        raise WorkError(
            f"job.workdir: {folder} is not a folder",
            "set job.workdir to the folder your command runs in",
        )
    files: dict[str, str] = {}
    skipped: list[str] = []
    size = 0

    # os.walk passes over a folder it cannot list, silently by default
    def unreadable(e: OSError) -> None:
        raise WorkError(
            f"job.workdir: the folder {e.filename} cannot be read ({e.strerror}), so it cannot be copied for "
            "the job",
            "make it readable, move it out of the folder, or submit --no-snapshot",
        )

    for top, dirs, names in os.walk(folder, onerror=unreadable):
        keep = []
        for d in sorted(dirs):
            why = _skip_dir(os.path.join(top, d), d, exclude)
            if why:
                skipped.append(f"{os.path.relpath(os.path.join(top, d), folder)}/ ({why})")
            else:
                keep.append(d)
        dirs[:] = keep
        for n in sorted(names):
            path = os.path.join(top, n)
            if n.startswith("."):
                continue
            if os.path.islink(
                path
            ):  # never followed: a link to /proc/self/environ would copy the environment
                skipped.append(
                    f"{os.path.relpath(path, folder)} (a symlink: not copied; name its target by path)"
                )
                continue
            if not os.path.isfile(path):
                continue
            if not os.access(path, os.R_OK):
                raise WorkError(
                    f"job.workdir: {path} cannot be read, so it cannot be copied for the job",
                    "make it readable, move it out of the folder, or submit --no-snapshot",
                )
            size += os.path.getsize(path)
            if len(files) >= MAX_FILES or size > MAX_BYTES:
                raise WorkError(
                    f"job.workdir: {folder} holds more than {MAX_FILES:,} files or {MAX_BYTES >> 20} MiB "
                    "to copy for the job",
                    "run from (or set job.workdir to) the folder of your program "
                    "alone, keep data outside it (name it by path), or submit --no-snapshot",
                )
            files[os.path.relpath(path, folder)] = file_sha256(path)
    return WorkTree(folder, list_digest(files), files, size, tuple(skipped), dict(provenance or {}))


def write(tree: WorkTree, code_root: Path) -> Path:
    """Copy the folder once per digest (built aside, renamed into place); an existing copy is reused once it verifies,
    else set aside and made again. Returns the folder the command runs in."""
    dest = tree.folder(code_root)
    if dest.exists():
        if problem(str(dest), tree.digest) is None:
            return dest / TREE
        os.replace(dest, dest.with_name(f"{dest.name}.damaged-{int(time.time())}"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".work-{tree.digest}-", dir=dest.parent))
    try:
        _build(tree, tmp)
        os.rename(tmp, dest)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (
            e.errno in (errno.EEXIST, errno.ENOTEMPTY) and dest.exists()
        ):  # else: published first by another
            raise WorkError(
                f"the copy of job.workdir was not written: {write_failure(e, dest.parent)}; nothing was queued",
                f"free space in {dest.parent} (or set job.output_dir elsewhere), or submit --no-snapshot",
            ) from None
    except BaseException:  # a signal, a file that changed: nothing half-copied is left
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest / TREE


def _build(tree: WorkTree, tmp: Path) -> None:
    """The copy, its manifest and provenance, in the temporary folder `tmp`."""
    (tmp / TREE).mkdir()
    for rel, sha in tree.files.items():
        target = tmp / TREE / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(tree.source, rel), target)
        if file_sha256(target) != sha:
            raise WorkError(
                f"{os.path.join(tree.source, rel)} changed while it was copied",
                "submit again once nothing writes into the folder",
            )
        shutil.copymode(os.path.join(tree.source, rel), target)
    write_json(tmp / MANIFEST, dict(tree.files))
    write_json(
        tmp / PROVENANCE,
        {
            "source": tree.source,
            "digest": tree.digest,
            "files": len(tree.files),
            "bytes": tree.size,
            **tree.provenance,
        },
    )


def problem(folder: str, digest: str) -> str | None:
    """What is wrong with the copy in `folder` (None: every listed file is there, unchanged, and the list is the one
    the digest names): one line naming the file."""
    manifest = read_json(os.path.join(folder, MANIFEST))
    if not isinstance(manifest, dict) or not all(isinstance(v, str) for v in manifest.values()):
        return f"{folder}/{MANIFEST} is missing or damaged"
    if list_digest(manifest) != digest:
        return f"{folder}/{MANIFEST} is not the list submitted (digest {list_digest(manifest)}, submitted {digest})"
    for rel, sha in sorted(manifest.items()):
        path = os.path.join(folder, TREE, rel)
        if ".." in Path(rel).parts or os.path.islink(path) or not os.path.isfile(path):
            return f"{path} is missing (or not a regular file)"
        if file_sha256(path) != sha:
            return f"{path} changed after submit"
    # nothing added either: a planted json.py or __pycache__/*.pyc would run instead of the verified code
    tree = os.path.join(folder, TREE)
    for top, dirs, names in os.walk(tree):
        for n in sorted(names) + sorted(d for d in dirs if os.path.islink(os.path.join(top, d))):
            rel = os.path.relpath(os.path.join(top, n), tree)
            if rel not in manifest:
                return f"{os.path.join(top, n)} was added after submit (not in the submitted list)"
    return None


def lay(copy: str, dest: Path) -> Path:
    """The job's own working folder `dest` from the verified copy in `copy` (its MANIFEST and TREE): every listed file
    as submitted -- copied where it is missing or differs (each by an atomic rename, so ranks that lay the same
    folder at once agree) -- and nothing else touched: the program's own outputs stay for its next attempt."""
    manifest = read_json(os.path.join(copy, MANIFEST))
    if manifest is None:  # verified at the rank's start; gone or damaged since
        raise WorkError(f"{copy}/{MANIFEST} is missing or damaged", "submit the job again")
    dest.mkdir(
        parents=True, exist_ok=True
    )  # even for a folder with nothing to copy: the program runs in it
    for rel, sha in sorted(manifest.items()):
        target = dest / rel
        if target.is_file() and not target.is_symlink() and file_sha256(target) == sha:
            continue
        real_folders(
            dest, Path(rel).parent
        )  # a folder the program replaced by a link is not written through
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
        source = os.path.join(copy, TREE, rel)
        shutil.copyfile(source, tmp)
        shutil.copymode(source, tmp)
        os.replace(tmp, target)
    return dest


def named_digests(paths: Sequence[str], folder: str) -> dict[str, str]:
    """sha256 of the files the command names outside its folder (inside, the copy carries them)."""
    inside = os.path.realpath(folder) + os.sep
    return {p: file_sha256(p) for p in paths if not os.path.realpath(p).startswith(inside)}


def named_problem(named: Mapping[str, str]) -> str | None:
    for path, sha in sorted(named.items()):
        if not os.path.isfile(path):
            return f"{path} (named by the command) is not there on this node"
        if file_sha256(path) != sha:
            return f"{path} (named by the command) changed after submit"
    return None
