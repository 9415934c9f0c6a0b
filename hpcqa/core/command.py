"""A user command as the job (`job.command`, `hpcqa submit CONFIG -- ARGS...`): its arguments with the config's
values in place (`{train.learning_rate}`, a sweep variant's own), the interpreter it names, the files it names, and
the variables a sweep's values reach the program by. Pure.

Placeholders: `{section.key}` is that key's value as the config holds it (a list: its entries joined by commas, a
bool: true/false); `{{` and `}}` are literal braces. The job's own paths are known only when it runs, and are filled
in by the rank: `{job.dir}` (its folder), `{job.work_dir}` (its working folder: the program runs there),
`{job.checkpoint_dir}`. Anything else in braces is refused, naming the argument.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any, Mapping, Sequence

from hpcqa.errors import ConfigError

PYTHON_NAMES = (
    "python",
    "python3",
)  # a first argument that means "the ranks' interpreter" (cluster.python)
FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
MAX_ARGS, MAX_ARG_BYTES = 4096, 65536
# all the arguments together: the kernel's ARG_MAX (2 MiB on most Linux: a quarter of an 8 MiB stack) counts the
# arguments and the environment together, each string with its NUL and its pointer; half of it is left to the
# environment, which the ranks' own variables and a user's exported ones make tens of KB
MAX_COMMAND_BYTES = 1 << 20
JOB_PATHS = ("job.dir", "job.work_dir", "job.checkpoint_dir")  # filled in by the rank (job_paths)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _lookup(values: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def fill(
    arg: str, values: Mapping[str, Any], where: str, source: str = "", later: bool = False
) -> str:
    """One argument with its placeholders replaced by the config's values. later: the argument names a job path,
    filled in at the rank -- it stays a template there (the job path kept, the rest escaped, braces doubled)."""

    def one(m: re.Match) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token if later else token[0]
        name = m.group(1)
        if later and name is not None and name.strip() in JOB_PATHS:
            return "{" + name.strip() + "}"
        if name is None:
            raise ConfigError(
                where,
                f"a lone {token!r} in {arg[:80]!r}",
                "write {{ or }} for a literal brace, {section.key} for a config value",
                source,
            )
        found, value = _lookup(values, name.strip())
        if not found:
            raise ConfigError(
                where,
                f"{{{name}}} names no config key",
                "use a dotted key such as {train.learning_rate} (hpcqa config-reference lists "
                "them), or {{ and }} for literal braces",
                source,
            )
        text = _text(value)
        return text.replace("{", "{{").replace("}", "}}") if later else text

    return FIELD.sub(one, arg)


def names_job_path(arg: str) -> bool:
    return any(
        m.group(1) is not None and m.group(1).strip() in JOB_PATHS for m in FIELD.finditer(arg)
    )


def job_paths(argv: Sequence[str], templates: Sequence[int], paths: Mapping[str, str]) -> list[str]:
    """At the rank: the arguments at `templates` (made by resolve) with the job's paths filled in."""
    out = list(argv)
    for i in templates:
        out[i] = FIELD.sub(
            lambda m: m.group(0)[0] if m.group(1) is None else paths[m.group(1)], out[i]
        )
    return out


def resolve(
    command: Sequence[str], values: Mapping[str, Any], python: str, source: str = ""
) -> tuple[str, ...]:
    """The argv every rank runs: placeholders filled, a leading `python`/`python3` made the ranks' interpreter.
    An argument that names a job path stays a template for the rank (templates())."""
    out = [
        fill(a, values, f"job.command[{i}]", source, later=names_job_path(a))
        for i, a in enumerate(command)
    ]
    if out and out[0] in PYTHON_NAMES:
        out[0] = python
    return tuple(out)


def templates(command: Sequence[str]) -> list[int]:
    """Which arguments of job.command resolve() left as templates for the rank."""
    return [i for i, a in enumerate(command) if names_job_path(a)]


def check(command: Sequence[str], values: Mapping[str, Any], source: str = "") -> None:
    """What the config can say about job.command before a plan exists: sizes, and every placeholder resolves."""
    if len(command) > MAX_ARGS:
        raise ConfigError(
            "job.command",
            f"{len(command)} arguments; at most {MAX_ARGS}",
            "put the arguments in a file your program reads",
            source,
        )
    total = sum(len(a.encode("utf-8", "surrogateescape")) + 1 + 8 for a in command)
    if total > MAX_COMMAND_BYTES:
        raise ConfigError(
            "job.command",
            f"the arguments add up to {total:,} bytes; at most {MAX_COMMAND_BYTES:,} "
            "(with the environment they must fit the kernel's ARG_MAX, 2 MiB on most Linux: every "
            'rank would fail with "Argument list too long")',
            "put the arguments in a file your program reads",
            source,
        )
    if command and not command[0].strip():
        raise ConfigError(
            "job.command[0]", "the program is empty", 'name the program, e.g. "python"', source
        )
    for i, a in enumerate(command):
        if len(a.encode("utf-8", "surrogateescape")) > MAX_ARG_BYTES:
            raise ConfigError(
                f"job.command[{i}]",
                f"an argument of {len(a):,} characters; at most {MAX_ARG_BYTES:,} bytes",
                "put it in a file your program reads",
                source,
            )
        fill(a, values, f"job.command[{i}]", source, later=names_job_path(a))


