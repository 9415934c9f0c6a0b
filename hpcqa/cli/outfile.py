"""A file the user names (render -o, init -o, results --plot): one target check, then written whole or not at all,
and never in place of anything but a regular file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from hpcqa import fsutil, text
from hpcqa.core import values
from hpcqa.errors import UsageError
from hpcqa.text import shown

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
INPUT_SUFFIXES = (".toml", ".py", ".sqlite")  # what hpcqa reads: a config, a program, a registry


def output_target(
    out: str | os.PathLike | None,
    inputs: tuple[tuple[str | os.PathLike, str], ...] = (),
    suffixes: tuple[str, ...] = (),
    option: str = "-o",
) -> Path | None:
    """The one check of a file the user asks hpcqa to write, before anything is read or rendered: None for stdout
    (no path, or "-"); else a path whose folder exists, that is new or a regular file (never a link, a FIFO, a
    folder or a device), that is none of `inputs` ((path, what it is): the config being rendered), and whose suffix is one of
    `suffixes` when given (else not one of the files hpcqa reads: INPUT_SUFFIXES). UsageError naming the fix."""
    if out is None or str(out) in ("", "-"):
        return None
    p = Path(out)
    shown = text.shown(str(p))
    fix = f"pass {option} with the path of a new or regular file in an existing folder"
    _check_folder(p, option, fix)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UsageError(f"{option} {shown}: {e.strerror or e}", fix) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{option} {shown} is {_kind(st.st_mode)}: nothing was written", fix)
    if (st is not None or p.name.endswith(SQLITE_SIDE)) and (database := _database(p)):
        raise UsageError(
            f"{option} {shown} is {database}: writing there would replace it, nothing was written",
            "name another file for the output",
        )
    for given, what in inputs:
        try:
            same = os.path.samefile(p, given)
        except OSError:
            same = False
        if same:
            raise UsageError(
                f"{option} {shown} is {what}: writing there would replace it",
                "name another file for the output",
            )
    if suffixes and p.suffix.lower() not in suffixes:
        raise UsageError(
            f"{option} {shown}: the file's suffix says its format; one of {', '.join(suffixes)} is needed",
            f"e.g. {option} {text.shown(p.stem or 'out')}{suffixes[0]}",
        )
    if not suffixes and p.suffix.lower() in INPUT_SUFFIXES:
        raise UsageError(
            f"{option} {shown}: a {p.suffix} file is something hpcqa reads (a config, a program, a registry), "
            "not what it writes here: nothing was written",
            "name the output .sh, .sbatch, .yaml or without a suffix",
        )
    return p


def _check_folder(p: Path, option: str, fix: str) -> None:
    """The output's folder exists; a missing one whose path holds what only a shell expands says so."""
    folder = p.parent
    shown = text.shown(str(p))
    if not folder.is_dir() and (why := values.shell_syntax(str(p))):
        raise UsageError(
            f"{option} {shown}: its folder {text.shown(str(folder))} does not exist: the path {why}, and it "
            "reached hpcqa as written (quoted)",
            _expanded_fix(p, option),
        )
    if not folder.is_dir():
        raise UsageError(
            f"{option} {shown}: its folder {text.shown(str(folder))} does not exist",
            f"mkdir -p it first, or {fix[0].lower() + fix[1:]}",
        )


def _expanded_fix(p: Path, option: str) -> str:
    """The path a quoted ~ or $VARIABLE meant here; a variable not set here cannot be expanded: said so."""
    meant = os.path.expandvars(os.path.expanduser(str(p)))
    if values.shell_syntax(meant):
        return f"pass {option} the path itself (a variable it names is not set here)"
    return f"{option} {text.shown(meant)} (or leave it unquoted)"


SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
SQLITE_SIDE = ("-wal", "-shm", "-journal")


def _database(p: Path) -> str | None:
    """What an existing file is, when it is an SQLite database (a job registry, whatever its name) or one of its
    side files (its write-ahead log, shared memory, journal): None for anything else."""
    if p.name.endswith(SQLITE_SIDE):
        return "an SQLite side file (a registry's log or shared memory)"
    try:
        head = fsutil.read_head(p, 16)
    except OSError:
        return None
    if head.startswith(SQLITE_MAGIC):
        return "an SQLite database (a job registry?)"
    return "an SQLite write-ahead log" if head[:4] in WAL_MAGIC else None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file (a device or a socket)"


def write_whole(out: Path, text: str, force: bool, mode: int = 0o644) -> None:
    """Write `out` whole or not at all: an existing file only with `force`, and only a regular file (written in
    place, a link would be written through to its target, a FIFO would block, a device would take anything; replaced
    by a rename, as here, each would be swapped for a file: `render -o /dev/full` as root replaced the device node);
    a full disk leaves nothing. `init` and `render -o` write with it."""
    name = shown(out)  # as the messages name it: its control characters spelled out
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UsageError(
            f"cannot write {name}: {e.strerror or e}", "pass -o with a writable path"
        ) from None
    if st is not None and not force:
        raise UsageError(
            f"{name} exists: nothing was written",
            "edit it, pass -o OTHER.toml, or --force to replace it",
        )
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = (
            "a link"
            if stat.S_ISLNK(st.st_mode)
            else "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "not a file"
        )
        raise UsageError(
            f"{name} is {kind}: nothing was written",
            "pass -o with the path of a new or regular file",
        )
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except OSError as e:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise UsageError(
            f"cannot write {name}: {e.strerror or e}", "pass -o with a writable path"
        ) from None
