"""A job runs the code it was submitted with: at submit, hpcqa copies its own package into the job root,
content-addressed (<root>/code/<digest>/hpcqa/...: a sweep's tasks and every requeued attempt share one copy), and
the ranks import from it (PYTHONPATH first, PYTHONSAFEPATH=1 so the working directory -- often the checkout being
edited -- is not put in front). What the copy was made from is recorded next to it (provenance.json): hpcqa's
version, the git commit and whether the tree was dirty when run from a checkout, the Python that submitted it.
`submit --no-snapshot` leaves the ranks on the live tree.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from hpcqa import fsutil
from hpcqa.errors import SubmitError
from hpcqa.executors import snapcheck
from hpcqa.record.jobdir import JobRoot, write_json
from hpcqa.resources import __version__

PACKAGE = Path(__file__).resolve().parent.parent  # the hpcqa package this process runs


@dataclass(frozen=True)
class Snapshot:
    digest: str
    path: Path  # <root>/code/<digest>: PYTHONPATH entry (holds the hpcqa package)
    source: Path  # the package it copies
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """What the ranks' environment gets (the existing PYTHONPATH stays behind the snapshot). No bytecode is
        written into the snapshot: a cached .pyc would run instead of the verified source."""
        return {
            "PYTHONPATH": os.pathsep.join(
                [str(self.path), *filter(None, [os.environ.get("PYTHONPATH", "")])]
            ),
            "PYTHONSAFEPATH": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HPCQA_CODE": str(self.path),
        }

    def shell_lines(self, python: str) -> list[str]:
        """The same for a batch script (the job's PYTHONPATH stays behind the snapshot), after `python` verified the
        snapshot against the digest this script names (every attempt: a requeued job runs the script again)."""
        q = shlex.quote(str(self.path))
        return [
            f"# hpcqa {self.provenance.get('version')} as submitted ({self.provenance.get('describe')}):",
            "# the ranks import this copy, not the live tree, once it matches its digest",
            f"{verify_command(python, self)} || exit 2",
            f'export PYTHONPATH={q}"${{PYTHONPATH:+:$PYTHONPATH}}" PYTHONSAFEPATH=1 PYTHONDONTWRITEBYTECODE=1 '
            f"HPCQA_CODE={q}",
        ]


def fact(snap: Snapshot | None) -> tuple[str, str]:
    """The dry run's line about the code the ranks will run."""
    if snap is None:
        return (
            "code",
            "the live tree (submit --no-snapshot): the ranks import whatever hpcqa is there when they start",
        )
    return (
        "code",
        f"{snap.path} (snapshot of {snap.source}: hpcqa {snap.provenance.get('version')}, "
        f"{snap.provenance.get('describe')})",
    )


def files(package: Path = PACKAGE) -> list[Path]:
    return sorted(
        p
        for p in package.rglob("*")
        if p.suffix in snapcheck.SOURCES and p.is_file() and "__pycache__" not in p.parts
    )


def content_digest(package: Path = PACKAGE) -> str:
    return snapcheck.digest_of(
        (str(p.relative_to(package)), fsutil.read_bytes(p, fsutil.MAX_JSON_BYTES, follow=True))
        for p in files(package)
    )


def verify_command(python: str, snap: Snapshot) -> str:
    """Shell commands that check the snapshot's copy of the checker against the digest of hpcqa's own (written here,
    at submit), then run it isolated (`python -I`: nothing else from the folder is imported); exit 2 naming what
    changed."""
    checker = snap.path / snapcheck.CHECKER
    q = shlex.quote
    return (
        f"printf '%s  %s\\n' {fsutil.file_sha256(snapcheck.__file__)} {q(str(checker))} | sha256sum --check "
        f"--status || {{ echo {q(f'hpcqa: refusing to run: {checker} changed after submit')} >&2; exit 2; }}\n"
        f"{q(python)} -I {q(str(checker))} {q(str(snap.path))} {snap.digest}"
    )


def verify(snap: Snapshot) -> None:
    checker = snap.path / snapcheck.CHECKER
    same = (
        checker.is_file()
        and not checker.is_symlink()
        and fsutil.file_sha256(checker) == fsutil.file_sha256(snapcheck.__file__)
    )
    bad = (
        snapcheck.problems(str(snap.path), snap.digest)
        if same
        else f"{checker} changed after submit"
    )
    if bad:
        raise SubmitError(
            f"the code snapshot does not verify: {bad}", "re-submit (a fresh snapshot is made)"
        )


def provenance(package: Path = PACKAGE) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": __version__,
        "python": sys.version.split()[0],
        "source": str(package),
    }
    top = package.parent
    if (top / ".git").exists():
        out.update(git_describe(str(top), "hpcqa"))
    else:
        out["describe"] = (
            "not a git checkout" if shutil.which("git") else "git not installed: commit unknown"
        )
    return out


