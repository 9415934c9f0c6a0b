"""Rank wrapper: `python -m hpcqa.rank --plan PLAN.json -- COMMAND...`

Runs in front of every rank, before the real interpreter and its OpenMP runtime start (they read
LD_PRELOAD, OMP_* and KMP_* once, at start-up). It maps the launcher's variables (Slurm, PMI,
submitit local, ...) to RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, exports its local rank's
environment from the plan, binds itself to its CPUs and starts COMMAND as its child, which inherits all
of it; it stays as the rank's supervisor: forwards the scheduler's signals and records how the rank
ended (`ranks/rank-N.exit`) when it died of a signal or a non-zero exit. Standard library only:
importing torch here would defeat the purpose.

Every rank derives its CPU pool from the node it runs on (sysfs topology and its own allowed CPU
set, `topology.read_node`), by the same rule and function the plan applied to the declared node. The
plan's CPUs are the prediction: when the node differs (CPU numbering, a cgroup subset, fewer sockets)
the rank binds what the rule gives on this node, local rank 0 warns once with both layouts, and the
rank records what it really bound (sockets and NUMA nodes included). Memory is bound to the rank's
NUMA node(s) when the node has several.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hpcqa.core import distenv, ranklayout, threadenv, topology
from hpcqa.core import plan as planmod
from hpcqa.core.kinds import PodExit, Requeue
from hpcqa.core.plan import LaunchPlan
from hpcqa.errors import HpcqaError
from hpcqa.rank import netif, picklecheck, preload
from hpcqa.rank.child import die_with
from hpcqa.rank.exits import ignore_at_exit
from hpcqa.rank.phase import Phases
from hpcqa.record import failures, jobdir
from hpcqa.record.jobdir import TASK_ID, JobDir
from hpcqa.record.jobfiles import failure, marks
from hpcqa.record.jobfiles import phase as phasefile
from hpcqa.record.jobfiles.failure import Failure
from hpcqa.record.phases import BEFORE_TRAINING, Phase


def choose_binding(
    plan: LaunchPlan, local_rank: int, node: topology.Node | Sequence[topology.Cpu]
) -> dict[str, Any]:
    """Pure: the pool, CPUs and thread variables this local rank gets on `node`, and how that
    compares with the plan's prediction."""
    lr = plan.local_ranks[local_rank]
    if not lr.cpus:  # launch.bind = false
        return {
            "cpus": [],
            "env": {},
            "note": "not bound (launch.bind = false)",
            "pool": None,
            "layout": None,
        }
    lay = ranklayout.node_layout(plan, node)
    pool = lay.pools[local_rank]
    # the plan's rule on the observed pool, for the variables the plan gave this rank
    ccl, pin_domain = plan.pool_variables  # the plan's decision, not re-derived from its variables
    derived = threadenv.pool_env(
        plan.config.launch, pool, lay.pools, ccl=ccl, pin_domain=pin_domain
    )
    env = {k: v for k, v in derived.items() if k in threadenv.POOL_KEYS}
    same = pool.cpus == lr.cpus
    return {
        "cpus": list(pool.cpus),
        "env": env,
        "pool": pool,
        "layout": lay,
        "note": "as planned"
        if same
        else "re-derived from this node's topology (differs from the plan)",
    }


MPOL_BIND = 2
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261}


def memory_nodes(
    plan: LaunchPlan, pool: topology.Pool | None, node: topology.Node | Sequence[topology.Cpu]
) -> str:
    """Which NUMA nodes to bind this rank's memory to ("" = leave the kernel's default), and why not."""
    cpus = node.cpus if isinstance(node, topology.Node) else node
    if pool is None or not plan.config.launch.bind_memory:
        return ""
    if len({c.numa_node for c in cpus}) < 2:
        return ""  # one NUMA node: nothing to choose
    return ",".join(map(str, pool.numa))


def bind_memory(nodes: Sequence[int]) -> str:
    """set_mempolicy(MPOL_BIND, nodes) for this process; inherited across exec. -> what happened"""
    number = SYS_SET_MEMPOLICY.get(platform.machine())
    if number is None:
        return f"not bound: set_mempolicy number unknown on {platform.machine()}"
    mask = sum(1 << n for n in nodes)
    words = (ctypes.c_ulong * 16)(*[(mask >> (64 * i)) & (2**64 - 1) for i in range(16)])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, MPOL_BIND, words, ctypes.c_ulong(16 * 64 + 1)) != 0:
        return f"not bound: set_mempolicy failed ({os.strerror(ctypes.get_errno())})"
    return "bound to NUMA node(s) " + ",".join(map(str, nodes))


