"""The local executor: the same plan on this machine, through submitit's LocalExecutor (one module: the
executor, its job verbs, and the choice of free cores).

submitit starts `ranks_per_node` tasks with SUBMITIT_LOCAL_* set; its `python=` hook puts our rank
wrapper in front of each, which maps those variables to torch's, applies the plan's per-socket
environment and binding, and execs the interpreter. All ranks share this terminal's process group, so
Ctrl-C reaches every one of them; a rank that fails makes the others stop (gloo notices the closed
peer; if it doesn't within 10 s, the job is cancelled). A sweep's variants run one after another.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import submitit

from hpcqa import fsutil
from hpcqa.core import kinds, states, sweep, topology
from hpcqa.core.kinds import Requeue
from hpcqa.core.plan import LaunchPlan
from hpcqa.core.ranklayout import node_layout as plan_node_layout
from hpcqa.core.states import State
from hpcqa.errors import HpcqaError, PlanError
from hpcqa.executors import common, snapshot, tracking
from hpcqa.executors.interface import Live, Outcome, Progress, Request, Say, Submitted, silent
from hpcqa.executors.local import searchloop
from hpcqa.rank.job import RankJob
from hpcqa.record.jobdir import JobDir, JobRoot
from hpcqa.record.jobfiles import controller
from hpcqa.record.jobfiles.controller import Controller
from hpcqa.record.registry import Registry


class Local:
    """This machine: submitit's LocalExecutor starts the ranks (one controller process per job, whose pid is the
    job id); the registry's running local jobs decide which cores are free. A sweep's variants run one after
    another, so `submit` of a sweep returns when the last has ended."""

    kind = kinds.LocalKind
    requeue = Requeue.SUBMITIT
    via = "submitit's local controller"
    runs_here = True
    scheduler = None

    def __init__(self, snapshot: bool = True) -> None:
        self.snapshot = snapshot

    def max_array_size(self) -> tuple[int, str]:
        return sweep.DEFAULT_MAX_ARRAY_SIZE, "local: variants run one after another"

    @staticmethod
    def identity(pid: int) -> str | None:
        return identity(pid)

    def dry_run(self, sp: sweep.SweepPlan) -> Request:
        ref = sp.plans[0].trial
        if sp.search and ref:  # a search another submit here runs is not run twice
            searchloop.check_not_running(sp.search, ref.study, ref.storage, identity)
        sp, work = common.with_work(sp.with_requeue(self.requeue), self.snapshot)
        plans = list(sp.plans)
        root = common.job_root(plans[0])
        submission = root.new_submission()
        paths = [common.plan_paths([p])[0] for p in plans]
        folder = str(root.folder_pattern(submission))
        commands = tuple(
            (
                f"{common.wrapper_python(p.python, str(path), folder)} -u -m submitit.core._submit "
                f"{shlex.quote(folder)}",
            )
            for p, path in zip(plans, paths)
        )
        where = "local, one after another" if sp.is_sweep else "local"
        code = snapshot.plan(root) if self.snapshot else None
        return Request(
            self.kind.name,
            self.via,
            sp,
            submission,
            tuple(f for p in plans for f in common.plan_files([p])),
            commands=commands,
            notes=tuple(preview(plans[0])),
            placement=tuple(where for _ in plans),
            facts=(snapshot.fact(code), *common.work_facts(sp, work)),
            code=code,
            work=work,
        )

    def check(self, request: Request) -> tuple[bool, str]:
        return True, "local executor: nothing to ask Slurm"

    def submit(self, request: Request, say: Say = silent) -> Submitted:
        node = topology.read_node()
        for refusal in filter(None, (too_many_ranks(p, node) for p in request.sweep.plans)):
            raise refusal  # before anything is written
        common.write_files(request)
        if request.code:
            snapshot.write(request.code, say)
        common.write_work(request)
        sp = request.sweep
        if sp.search:
            return searchloop.run(self, request, say)
        if sp.is_sweep:
            return self._run_sweep(request, say)
        plan = sp.plans[0]
        started: list = []
        try:
            with common.signals_deferred():  # started and recorded, or an interrupt waits for both
                job, jd = start(plan, request.submission, cpus_for(plan, say=say), request.code)
                started += [job, jd]
                record(plan, [common.registry_row(sp, plan, job.job_id, jd.path, None)], job, jd)
            say(f"local job {job.job_id}: {plan.world_size} ranks, folder {jd.path}")
            for r, lr in zip(range(plan.world_size), plan.local_ranks):
                say(
                    f"  rank {r}: CPUs {','.join(map(str, lr.cpus)) or 'unbound'}  log {jd.submitit_log(job.job_id, r)}"
                )
        except (
            KeyboardInterrupt
        ):  # Ctrl-C, or SIGTERM/SIGHUP as the CLI hears them, while submitting: all or nothing
            if started:
                pid = int(started[0].job_id)
                cancel(pid, identity(pid) or "", started[1].path)
                say(
                    f"interrupted: local job {pid} was stopped (its folder {started[1].path} is kept)"
                )
            raise
        return Submitted(request, (str(job.job_id),), None, (str(jd.path),), handles=(job,))

    def wait(self, submitted: Submitted, progress: Progress | None = None) -> Outcome:
        (job,), (folder,) = submitted.handles, submitted.folders
        return finish(job, JobDir(Path(folder)), submitted.request.sweep.plans[0], progress)

    def _run_sweep(
        self,
        request: Request,
        say: Say,
        sweep_id: str | None = None,
        ended: Callable[[LaunchPlan, JobDir, str], bool] | None = None,
    ) -> Submitted:
        """Variants one after another on this machine (each uses every core the plan gives it); ended(plan, folder,
        state) after each (a search tells its study; True: stop here). The sweep id: the first job's, or the one
        given (a search's next batch)."""
        sp = request.sweep
        failed, ids, folders = 0, [], []
        what = "trial" if sp.search else "variant"
        for p in sp.plans:
            try:
                with (
                    common.signals_deferred()
                ):  # an interrupt now waits until the variant is recorded
                    job, jd = start(p, JobRoot.new_submission(), cpus_for(p, say=say), request.code)
                    sweep_id = sweep_id or f"local-{job.job_id}"
                    ids.append(str(job.job_id))
                    folders.append(str(jd.path))
                    record(p, [common.registry_row(sp, p, job.job_id, jd.path, sweep_id)], job, jd)
            except KeyboardInterrupt:
                if len(ids) > len(folders) - 1 and ids:
                    cancel(int(ids[-1]), identity(int(ids[-1])) or "", Path(folders[-1]))
                say(_stopped(sweep_id, what, p.variant_index, sp.search is not None))
                return Submitted(request, tuple(ids), sweep_id, tuple(folders), exit_code=130)
            say(
                f"sweep {sweep_id}: {what} {p.variant_index} {dict(p.variant)} -> local job {job.job_id}"
            )
            end = finish(job, jd, p)
            if end.interrupted:
                say(_stopped(sweep_id, what, p.variant_index, sp.search is not None))
                return Submitted(request, tuple(ids), sweep_id, tuple(folders), exit_code=130)
            if ended and ended(p, jd, end.state):
                return Submitted(request, tuple(ids), sweep_id, tuple(folders), exit_code=1)
            if not states.succeeded(end.state) or not jd.read_results():
                failed += 1
                first = next(iter(jd.failed_ranks()), None)
                say(
                    f"{what} {p.variant_index}: job {job.job_id} {end.state}"
                    + (f": rank {first.rank}: {first.error}" if first else "")
                    + f" (hpcqa logs {job.job_id})"
                )
        if not sp.search:
            say(
                f"sweep {sweep_id}: {len(sp.variants) - failed} of {len(sp.variants)} variants completed; "
                f"hpcqa results {sweep_id}"
            )
        return Submitted(
            request, tuple(ids), sweep_id, tuple(folders), exit_code=1 if failed else 0
        )


def record(plan: LaunchPlan, rows: list[dict], job: Any, jd: JobDir) -> None:
    """The started job's row, with signals held until it is written; a registry that refuses it (a disk filled
    since the check) stops the job it would have lost: all or nothing."""
    with common.signals_held():
        try:
            common.record_queued(plan, rows, [str(job.job_id)], f"hpcqa cancel {job.job_id}")
        except HpcqaError as e:
            pid = int(job.job_id)
            cancel(pid, identity(pid) or "", jd.path)
            raise PlanError(
                f"{e.message}: the job was stopped",
                "free space where the registry is, or set $HPCQA_REGISTRY, then submit again",
            ) from None


def start(plan: LaunchPlan, submission: str, cpus: set[int] | None = None, code=None):
    """Start the job's controller (and so its ranks) -- on `cpus` when given: the ranks derive their
    pools from the CPUs they may use; importing the snapshot `code` when given. The plan file is already written."""
    (path,) = common.plan_paths([plan])
    root = common.job_root(plan)
    folder = str(root.folder_pattern(submission))
    ex = submitit.LocalExecutor(
        folder=folder, python=common.wrapper_python(plan.python, str(path), folder)
    )
    ex.update_parameters(
        tasks_per_node=plan.ranks_per_node,
        timeout_min=plan.config.cluster.time_limit_min,
        signal_delay_s=min(plan.config.cluster.signal_delay_s, 60),
    )
    log = root.controller_log(submission)
    if code:
        snapshot.verify(code)  # the controller starts now and imports it
    mine, saved = os.sched_getaffinity(0), dict(os.environ)
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)  # inherited by the controller and its ranks
        os.environ.update(code.env() if code else {})  # so is the environment
        with (
            _stdio_to(log),
            _sigint_heard(),
        ):  # the controller inherits our stdio and signal dispositions
            job = ex.submit(RankJob(str(path), plan.digest))
    finally:
        os.sched_setaffinity(0, mine)
        os.environ.clear()
        os.environ.update(saved)
    jd = JobDir(Path(job.paths.folder))
    jd.path.mkdir(parents=True, exist_ok=True)
    ident = identity(int(job.job_id))
    if (
        ident
    ):  # none: the controller is gone already; status then asks the folder, cancel signals nothing
        controller.write(jd.controller_record, {"pid": int(job.job_id), "identity": ident})
    os.replace(log, jd.controller_log)  # the controller keeps writing through its open descriptor
    root.tidy(submission)
    return job, jd


