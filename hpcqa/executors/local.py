"""The local executor: the same plan on this machine, through submitit's LocalExecutor.

submitit starts `ranks_per_node` tasks with SUBMITIT_LOCAL_* set; its `python=` hook puts our rank
wrapper in front of each, which maps those variables to torch's, applies the plan's per-socket
environment and binding, and execs the interpreter. All ranks share this terminal's process group, so
Ctrl-C reaches every one of them; a rank that fails makes the others stop (gloo notices the closed
peer; if it doesn't within 10 s, the job is cancelled). A sweep's variants run one after another.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable

from hpcqa.core import sweep, topology
from hpcqa.executors import common
from hpcqa.record.jobdir import JobDir
from hpcqa.errors import HpcqaError
from hpcqa.core.plan import LaunchPlan
from hpcqa.core import states


def submit(plan: LaunchPlan, cpus: set[int] | None = None):
    """Start the job's controller (and so its ranks) -- on `cpus` when given: the ranks derive their
    pools from the CPUs they may use."""
    import submitit

    from hpcqa.rank.train.job import RankJob

    (path,) = common.write_plans([plan])
    root = common.job_root(plan)
    submission = root.new_submission()
    folder = str(root.folder_pattern(submission))
    ex = submitit.LocalExecutor(folder=folder, python=common.wrapper_python(plan.python, str(path), folder))
    ex.update_parameters(tasks_per_node=plan.ranks_per_node, timeout_min=plan.config.cluster.time_limit_min,
                         signal_delay_s=min(plan.config.cluster.signal_delay_s, 60))
    log = root.controller_log(submission)
    mine = os.sched_getaffinity(0)
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)  # inherited by the controller and its ranks
        with _stdio_to(log):  # the controller inherits our stdio: keep its messages off the terminal
            job = ex.submit(RankJob(str(path), plan.digest))
    finally:
        os.sched_setaffinity(0, mine)
    jd = JobDir(Path(job.paths.folder))
    jd.path.mkdir(parents=True, exist_ok=True)
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


def run(sp: sweep.SweepPlan, wait: bool = True) -> int:
    if sp.is_sweep:
        return _run_sweep(sp)[0]
    plan = sp.plans[0]
    job, jd = submit(plan, cpus_for(plan))
    common.register(plan, [common.registry_row(sp, plan, job.job_id, jd.path, None)])
    err = sys.stderr
    print(f"local job {job.job_id}: {plan.world_size} ranks, folder {jd.path}", file=err)
    for r, lr in zip(range(plan.world_size), plan.local_ranks):
        print(f"  rank {r}: CPUs {','.join(map(str, lr.cpus)) or 'unbound'}  "
              f"log {jd.submitit_log(job.job_id, r)}", file=err)
    if not wait:
        print(f"  runs on in the background: hpcqa status {job.job_id} / hpcqa logs {job.job_id} -f / "
              f"hpcqa cancel {job.job_id}", file=err)
        print(job.job_id)
        return 0
    return finish(job, jd, plan, f"job {job.job_id}",
                  f"interrupted: local job {job.job_id} cancelled (all ranks stopped)")


def start(sp: sweep.SweepPlan) -> tuple[list[str], str | None]:
    """Start without waiting or printing (the Python API). A sweep's variants run one after another on this
    machine, so a local sweep returns when the last has ended. -> (job ids, sweep id or None)."""
    if sp.is_sweep:
        _, sweep_id, ids = _run_sweep(sp)
        return ids, sweep_id
    plan = sp.plans[0]
    job, jd = submit(plan, cpus_for(plan))
    common.register(plan, [common.registry_row(sp, plan, job.job_id, jd.path, None)])
    return [str(job.job_id)], None


def _run_sweep(sp: sweep.SweepPlan) -> tuple[int, str | None, list[str]]:
    """Variants one after another on this machine (each uses every core the plan gives it).
    -> (exit code, sweep id, job ids)"""
    from hpcqa.errors import JobFailed

    sweep_id, failed, ids = None, 0, []
    for p in sp.plans:
        job, jd = submit(p, cpus_for(p))
        sweep_id = sweep_id or f"local-{job.job_id}"
        ids.append(str(job.job_id))
        common.register(p, [common.registry_row(sp, p, job.job_id, jd.path, sweep_id)])
        print(f"sweep {sweep_id}: variant {p.variant_index} {dict(p.variant)} -> local job {job.job_id}",
              file=sys.stderr)
        try:
            if finish(job, jd, p, f"variant {p.variant_index}",
                      f"interrupted: sweep {sweep_id} stopped at variant {p.variant_index}") == 130:
                return 130, sweep_id, ids
        except JobFailed as e:
            failed += 1
            print(e.render(), file=sys.stderr)
    print(f"sweep {sweep_id}: {len(sp.variants) - failed} of {len(sp.variants)} variants completed; "
          f"hpcqa results {sweep_id}")
    return (1 if failed else 0), sweep_id, ids


def cpus_for(plan: LaunchPlan, poll_s: float = 5.0) -> set[int] | None:
    """Where this local job may run, given the other running local jobs of the registry (and say so)."""
    from hpcqa.rank import wrapper as rank
    from hpcqa.record.registry import Registry
    reg = Registry(plan.config.job.registry or None, create=False)
    node = topology.read_node()
    lay = rank.node_layout(plan, node)
    for note in lay.notes:
        if "OVERSUBSCRIBED" in note:
            print(f"warning: {note}", file=sys.stderr)
    wanted = {c for p in lay.pools for c in p.cpus}
    said = False
    while True:
        cpus, message = choose_cpus(wanted, set(node.allowed), busy_cpus(reg), plan.ranks_per_node,
                                    plan.config.launch.on_busy_cores)
        if message != "wait":
            if message:
                print(f"warning: {message}" if "OVERSUB" in message else message, file=sys.stderr)
            return cpus
        if not said:
            print("waiting: this job's CPUs are pinned by a running local job (launch.on_busy_cores = \"wait\")",
                  file=sys.stderr)
            said = True
        time.sleep(poll_s)


def preview(plan: LaunchPlan) -> list[str]:
    """For the dry run: would this local job's ranks share cores (too few, or pinned by a running job)?"""
    from hpcqa.rank import wrapper as rank
    from hpcqa.errors import PlanError
    from hpcqa.record.registry import Registry
    node = topology.read_node()
    lay = rank.node_layout(plan, node)
    notes = [n for n in lay.notes if "OVERSUBSCRIBED" in n]
    wanted = {c for p in lay.pools for c in p.cpus}
    try:
        busy = busy_cpus(Registry(plan.config.job.registry or None, create=False))
        _, message = choose_cpus(wanted, set(node.allowed), busy, plan.ranks_per_node,
                                 plan.config.launch.on_busy_cores)
        if message == "wait":
            message = "this job's CPUs are pinned by a running local job: submit would wait for it"
    except PlanError as e:
        message = f"submit would refuse: {e.message}"
    except HpcqaError as e:  # a damaged registry: submit says so
        message = e.message
    return notes + ([message] if message else [])