def sweep_variable(key: str) -> str:
    """The variable a swept key reaches the program as: train.learning_rate -> HPCQA_SWEEP_TRAIN_LEARNING_RATE."""
    return "HPCQA_SWEEP_" + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def sweep_env(variant: Mapping[str, Any]) -> dict[str, str]:
    """A sweep variant's values as environment variables (sweep_variable names them)."""
    return {sweep_variable(k): _text(v) for k, v in sorted(variant.items())}


def named_files(argv: Sequence[str], cwd: str) -> list[str]:
    """The arguments (or `--flag=VALUE` values) that name existing regular files, as absolute paths, in order: what
    the command's provenance digests besides its working directory."""
    out: list[str] = []
    for a in argv:
        for cand in (a, a.split("=", 1)[1] if a.startswith("-") and "=" in a else ""):
            if not cand or "\0" in cand or len(cand) > 4095:
                continue
            path = os.path.normpath(os.path.join(cwd, cand))
            if os.path.isfile(path) and path not in out:
                out.append(path)
    return out


def outside_relative(argv: Sequence[str], cwd: str) -> dict[str, str]:
    """Relative paths in the arguments (or `--flag=VALUE` values) that name an existing file or folder outside `cwd`
    (`../data/train.json`) -> their absolute paths. The program runs in a copy of `cwd`, where such a path would
    name nothing; passed absolute, it names what the user meant (the files are also checked by digest)."""
    inside = os.path.realpath(cwd) + os.sep
    out: dict[str, str] = {}
    for a in argv:
        for cand in (a, a.split("=", 1)[1] if a.startswith("-") and "=" in a else ""):
            if not cand or os.path.isabs(cand) or "\0" in cand or len(cand) > 4095:
                continue
            path = os.path.normpath(os.path.join(cwd, cand))
            if os.path.exists(path) and not (os.path.realpath(path) + os.sep).startswith(inside):
                out[cand] = path
    return out


def absolute_outside(argv: Sequence[str], cwd: str) -> tuple[str, ...]:
    """argv with outside_relative's paths made absolute (in `--flag=VALUE` too)."""
    moved = outside_relative(argv, cwd)
    out = []
    for a in argv:
        if a in moved:
            out.append(moved[a])
        elif a.startswith("-") and "=" in a and a.split("=", 1)[1] in moved:
            flag, value = a.split("=", 1)
            out.append(f"{flag}={moved[value]}")
        else:
            out.append(a)
    return tuple(out)


def missing_program(argv: Sequence[str], python: str, cwd: str) -> str | None:
    """The program a command names by a relative path that is not there (`python prog.py` run from a folder
    without prog.py, `./train.sh`): the job, which runs a copy of `cwd`, could never start (python exits 2, exec
    127). None when it is there, or named otherwise (a module, -c, a name looked up in PATH at the rank, an
    absolute path, which may exist on the nodes only)."""
    interpreter = bool(argv) and (
        argv[0] == python or os.path.basename(argv[0]).startswith("python")
    )
    args = list(argv[1:]) if interpreter else list(argv)
    if not args:
        return None
    first = args[0]
    if interpreter and (first.startswith("-") or not first):
        return None  # python -m module, python -c code, python -u ...: not a path
    if not interpreter and "/" not in first:
        return None  # bash, torchrun ...: found in PATH where it runs
    if os.path.isabs(first):
        return None  # not the copy's business: it may live on the nodes only
    return None if os.path.exists(os.path.join(cwd, first)) else first


def display(argv: Sequence[str]) -> str:
    """The argv as one shell-quoted line, for people (the plan carries the list; no shell ever parses it)."""
    return " ".join(shlex.quote(a) for a in argv)


NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
LAUNCHERS = ("env", "nice", "numactl", "taskset", "stdbuf", "time", "uv", "conda", "accelerate")


def program_name(argv: Sequence[str]) -> str:
    """The name a job given this command gets unless job.name says otherwise: its script's stem (`python
    run_qa.py ...` -> run_qa), its module (`python -m pkg.train` -> pkg.train), else its program's (`./train.sh` ->
    train); fitted to job.name's pattern (letters, digits, '.', '-', '_', at most 64, not starting with '.').
    "" when nothing usable is left."""
    args = list(argv)
    while args and (os.path.basename(args[0]) in LAUNCHERS or "=" in args[0]):  # env X=1 python ...
        args = args[1:]
    if not args:
        return ""
    chosen = args[0]
    if re.fullmatch(r"python[0-9.]*", os.path.basename(chosen)):
        rest = args[1:]
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
            rest = rest[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            chosen = rest[1]
        elif rest and rest[0] != "-c":  # python -c CODE: named python
            chosen = rest[0]
    base = os.path.basename(chosen.rstrip("/"))
    stem = (
        base[:-3]
        if base.endswith(".py")
        else base.rsplit(".", 1)[0]
        if base.endswith((".sh", ".bash"))
        else base
    )
    name = NAME_BAD.sub("-", stem).strip(".-")[:64]
    return (
        name
        if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}", name)
        and re.search(r"[A-Za-z0-9]", name)
        else ""
    )