@contextlib.contextmanager
def _stdio_to(path: Path):
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def cpus_for(plan: LaunchPlan, poll_s: float = 5.0, say: Say = silent) -> set[int] | None:
    """Where this local job may run, given the other running local jobs of the registry (and say so)."""
    reg = Registry(plan.config.job.registry or None, create=False)
    node = topology.read_node()
    lay = plan_node_layout(plan, node)
    for note in lay.notes:
        if "OVERSUBSCRIBED" in note:
            say(f"warning: {note}")
    wanted = {c for p in lay.pools for c in p.cpus}
    said = False
    while True:
        cpus, message = choose_cpus(
            wanted,
            set(node.allowed),
            busy_cpus(reg),
            plan.ranks_per_node,
            plan.config.launch.on_busy_cores,
        )
        if message != "wait":
            if message:
                say(f"warning: {message}" if "OVERSUB" in message else message)
            return cpus
        if not said:
            say(
                'waiting: this job\'s CPUs are pinned by a running local job (launch.on_busy_cores = "wait")'
            )
            said = True
        time.sleep(poll_s)


def too_many_ranks(plan: LaunchPlan, node: topology.Node) -> PlanError | None:
    """More ranks than this machine has cores it may use: refused (each would get a slice of a core, and 512 ranks
    on 2 cores would not so much train slowly as thrash). Observed here, where the local executor runs them."""
    cores = topology.physical_cores(node.cpus)
    if plan.ranks_per_node <= len(cores):
        return None
    c = plan.config.cluster
    sockets = len({cpu.socket for cpu in node.cpus}) or 1
    return PlanError(
        f"cluster: the local executor would start {plan.ranks_per_node} ranks on this machine, which "
        f"lets it use {len(cores)} core(s) (the config declares {c.sockets_per_node} socket(s) of "
        f"{c.cores_per_socket} cores)",
        f"set cluster.sockets_per_node = {sockets} and cluster.cores_per_socket = "
        f"{max(len(cores) // sockets, 1)} (what `hpcqa topology` shows here), or lower "
        "launch.ranks_per_socket",
    )