def node_view(plan: LaunchPlan, node: topology.Node) -> dict[str, Any]:
    """`hpcqa topology CONFIG`: what each local rank would bind on `node` -- choose_binding, the
    function every rank runs, so what this shows is what a rank does."""
    ranks, notes = [], ()
    for k, lr in enumerate(plan.local_ranks):
        b = choose_binding(plan, k, node)
        pool = b["pool"]
        notes = b["layout"].notes if b["layout"] else notes
        ranks.append(
            {
                "local_rank": k,
                "socket": list(pool.sockets) if pool else [],
                "numa": list(pool.numa) if pool else [],
                "cpus": b["cpus"],
                "compute": list(pool.compute) if pool else [],
                "ccl": list(pool.ccl) if pool else [],
                "planned_cpus": list(lr.cpus),
                "as_planned": b["note"] == "as planned",
                "membind": memory_nodes(plan, pool, node) or "none",
                "env": {**dict(lr.env), **b["env"]},
            }
        )
    return {
        "node": node.to_json(),
        "ranks": ranks,
        "notes": list(notes),
        "backend": plan.backend.resolved,
    }


def layouts_text(planned: Sequence, found: Sequence[topology.Pool]) -> str:
    fmt = lambda cpus: topology.cpu_list(cpus)  # noqa: E731
    return (
        "planned "
        + "; ".join(f"r{k} {fmt(lr.cpus)}" for k, lr in enumerate(planned))
        + " | this node "
        + "; ".join(
            f"r{p.local_rank} {fmt(p.cpus)} (socket {','.join(map(str, p.sockets))})" for p in found
        )
    )


def rank_environment(
    plan: LaunchPlan,
    env: Mapping[str, str],
    node: topology.Node | Sequence[topology.Cpu],
    hostname: str,
) -> tuple[dict[str, str], list[int], list[str]]:
    """Pure: (environment for the exec, CPUs to bind, warnings)."""
    env = dict(env)
    if plan.config.launch.master_port and not env.get("MASTER_PORT"):
        env["MASTER_PORT"] = str(plan.config.launch.master_port)
    d = distenv.detect(env, hostname)
    if d.world_size != plan.world_size:
        raise HpcqaError(
            f"the launcher started {d.world_size} ranks ({d.source}), the plan has "
            f"{plan.world_size}",
            "submit through hpcqa, or match -n/--ntasks to the plan",
        )
    if d.local_world_size != plan.ranks_per_node or d.local_rank >= len(plan.local_ranks):
        raise HpcqaError(
            f"{d.local_world_size} ranks on this node ({d.source}), the plan has "
            f"{plan.ranks_per_node} ({plan.ranks_per_domain} per {plan.config.launch.rank_domain})",
            f"launch with --ntasks-per-node / -ppn {plan.ranks_per_node}, as the plan's sbatch does",
        )
    lr = plan.local_ranks[d.local_rank]
    binding = choose_binding(plan, d.local_rank, node)
    out = {**env, **lr.env, **binding["env"], **d.torch_env()}
    warnings = _preloads(out, hostname)
    lay, pool = binding["layout"], binding["pool"]
    if (
        lay is not None
        and d.local_rank == 0
        and (lay.notes or any(p.cpus != q.cpus for p, q in zip(lay.pools, plan.local_ranks)))
    ):  # once per node
        warnings.append(
            f"{hostname}: "
            + "; ".join(lay.notes + (binding["note"],))
            + "; "
            + layouts_text(plan.local_ranks, lay.pools)
        )
    if pool is not None:
        out.update(
            HPCQA_SOCKETS=",".join(map(str, pool.sockets)),
            HPCQA_NUMA=",".join(map(str, pool.numa)),
            HPCQA_MEMBIND_NODES=memory_nodes(plan, pool, node),
        )
    out.update(
        HPCQA_PLANNED_CPUS=topology.cpu_list(lr.cpus) if lr.cpus else "",
        HPCQA_BOUND_CPUS=topology.cpu_list(binding["cpus"]) if binding["cpus"] else "",
        HPCQA_BIND_NOTE=binding["note"],
        HPCQA_ENV_SOURCE=d.source,
        HPCQA_HOSTS=",".join(d.hosts),
        HPCQA_PLAN_DIGEST=plan.digest,
    )
    return out, list(binding["cpus"]), warnings


