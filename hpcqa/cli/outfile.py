"""A file the user names with -o: written whole or not at all, and never in place of anything but a regular file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from hpcqa.errors import UsageError
from hpcqa.text import shown


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