def preview(plan: LaunchPlan) -> list[str]:
    """For the dry run: would this local job's ranks share cores (too few, or pinned by a running job)?"""
    node = topology.read_node()
    refusal = too_many_ranks(plan, node)
    if refusal:
        return [f"submit would refuse: {refusal.message} (fix: {refusal.hint})"]
    lay = plan_node_layout(plan, node)
    notes = [n for n in lay.notes if "OVERSUBSCRIBED" in n]
    wanted = {c for p in lay.pools for c in p.cpus}
    try:
        busy = busy_cpus(Registry(plan.config.job.registry or None, create=False))
        _, message = choose_cpus(
            wanted, set(node.allowed), busy, plan.ranks_per_node, plan.config.launch.on_busy_cores
        )
        if message == "wait":
            message = "this job's CPUs are pinned by a running local job: submit would wait for it"
    except PlanError as e:
        message = f"submit would refuse: {e.message}" + (f" (fix: {e.hint})" if e.hint else "")
    except HpcqaError as e:  # a damaged registry: submit says so
        message = e.message
    return notes + ([message] if message else [])


def finish(job, jd: JobDir, plan: LaunchPlan, progress: Progress | None = None) -> Outcome:
    """Watch a local job to its end; Ctrl-C cancels it (every rank stops) and says so in the outcome."""
    try:
        common.watch(jd, job.done, progress, fail_fast=job.cancel)
    except KeyboardInterrupt:
        job.cancel()
        jd.mark_cancelled("interrupted (Ctrl-C)")  # status: CANCELLED, not FAILED
        return Outcome(str(job.job_id), State.CANCELLED, str(jd.path), interrupted=True)
    finally:
        common.job_root(
            plan
        ).tidy_all()  # after the last poll: submitit re-creates its '%j-...' folder
    state = State.FAILED if jd.failed_ranks() else states.from_submitit_local(job.state)
    # rank 0 may have been killed before its run ended: the run FAILED here
    said = tracking.end_failed(plan, jd) if state == State.FAILED else None
    return Outcome(str(job.job_id), state, str(jd.path), warnings=(said,) if said else ())