def _preloads(env: dict[str, str], hostname: str) -> list[str]:
    """LD_PRELOAD as this node has it: the plan's wanted libraries (HPCQA_PRELOAD, by name) found here, after any
    path launch.env gave that exists here. What was found where goes to the rank's report (HPCQA_PRELOADED)."""
    given = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    kept = [p for p in given if os.path.exists(p)]
    wanted = [n for n in env.pop(preload.WANTED, "").split(":") if n]
    dirs = preload.library_dirs(env)
    paths, found = preload.resolve(wanted, dirs)
    chosen = kept + [p for p in paths if p not in kept]
    if chosen:
        env["LD_PRELOAD"] = ":".join(chosen)
    else:
        env.pop("LD_PRELOAD", None)
    env[preload.FOUND] = preload.encode(found)
    return [
        f"LD_PRELOAD: {p} not found on {hostname}; left out" for p in given if p not in kept
    ] + [
        f"LD_PRELOAD: {name} not found on {hostname} ({', '.join(dirs[:4])}, ...); "
        "this rank runs without it"
        for name, path in found.items()
        if not path
    ]


USAGE = "usage: python -m hpcqa.rank --plan PLAN.json [--job-dir DIR] -- COMMAND [ARGS...]"
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGHUP,
    signal.SIGCONT,
)


def _options(argv: list[str]) -> dict[str, str] | None:
    if "--" not in argv:
        return None
    opts, head = {}, argv[: argv.index("--")]
    if len(head) % 2 or not argv[argv.index("--") + 1 :]:
        return None
    for k, v in zip(head[::2], head[1::2]):
        if k not in ("--plan", "--job-dir"):
            return None
        opts[k[2:]] = v
    return opts if "plan" in opts else None


def enter_first_phase(phases: Phases, plan: LaunchPlan, env: Mapping[str, str]) -> bool:
    """Starting; or, on a node after the first with launch.master_interface, waiting for the first host to publish
    its address, which master_address gives up on after train.ddp_timeout_s (the record says so: status warns
    before it). -> whether it waits (then starting follows once the address is there)."""
    iface = plan.config.launch.master_interface
    if iface and env.get("NODE_RANK", "0") != "0":
        phases.enter(Phase.ADDRESS, f"of {iface}", timeout_s=plan.config.train.ddp_timeout_s)
        return True
    phases.enter(Phase.STARTING)
    return False