def finish(job, jd: JobDir, plan: LaunchPlan, title: str, interrupted: str) -> int:
    """Watch a local job to its end and report it (JobFailed if it failed); 130 after Ctrl-C."""
    try:
        common.watch(jd, job.done, title, fail_fast=job.cancel)
    except KeyboardInterrupt:
        job.cancel()
        jd.mark_cancelled("interrupted (Ctrl-C)")  # status: CANCELLED, not FAILED
        common.job_root(plan).tidy_all()
        print(f"\n{interrupted}", file=sys.stderr)
        return 130
    common.job_root(plan).tidy_all()
    state = "FAILED" if jd.failed_ranks() else states.from_submitit_local(job.state)
    return common.report(job.job_id, jd, state, plan)


# ------------------------------------------------------------------------------------ state and cancel

def local_state(job_id: str, jd: JobDir, pid_alive: Callable[[int], bool] | None = None) -> str:
    """A local job's state: its controller process (the job id is its pid) and its folder."""
    alive = (pid_alive or _pid_alive)(int(job_id)) if job_id.isdigit() else False
    from_files = jd.state_from_files()
    if from_files == "CANCELLED":
        return from_files
    if alive:
        return "RUNNING" if jd.has_started() else "PENDING"
    return from_files or "FAILED"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a recycled pid isn't our controller
        return b"submitit" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (the ranks' wrappers and the ranks under them), deepest last."""
    parent_of = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent_of[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, frontier = [], [pid]
    while frontier:
        kids = [c for c, p in parent_of.items() if p in frontier]
        out += kids
        frontier = kids
    return out


def cancel(controller_pid: int, grace_s: float = 10.0) -> bool:
    """Stop a local job: SIGINT to submitit's controller, which stops its ranks (SIGINT, then SIGKILL).
    SIGTERM would not do: submitit's job processes bypass it (on Slurm it precedes preemption).
    Whatever is left after the grace period is killed. False if the job wasn't running."""
    ranks = _descendants(controller_pid)
    try:
        os.kill(controller_pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    end = time.time() + grace_s
    while time.time() < end:
        if not [p for p in [controller_pid, *ranks] if Path(f"/proc/{p}").exists()]:
            return True
        time.sleep(0.2)
    for p in [*reversed(ranks), controller_pid]:
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
        if row.executor != "local" or row.final or not row.id.isdigit():
            continue
        if not (pid_alive or _pid_alive)(int(row.id)):
            continue
        jd = JobDir(Path(row.folder))
        cpus = {c for r in range(row.world_size) for c in ((jd.read_report(r) or {}).get("cpus") or [])}
        if cpus:
            out[row.id] = cpus
    return out


def choose_cpus(wanted: set[int], allowed: set[int], busy: dict[str, set[int]], ranks: int,
                policy: str) -> tuple[set[int] | None, str]:
    """Pure: (CPUs to run on, or None to keep this process's; what to tell the user).
    Raises PlanError for "refuse", and for "other-cores" when the free CPUs can't give every rank one."""
    from hpcqa.errors import PlanError
    taken = set().union(*busy.values()) if busy else set()
    clash = wanted & taken
    if not clash:
        return None, ""
    who = ", ".join(f"job {j} on {topology.cpu_list(c)}" for j, c in busy.items() if c & wanted)
    free = allowed - taken
    if policy == "share":
        return None, f"OVERSUBSCRIBED: CPUs {topology.cpu_list(clash)} are already pinned by {who}; sharing them " \
                     "(launch.on_busy_cores = \"share\")"
    if policy == "wait":
        return None, "wait"
    if policy == "other-cores" and len(free) >= ranks:
        return free, f"CPUs {topology.cpu_list(clash)} are pinned by {who}: this job runs on the free CPUs " \
                     f"{topology.cpu_list(free)} (launch.on_busy_cores = \"other-cores\")"
    raise PlanError(f"this job's CPUs {topology.cpu_list(clash)} are already pinned by {who}"
                    + (f"; {len(free)} free CPU(s) can't give {ranks} ranks one each" if policy == "other-cores" else ""),
                    "wait for it (hpcqa status), cancel it, or set launch.on_busy_cores = \"wait\" (or \"share\")")