# ------------------------------------------------------------------------------------ state and cancel


def local_state(job_id: str, jd: JobDir, pid_alive: Callable[[int], bool] | None = None) -> str:
    """A local job's state: its controller process (the job id is its pid, checked against the identity recorded at
    submit) and its folder."""
    alive = (
        (pid_alive or (lambda pid: controller_alive(pid, jd)))(int(job_id))
        if job_id.isdigit()
        else False
    )
    from_files = jd.state_from_files()
    if from_files == State.CANCELLED:
        return from_files
    if alive:
        return State.RUNNING if jd.has_started() else State.PENDING
    return from_files or State.FAILED


def identity(pid: int) -> str | None:
    """Which process holds `pid`: this boot's id, the process's start time (clock ticks since boot, field 22 of
    /proc/PID/stat) and its owner. A recycled pid has another start time; None when no process holds it."""
    try:
        fields = fsutil.read_kernel(Path(f"/proc/{pid}/stat")).rsplit(")", 1)[1].split()
        boot = fsutil.read_kernel(Path("/proc/sys/kernel/random/boot_id")).strip()
        if fields[0] in (
            "Z",
            "X",
        ):  # exited, not yet reaped by its parent: no process runs there any more
            return None
        return f"{boot}:{fields[19]}:{os.stat(f'/proc/{pid}').st_uid}"
    except (OSError, IndexError):
        return None