def main(argv: list[str]) -> int:
    opts = _options(argv)
    if opts is None:
        print(USAGE, file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    # an array's tasks each read their own plan (a plain job is task 0)
    plan_path = opts["plan"].replace(TASK_ID, os.environ.get("SLURM_ARRAY_TASK_ID") or "0")
    try:
        plan = planmod.load(plan_path)
        node = topology.read_node()
        env, cpus, warnings = rank_environment(plan, os.environ, node, socket.gethostname())
    except HpcqaError as e:
        print(f"hpcqa.rank: {e.render()}", file=sys.stderr)
        return 2
    env["HPCQA_PLAN"] = str(Path(plan_path).resolve())
    for w in warnings:
        print(f"hpcqa.rank: WARNING: {w}", file=sys.stderr)
    if cpus:
        os.sched_setaffinity(0, cpus)
    mems = env.pop("HPCQA_MEMBIND_NODES", "")
    env["HPCQA_MEMBIND"] = (
        bind_memory([int(n) for n in mems.split(",")])
        if mems
        else "not bound (one NUMA node, or launch.bind_memory = false)"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    folder = jobdir.folder_from_env(opts.get("job-dir", ""), env)
    jd = JobDir(folder) if folder else None
    os.umask(
        0o027 if plan.config.job.group_readable else 0o077
    )  # what the rank writes: its owner's (and group's)
    if (
        jd is not None
        and any("submitit.core._submit" in a for a in command)
        and not _submitted_pickle_ok(jd, plan, plan_path)
    ):
        return 2
    if jd is not None and env.get("RANK") == "0":
        jd.tidy_staging()  # as early as a rank can: status counts a job with a phase file as started
    phases = Phases(jd, int(env["RANK"]), jobdir.attempt_from_env(env))
    waits = enter_first_phase(phases, plan, env)
    try:
        addr = master_address(plan, env, jd, socket.gethostname())
    except HpcqaError as e:
        print(f"hpcqa.rank: {e.render()}", file=sys.stderr)
        return 2
    if addr:
        env["MASTER_ADDR"] = addr
    if waits:
        phases.enter(Phase.STARTING)
    code = supervise(command, env, int(env["RANK"]), jd, plan.requeue)
    ignore_at_exit(FORWARDED)  # nothing left to pass them on to
    return code


def _submitted_pickle_ok(jd: JobDir, plan: LaunchPlan, plan_path: str) -> bool:
    """submitit's runtime is about to load the job's pickle: it must be one hpcqa wrote for this plan (and the plan
    the one submitted), else one line said and False."""
    pickle = jd.submitted_pickle(jd.path.name.rsplit("-", 1)[0])
    c = plan.config.cluster

    def allowed() -> set[bytes]:
        from hpcqa.rank import job  # submitit: only where its runtime is what the rank runs

        return job.pickles(plan_path, plan.digest, c.time_limit_min, c.max_requeues)

    bad = jobdir.plan_problem(plan_path, plan.digest) or picklecheck.check(
        pickle, plan_path, plan.digest, allowed
    )
    if bad:
        print(f"hpcqa.rank: refusing to load {pickle}: {bad}; re-submit the job", file=sys.stderr)
        return False
    return True


def master_address(
    plan: LaunchPlan,
    env: Mapping[str, str],
    jd: JobDir | None,
    hostname: str,
    lookup: Callable[[str], str | None] = netif.ipv4,
    wait_s: float | None = None,
) -> str | None:
    """launch.master_interface: the IPv4 address of that interface on the first host, or None (unset).
    Every rank checks its own node has the interface; ranks on the first node read it there; local rank 0
    of the first node publishes it in the job folder; the other nodes' ranks wait for it."""
    iface = plan.config.launch.master_interface
    if not iface:
        return None
    own = lookup(iface)
    if own is None:
        raise HpcqaError(
            f"launch.master_interface = {iface!r}: no such interface with an IPv4 address on "
            f"{hostname} (it has: {', '.join(netif.names())})",
            "set launch.master_interface to an interface every node has, or leave it empty "
            "(MASTER_ADDR = the first host's name)",
        )
    attempt = jobdir.attempt_from_env(env)
    if env.get("NODE_RANK", "0") == "0":
        if env.get("LOCAL_RANK", "0") == "0" and jd is not None:
            marks.write_address(
                jd.master_address(attempt), {"address": own, "host": hostname, "interface": iface}
            )
        return own
    if jd is None:
        raise HpcqaError(
            "launch.master_interface across nodes needs the job folder (shared by the nodes) to "
            "pass the first host's address",
            "launch through hpcqa submit or a rendered script",
        )
    deadline = time.time() + (wait_s if wait_s is not None else plan.config.train.ddp_timeout_s)
    while True:
        got = marks.read_address(jd.master_address(attempt))
        if got is not None:
            return got.address
        if time.time() > deadline:
            raise HpcqaError(
                f"the first host did not publish the address of {iface!r} in {jd.path} in time",
                "check the first node's log: its interface may be missing",
            )
        time.sleep(0.2)


def supervise(
    command: list[str],
    env: dict[str, str],
    rank: int,
    jd: JobDir | None,
    requeue: Requeue = Requeue.NONE,
) -> int:
    """Run the rank as a child (it inherits the binding, memory policy and environment set here),
    forward the scheduler's signals to it, and record how it ended when it ended badly: a rank
    killed by a signal writes nothing itself, and the first failure must still be named."""
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - replaced by exec
        try:
            die_with(parent)
            os.execvpe(command[0], command, env)
        finally:
            os._exit(127)
    pod = requeue is Requeue.POD
    watch = _NoticeWatch(pid, jd, rank) if pod and jd is not None else None
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, frame: _forward(pid, signum, watch))
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    if watch is not None and watch.reaped():
        print(
            f"hpcqa.rank: rank {rank} was still {watch.phase} {NOTICE_WAIT_S:.0f} s after SIGTERM (blocked outside "
            f"Python): ended; exit {int(PodExit.STOPPED)}, nothing to checkpoint before training",
            file=sys.stderr,
        )
        return int(PodExit.STOPPED)
    stopped = (
        pod and code == PodExit.STOPPED
    )  # checkpointed on a signal: hpcqa.rank.train's own exit
    if code != 0 and jd is not None and not stopped:
        _record_exit(jd, rank, pid, code, env)
    if 0 < code < 128 and pod and jd is not None and _lost_peer(jd, rank):
        # The operator's ExitCode policy and a TrainJob's podFailurePolicy fail the job on 1-127: a rank whose peer
        # went away (an evicted pod, a lost node) says so with a retryable code, and the job restarts from its
        # last checkpoint. Without the trainer's failure record, the error its log (the pod script's) ends with.
        print(
            f"hpcqa.rank: rank {rank} lost a peer: exit {int(PodExit.LOST_PEER)} (retryable)",
            file=sys.stderr,
        )
        return int(PodExit.LOST_PEER)
    if code < 0:  # die the same way, so srun / the local controller see what the rank saw
        if -code not in (
            signal.SIGKILL,
            signal.SIGSTOP,
        ):  # those two have no handler to reset (EINVAL)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _record_exit(jd: JobDir, rank: int, pid: int, code: int, env: Mapping[str, str]) -> None:
    """How the rank ended badly, in its exit record: a rank killed by a signal writes nothing itself."""
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    try:
        failure.write(
            jd.rank_exit(rank),
            {
                "rank": rank,
                "host": socket.gethostname(),
                "pid": pid,
                "exit_code": code,
                "error": f"rank process {how}",
                "time": time.time(),
                "attempt": jobdir.attempt_from_env(env),
            },
        )
    except OSError as e:
        print(f"hpcqa.rank: could not record the exit of rank {rank}: {e}", file=sys.stderr)


def _lost_peer(jd: JobDir, rank: int) -> bool:
    """The rank failed because a peer went away: its failure record says so, or, without one, its log's end."""
    record = failure.read(jd.rank_failed(rank))
    return (
        failures.lost_peer(record)
        or not isinstance(record, Failure)
        and failures.lost_peer_in_log(jd.script_log(rank))
    )


NOTICE_WAIT_S = 15.0  # a pod's rank still before training this long after SIGTERM is blocked in C (a rendezvous)


class _NoticeWatch:
    """A pod's SIGTERM answered in every phase: a rank before training handles it within moments (it exits with the
    stopped code), unless it is blocked outside Python -- torch's rendezvous waits in C++ for up to
    train.ddp_timeout_s, and Python runs signal handlers only between bytecodes. So NOTICE_WAIT_S after the notice,
    a rank whose phase file still says it is before training is ended here, and the pod exits with the stopped code
    before the kubelet's SIGKILL. A rank that is training is left to checkpoint at its step boundary."""

    def __init__(self, pid: int, jd: JobDir, rank: int) -> None:
        self.pid, self.jd, self.rank = pid, jd, rank
        self.lock = threading.Lock()
        self.done = False  # the child was reaped: its pid may be anyone's now
        self.ended = False
        self.phase = ""
        self.timer: threading.Timer | None = None

    def noticed(self) -> None:
        if self.timer is None:
            self.timer = threading.Timer(NOTICE_WAIT_S, self._check)
            self.timer.daemon = True
            self.timer.start()

    def _check(self) -> None:
        record = phasefile.read(self.jd.rank_phase(self.rank), self.rank)
        phase = record.phase if record else None
        with self.lock:
            if not self.done and phase in BEFORE_TRAINING:
                self.phase, self.ended = str(phase), True
                os.kill(self.pid, signal.SIGKILL)

    def reaped(self) -> bool:
        """The child has been waited for: no kill after this. -> whether the watch ended it."""
        with self.lock:
            self.done = True
        if self.timer is not None:
            self.timer.cancel()
        return self.ended


def _forward(pid: int, signum: int, watch: _NoticeWatch | None = None) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
    if watch is not None and signum == signal.SIGTERM:
        watch.noticed()
