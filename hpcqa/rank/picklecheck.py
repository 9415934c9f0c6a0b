"""The pickle submitit's task runtime will load, checked before it is loaded (nothing is unpickled here).

What submit writes is a function of the plan alone: DelayedSubmission(RankJob(<plan file>, <plan digest>)) with the
job's timeout and requeue countdown; submitit rewrites it on every checkpoint-and-requeue with the countdown one
lower. The rank wrapper -- given the plan file by the submitted script, and having checked that plan against the
digest the script names -- pickles each of those values itself and accepts the file only when it is byte for byte
one of them, and only when nobody else can write it. When it is not, the opcodes are read (never executed) to say
what it would have done.
"""

from __future__ import annotations

import os
import pickletools
import stat
import time
from pathlib import Path
from typing import Callable

from hpcqa import fsutil

ALLOWED = {("submitit.core.utils", "DelayedSubmission"), ("hpcqa.rank.job", "RankJob")}
# Opcodes that build plain data or call one of ALLOWED's constructors; REDUCE, GET/BINGET (a memo could
# carry another global), INST, OBJ, NEWOBJ_EX, EXT*, PERSID and the rest are refused.
SAFE_OPS = {
    "PROTO",
    "FRAME",
    "STOP",
    "MARK",
    "MEMOIZE",
    "PUT",
    "BINPUT",
    "LONG_BINPUT",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "STACK_GLOBAL",
    "GLOBAL",
    "EMPTY_TUPLE",
    "TUPLE",
    "TUPLE1",
    "TUPLE2",
    "TUPLE3",
    "EMPTY_DICT",
    "DICT",
    "SETITEM",
    "SETITEMS",
    "EMPTY_LIST",
    "LIST",
    "APPEND",
    "APPENDS",
    "NEWOBJ",
    "BUILD",
    "NONE",
    "NEWTRUE",
    "NEWFALSE",
    "INT",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG",
    "LONG1",
    "BINFLOAT",
    "FLOAT",
}

MAX_PICKLE_BYTES = 1 << 20  # a job's pickle names its plan file: a few hundred bytes


def problems(data: bytes, plan_path: str, plan_digest: str) -> str | None:
    """None when the pickle is the submitted RankJob over `plan_path`; else what is wrong, in one line."""
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name not in SAFE_OPS:
                return f"it uses the opcode {op.name}, which a submitted job never does"
            if op.name == "GLOBAL":
                module, _, name = str(arg).partition(" ")
                if (module, name) not in ALLOWED:
                    return f"it references {module}.{name}"
            if op.name == "STACK_GLOBAL":
                if len(strings) < 2 or (strings[-2], strings[-1]) not in ALLOWED:
                    return f"it references {'.'.join(strings[-2:])}"
            if isinstance(arg, str) and "UNICODE" in op.name:
                strings.append(arg)
    except Exception as e:  # noqa: BLE001 - a damaged pickle is one line, whatever pickletools raises
        return f"it is not a readable pickle ({type(e).__name__}: {e})"
    fields = {}
    for key in ("plan_path", "plan_digest"):
        at = [i for i, s in enumerate(strings) if s == key]
        if len(at) != 1 or at[0] + 1 >= len(strings):
            return f"it does not hold exactly one {key}"
        fields[key] = strings[at[0] + 1]
    if fields["plan_path"] != plan_path or fields["plan_digest"] != plan_digest:
        return f"it runs plan {fields['plan_path']} ({fields['plan_digest']}), not the submitted {plan_path} ({plan_digest})"
    return None


def owner_only(path: Path) -> str | None:
    """A file (and its folder) that only this user can replace; else why not."""
    for p in (path, path.parent):
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            return f"{p} is a symlink"
        if st.st_uid != os.getuid():
            return f"{p} belongs to uid {st.st_uid}, not to you"
        if st.st_mode & 0o022:
            return f"{p} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def check(
    path: Path,
    plan_path: str,
    plan_digest: str,
    allowed: Callable[[], set[bytes]],
    wait_s: float = 120.0,
) -> str | None:
    """Wait for the pickle (the Slurm executor writes it right after sbatch returns) and check it against `allowed()`
    (the pickles submit could have written: hpcqa.rank.job.pickles)."""
    deadline = time.time() + wait_s
    while not path.exists() and time.time() < deadline:
        time.sleep(0.2)
    try:
        bad = owner_only(path)
        data = fsutil.read_bytes(path, MAX_PICKLE_BYTES)
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    if bad or data in allowed():
        return bad
    return (
        problems(data, plan_path, plan_digest)
        or "it differs from every pickle submit could have written for this plan"
    )