def controls(pid: int, folder: Path) -> bool:
    """`pid` runs submitit's local controller of the job folder `folder` (its command line: python -m
    submitit.local._local <root>/%j-<submission>, with %j its own pid). The identity in controller.json is a file
    in the job's folder, where the job's program -- or anything of the user's -- can write the identity of another
    process that took a dead controller's pid; its command line is the kernel's."""
    try:
        argv = (
            fsutil.read_bytes(f"/proc/{pid}/cmdline", fsutil.KERNEL_MAX_BYTES, follow=True)
            .rstrip(b"\0")
            .split(b"\0")
        )
    except OSError:
        return False
    if argv[-3:-1] != [b"-m", b"submitit.local._local"]:
        return False
    named = os.fsdecode(argv[-1]).replace("%j", str(pid))
    return os.path.realpath(named) == os.path.realpath(folder)


def controller_alive(pid: int, jd: JobDir) -> bool:
    """The job's own controller still runs under `pid`: the identity recorded at submit matches, and the process
    is the controller of this folder (controls). A folder without the record (a job from before it was kept, or a
    damaged file): the process must at least be its controller."""
    record = controller.read(jd.controller_record)
    if isinstance(record, Controller) and record.pid == pid:
        return identity(pid) == record.identity and controls(pid, jd.path)
    return controls(pid, jd.path)


def _descendants(pid: int) -> list[tuple[int, str | None]]:
    """Every process below `pid` (the ranks' wrappers and the ranks under them), deepest last, with its identity."""
    parent_of = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent_of[int(stat.parent.name)] = int(
                fsutil.read_kernel(stat).rsplit(")", 1)[1].split()[1]
            )
        except (OSError, ValueError, IndexError):
            continue
    out, frontier = [], [pid]
    while frontier:
        kids = [c for c, p in parent_of.items() if p in frontier]
        out += kids
        frontier = kids
    return [(p, identity(p)) for p in out]


