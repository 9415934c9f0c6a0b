"""What the executors share: the plan files and the rank wrapper in front of every rank, the
registry rows, and watching a job folder (what is shown of it is the CLI's)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from hpcqa.core import command, kinds, sweep
from hpcqa.core.config import Config
from hpcqa.core.plan import HostProbe, LaunchPlan
from hpcqa.errors import HpcqaError, SubmitError, UsageError
from hpcqa.executors import snapshot
from hpcqa.executors.interface import File, Progress
from hpcqa.record import jobdir, worktree
from hpcqa.record.jobdir import TASK_ID, JobDir, JobRoot, atomic_write_text
from hpcqa.record.registry import Registry


def script_config(cfg: Config, host: HostProbe) -> tuple[Config, HostProbe]:
    """A rendered script's config and host: a Slurm-shaped plan (whatever executor the config names), and the
    interpreter the script runs where it is taken -- cluster.python, else python3 (not this host's own path)."""
    return replace(cfg, cluster=replace(cfg.cluster, executor=kinds.SlurmKind.name)), replace(
        host, python="python3"
    )


def with_work(sp: sweep.SweepPlan, copy: bool) -> tuple[sweep.SweepPlan, worktree.WorkTree | None]:
    """A user command's plans as the ranks get them: the folder they run in (the copy of job.workdir made at submit,
    or with `copy` off the folder itself) and the digests of the files the command names outside it. Pods see
    neither: their command runs in their image."""
    p0 = sp.plans[0]
    if not p0.command or not p0.executor_kind.sees_submit_files:
        return sp, None
    folder = p0.work["dir"]
    root = job_root(p0).path
    tree = (
        worktree.scan(
            folder,
            [str(root), os.path.abspath(p0.config.job.output_dir)],
            snapshot.git_describe(folder),
        )
        if copy
        else None
    )
    run_in = str(tree.folder(root / "code") / worktree.TREE) if tree else folder
    plans = []
    for p in sp.plans:
        if (
            tree
        ):  # the copy is made now, of what is there now: a program missing from it never starts
            missing = command.missing_program(p.command, p.python, folder)
            if missing:
                raise UsageError(
                    f"job.command: {missing} is not in {folder}, the folder the job runs a copy of: "
                    "it could never start",
                    "submit from the program's folder (or set job.workdir to "
                    "it), or name the program by its absolute path",
                )
            # a relative path out of the folder names nothing in the copy: passed absolute
            p = replace(p, command=command.absolute_outside(p.command, folder))
        args = p.command[1:] if p.command[0] == p.python else p.command
        try:
            named = (
                worktree.named_digests(command.named_files(args, folder), folder) if tree else {}
            )
        except (
            OSError
        ) as e:  # a file the command names that this user cannot read (mode 000, another user's)
            raise UsageError(
                f"job.command names {e.filename}, which cannot be read here ({e.strerror}): its "
                "content is recorded at submit so that the ranks can check it",
                "make it readable "
                "to you, or pass it another way (an environment variable, a path your program "
                "builds)",
            ) from None
        plans.append(p.with_work(run_in=run_in, snapshot=tree.digest if tree else "", named=named))
    return replace(sp, plans=tuple(plans)), tree


def write_work(request) -> None:
    """The copy of a user command's folder that the request's plans name (made once per digest)."""
    if request.work is not None:
        root = job_root(request.sweep.plans[0]).path
        worktree.write(request.work, root / "code")


def work_facts(sp: sweep.SweepPlan, tree: worktree.WorkTree | None) -> tuple[tuple[str, str], ...]:
    """The dry run's lines about a user command: what every rank runs, where, and what is verified."""
    p0 = sp.plans[0]
    if not p0.command:
        return ()
    w = p0.work
    where = (
        f"<job folder>/work, the job's own, laid before every attempt from {w['run_in']} (a copy of "
        f"{tree.source}: {len(tree.files)} files, {tree.size / 2**20:.1f} MiB, {tree.provenance.get('describe')}; "
        "verified by every rank before it starts); what the program writes by relative path stays with the job"
        if tree
        else f"{w['run_in']} (not copied: the ranks run what is there when they start)"
        if w["run_in"]
        else "the image's working directory (or job.workdir): the program must be in the image or on the volume"
    )
    rows = [
        (
            "command",
            command.display(p0.command)
            + (f"  (variant 0 of {len(sp.plans)})" if sp.is_sweep else ""),
        ),
        ("runs in", where),
    ]
    if tree and tree.skipped:
        rows.append(
            ("not copied", ", ".join(tree.skipped[:6]) + (" ..." if len(tree.skipped) > 6 else ""))
        )
    if w.get("named"):
        rows.append(
            (
                "checked",
                ", ".join(sorted(w["named"])) + " (named by the command, outside its folder: their "
                "digests are checked by every rank)",
            )
        )
    return tuple(rows)


def job_root(plan: LaunchPlan) -> JobRoot:
    return JobRoot.of(plan.config.job.output_dir, plan.config.job.name)


def plan_paths(plans: Sequence[LaunchPlan]) -> list[Path]:
    """Where each plan's file goes: plans/<group digest>/task-<i>.json (i = array task). Content-
    addressed, so the dry run can name the very paths a submission will use."""
    root = job_root(plans[0])
    digest = jobdir.plan_group_digest([p.digest for p in plans])
    return [root.task_plan(root.plan_group(digest), i) for i in range(len(plans))]


def plan_files(plans: Sequence[LaunchPlan]) -> list:
    """The plan files of one group, and for an array the group's index (its tasks' plan digests, whose digest names the
    group folder): the rank wrapper checks its plan against the folder name the submitted script gave it."""
    paths = plan_paths(plans)
    files = [File(str(path), p.dumps()) for path, p in zip(paths, plans)]
    if len(plans) > 1:
        files.append(
            File(
                str(JobRoot.plan_index(paths[0].parent)),
                jobdir.plan_index_text([p.digest for p in plans]),
            )
        )
    return files


def write_files(request) -> None:
    """A request's files, under a job root only its owner (and with job.group_readable its group) can enter:
    plan files are content-addressed (kept when present); scripts are the submission's own."""
    job = request.sweep.plans[0].config.job
    job_root(request.sweep.plans[0]).ensure(job.group_readable)
    for f in request.files:
        path = Path(f.path)
        if not path.exists():
            atomic_write_text(path, f.text, mode=f.mode)


def plan_argument(paths: Sequence[Path]) -> str:
    """What the rank wrapper gets as --plan: the file itself, or, for an array, the per-task pattern."""
    if len(paths) == 1:
        return str(paths[0])
    return str(JobRoot.task_plan(paths[0].parent, TASK_ID))


def wrapper_python(python: str, plan_arg: str, folder: str) -> str:
    """The interpreter string given to submitit: our rank wrapper in front of the real python. The
    wrapper gets submitit's folder pattern (%j) to record there how its rank ended."""
    q = shlex.quote
    return f"{q(python)} -m hpcqa.rank --plan {q(plan_arg)} --job-dir {q(folder)} -- {q(python)}"


def registry_row(
    sp: sweep.SweepPlan, plan: LaunchPlan, job_id: str, folder: Path, sweep_id: str | None
) -> dict:
    keys = sweep.swept_keys(list(sp.variants))
    row = dict(
        id=str(job_id),
        name=plan.config.job.name,
        executor=plan.executor,
        folder=str(folder),
        config=plan.config.to_dict(),
        source=plan.config.source,
        nodes=plan.nodes,
        world_size=plan.world_size,
    )
    if sp.is_sweep:
        row.update(
            array_size=len(sp.variants),
            sweep_id=sweep_id,
            task_index=plan.variant_index,
            variant={k: plan.variant.get(k) for k in keys},
        )
    return row


def register(plan: LaunchPlan, rows: list[dict]) -> None:
    Registry(
        plan.config.job.registry or None, group_readable=plan.config.job.group_readable
    ).add_many(rows)


HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held (blocked, so pending) while a job is handed to the scheduler and recorded:
    a Ctrl-C, a runner's SIGTERM or a closed terminal that lands between the scheduler's answer and the registry's
    commit is delivered after the commit -- the job is then queued and recorded, never queued and lost. A child
    started meanwhile inherits the mask (sbatch finishes its answer); a job's processes are started by Slurm's
    daemons, not by it. Nothing is held outside the main thread (the mask is per thread; signals go to the main one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP noted, not acted on, while a local job is started and recorded, then raised once
    both are done (its handler of before acts: a KeyboardInterrupt for the CLI). A handler, not a blocked mask:
    the job's processes started meanwhile must not inherit blocked signals (exec resets a handler to the
    default, never a mask). An ignored signal stays ignored (nohup)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    heard: list[int] = []
    before = {s: signal.getsignal(s) for s in HELD}
    for s, handler in before.items():
        if handler is not signal.SIG_IGN:
            signal.signal(s, lambda signum, frame: heard.append(signum))
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if heard:
            signal.raise_signal(heard[0])


def record_queued(plan: LaunchPlan, rows: list[dict], queued: Sequence[str], stop: str) -> None:
    """register(), for jobs the scheduler has already taken: when the registry still refuses the rows (checked
    writable before the scheduler was asked; a disk can fill in between), the jobs are named with the exact command
    that stops them, in one line, instead of being left running unknown to status."""
    try:
        register(plan, rows)
    except (HpcqaError, OSError, sqlite3.Error) as e:
        why = e.message if isinstance(e, HpcqaError) else str(e)
        raise SubmitError(
            f"job {', '.join(queued)} is queued but was not recorded in the job registry ({why})",
            f"stop it with `{stop}`, or let it run: its folder is {rows[0]['folder']}",
        ) from None


def watch(
    jd: JobDir,
    is_done: Callable[[], bool],
    progress: Progress | None = None,
    fail_fast: Callable[[], None] | None = None,
    poll_s: float = 1.0,
) -> None:
    """Poll until is_done(), passing rank 0's progress on when it changed. fail_fast: called 10 s after a rank
    failed (the other ranks had time to fail on their own), to stop the rest of a local job."""
    failed_at, last = None, None
    while not is_done():
        p = jd.read_progress()
        if progress and p and p != last:
            progress(p)
            last = p
        if fail_fast and jd.failed_ranks():
            failed_at = failed_at or time.time()
            if time.time() - failed_at > 10:
                fail_fast()
                failed_at = float("inf")
        time.sleep(poll_s)
    p = jd.read_progress()  # the last word: a job can write it and end between two polls
    if progress and p and p != last:
        progress(p)