def git_describe(folder: str, pathspec: str = ".") -> dict[str, Any]:
    """`folder` as git sees it: the commit, and whether `pathspec` under it has uncommitted changes."""
    git = shutil.which("git")
    if not git:
        return {"describe": "git not installed: commit unknown"}
    run = lambda *a: subprocess.run(
        [git, "-C", folder, *a], capture_output=True, text=True, timeout=10
    )  # noqa: E731
    head = run("rev-parse", "HEAD")
    if head.returncode != 0:
        return {"describe": "not a git checkout"}
    dirty = bool(run("status", "--porcelain", "--", pathspec).stdout.strip())
    commit = head.stdout.strip()
    return {
        "commit": commit,
        "dirty": dirty,
        "describe": f"git {commit[:12]}" + (" + uncommitted changes" if dirty else ""),
    }


def plan(root: JobRoot, package: Path = PACKAGE) -> Snapshot:
    """Where this package's snapshot goes (nothing is written: the dry run shows it)."""
    digest = content_digest(package)
    return Snapshot(digest, root.code(digest), package, {**provenance(package), "digest": digest})


def write(snap: Snapshot, say: Callable[[str], None] = lambda line: None) -> Path:
    """Copy the package (once per digest: built aside, then renamed into place). An existing copy is reused only
    once it verifies; one that does not is set aside (kept for a look) and made again. Modes come from the
    process's umask, which submit sets (never the checkout's own modes: copyfile, not copy2)."""
    if snap.path.exists() or snap.path.is_symlink():
        try:
            verify(snap)
            return snap.path
        except SubmitError as e:
            bad = e.message
        aside = snap.path.with_name(f"{snap.digest}.damaged-{int(time.time())}")
        os.replace(snap.path, aside)
        say(f"warning: the existing snapshot did not verify ({bad}); kept as {aside}, made again")
    try:
        return _publish(snap)
    except (
        OSError
    ) as e:  # a full disk, a quota, a file-size limit, a read-only mount: nothing half-made is left
        raise SubmitError(
            f"the code snapshot was not written: {fsutil.write_failure(e, snap.path.parent)}; nothing was "
            "queued",
            f"free space in {snap.path.parent} (or set job.output_dir elsewhere), or submit with --no-snapshot",
        ) from None


def _publish(snap: Snapshot) -> Path:
    """The copy built in a temporary folder beside its place, then renamed into it; removed on any failure."""
    snap.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{snap.digest}-", dir=snap.path.parent))
    try:
        manifest = {}
        for src in files(snap.source):
            rel = src.relative_to(snap.source)
            dst = tmp / "hpcqa" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            manifest[str(rel)] = fsutil.file_sha256(dst, follow=False)
        write_json(tmp / snapcheck.MANIFEST, manifest)
        shutil.copyfile(snapcheck.__file__, tmp / snapcheck.CHECKER)
        write_json(JobRoot.code_provenance(tmp), dict(snap.provenance))
        os.chmod(tmp, 0o777 & ~_umask())
        os.rename(tmp, snap.path)
    except FileExistsError:  # another submission published the same digest first
        shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY) and snap.path.exists():
            return snap.path  # rename onto a folder another submission made
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return snap.path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