@contextlib.contextmanager
def _sigint_heard():
    """The controller started here hears SIGINT, which is how a cancel or a Ctrl-C stops it. Started from a
    background job (`nohup hpcqa submit ... &`, `cmd &` in a script, some CI runners), hpcqa inherits SIGINT
    *ignored*, and a process started from it would too (an ignored signal stays ignored across exec; a handler
    does not): the controller and its ranks would then ignore every cancel until the grace period's SIGKILL.
    A handler here while the controller starts gives it the default; ours is put back after."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) != signal.SIG_IGN
    ):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def cancel(controller_pid: int, expected: str, folder: Path, grace_s: float = 10.0) -> bool:
    """Stop a local job: SIGINT to submitit's controller, which stops its ranks (SIGINT, then SIGKILL).
    SIGTERM would not do: submitit's job processes bypass it (on Slurm it precedes preemption).
    Whatever is left after the grace period is killed. Every signal goes only to a process whose identity is the one
    recorded (the controller's at submit, the ranks' when listed) and the controller is that of `folder` (its
    command line says so): a recycled pid is never signalled, nor one a forged controller.json names.
    False if the job's controller is not running."""
    if identity(controller_pid) != expected or not expected.endswith(f":{os.getuid()}"):
        return False  # not the recorded process, or not this user's: root could signal anyone's
    if not controls(controller_pid, folder):
        return False
    procs = [*_descendants(controller_pid), (controller_pid, expected)]
    try:
        os.kill(controller_pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    end = time.time() + grace_s
    while time.time() < end:
        if not [p for p, who in procs if who and identity(p) == who]:
            return True
        time.sleep(0.2)
    for p, who in [*reversed(procs[:-1]), procs[-1]]:
        if who and identity(p) == who:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return True


# ------------------------------------------------------------------------------------ busy cores


def busy_cpus(reg, pid_alive: Callable[[int], bool] | None = None) -> dict[str, set[int]]:
    """CPUs that running local jobs of the registry have pinned ranks on: job id -> CPUs."""
    out: dict[str, set[int]] = {}
    for row in reg.jobs() if reg.db is not None else []:
        if row.executor != Local.kind.name or row.final or not row.id.isdigit():
            continue
        jd = JobDir(Path(row.folder))
        if not (pid_alive or (lambda pid: controller_alive(pid, jd)))(int(row.id)):
            continue
        cpus = {c for r in range(row.world_size) if (rep := jd.read_report(r)) for c in rep.cpus}
        if cpus:
            out[row.id] = cpus
    return out


def choose_cpus(
    wanted: set[int], allowed: set[int], busy: dict[str, set[int]], ranks: int, policy: str
) -> tuple[set[int] | None, str]:
    """Pure: (CPUs to run on, or None to keep this process's; what to tell the user).
    Raises PlanError for "refuse", and for "other-cores" when the free CPUs can't give every rank one."""
    taken = set().union(*busy.values()) if busy else set()
    clash = wanted & taken
    if not clash:
        return None, ""
    who = ", ".join(f"job {j} on {topology.cpu_list(c)}" for j, c in busy.items() if c & wanted)
    free = allowed - taken
    if policy == "share":
        return (
            None,
            f"OVERSUBSCRIBED: CPUs {topology.cpu_list(clash)} are already pinned by {who}; sharing them "
            '(launch.on_busy_cores = "share")',
        )
    if policy == "wait":
        return None, "wait"
    if policy == "other-cores" and len(free) >= ranks:
        return (
            free,
            f"CPUs {topology.cpu_list(clash)} are pinned by {who}: this job runs on the free CPUs "
            f'{topology.cpu_list(free)} (launch.on_busy_cores = "other-cores")',
        )
    raise PlanError(
        f"this job's CPUs {topology.cpu_list(clash)} are already pinned by {who}"
        + (
            f"; {len(free)} free CPU(s) can't give {ranks} ranks one each"
            if policy == "other-cores"
            else ""
        ),
        'wait for it (hpcqa status), cancel it, or set launch.on_busy_cores = "wait" (or "share")',
    )


class LocalJobs:
    """The job verbs of local jobs: the controller process (the job id is its pid) and the job folder."""

    def states(self, rows) -> tuple[dict[str, Live], states.Answer]:
        return {r.id: Live(local_state(r.id, JobDir(Path(r.folder)))) for r in rows}, states.NOBODY

    def usage(self, views) -> dict[str, dict]:
        """From the ranks' own measurements (getrusage), the lowest rank's CPU efficiency."""
        out = {}
        for v in views:
            per_rank = [
                (rep.rank, u)
                for rep in v.ranks
                if (u := rep.usage) is not None and u.max_rss_bytes is not None
            ]
            if per_rank:
                effs = {
                    k: eff
                    for k, u in per_rank
                    if u.wall_s * u.cpus > 0 and math.isfinite(eff := u.cpu_s / (u.wall_s * u.cpus))
                }
                out[v.id] = {
                    "source": "ranks",
                    "per_rank": {
                        k: {
                            "cpu_s": u.cpu_s,
                            "wall_s": u.wall_s,
                            "cpus": u.cpus,
                            "max_rss_bytes": u.max_rss_bytes,
                            "cpu_efficiency": effs.get(k),
                        }
                        for k, u in per_rank
                    },
                    "cpu_efficiency": min(effs.values()) if effs else None,
                    "max_rss_bytes": max(u.max_rss_bytes or 0 for _, u in per_rank),
                }
        return out

    def cancel(self, rows, whole_sweeps: bool) -> list[str]:
        out = []
        for row in rows:
            jd = JobDir(Path(row.folder))
            record = controller.read(jd.controller_record)
            if not (isinstance(record, Controller) and record.pid == int(row.id)):
                out.append(
                    f"job {row.id}: no record of its process in {jd.path}; nothing signalled (pid {row.id} "
                    "may belong to another process now)"
                )
                continue
            if not cancel(int(row.id), record.identity, jd.path):
                out.append(
                    f"job {row.id} is not running (its process is gone; pid {row.id} is not it)"
                )
                continue
            JobDir(Path(row.folder)).mark_cancelled("cancelled by hpcqa cancel")
            JobDir(
                Path(row.folder)
            ).tidy_staging()  # a job cancelled before its rank 0 started tidies nothing
            out.append(f"cancelled local job {row.id}")
        return out


def _stopped(sweep_id: str | None, what: str, index: int, search: bool) -> str:
    """The line an interrupted local sweep ends with; a search's says how it goes on (its study keeps the trial)."""
    line = f"interrupted: sweep {sweep_id} stopped at {what} {index}"
    return line + ("; submit the config again to go on (that trial runs again)" if search else "")
