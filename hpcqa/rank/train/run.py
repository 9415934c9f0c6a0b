"""One rank of a job: check what it was given, train with the HF Trainer (DDP), evaluate, report.

Expects the rank wrapper (hpcqa.rank) to have exported RANK/WORLD_SIZE/... and the plan's
environment and to have bound the process to its CPUs before this interpreter started. The plan
(typed, from the one file the wrapper read) decided the DDP backend; a rank only checks that it can
honour it. Side effects that must happen once (results.json, progress.json, building caches) are
rank 0's; the other ranks wait for it (main_process_first).

Stages: startup (report, checks) -> training arguments (DDP really on?) -> data -> model ->
trainer -> train -> evaluate -> results.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import shutil
import platform
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hpcqa.core.plan import bf16_choice
from hpcqa.rank.train import commbench, efficiency
from hpcqa.core import scaling
from hpcqa.rank import preload
from hpcqa.core import topology
from hpcqa.errors import HpcqaError, RankError
from hpcqa.record.jobdir import JobDir, JobRoot, read_json, write_json
from hpcqa.core.plan import Backend, LaunchPlan
from hpcqa.record.caches import Caches
from hpcqa.rank.train import metrics
from hpcqa.record.jobdir import attempt_from_env
import signal
import threading
import resource
import datetime
from hpcqa.rank.train import data as qa_data
from hpcqa.rank.phase import Phases


@dataclass
class Rank:
    """What the stages share: who this rank is and what it has found out so far."""

    plan: LaunchPlan
    jd: JobDir
    report: dict
    log: Callable[[str], None]
    t_start: float = field(default_factory=time.time)
    phases: Phases = field(default_factory=lambda: Phases(None, 0))

    @property
    def rank(self) -> int:
        return self.report["rank"]

    @property
    def world(self) -> int:
        return self.report["world_size"]

    def save_report(self, **update: Any) -> None:
        self.report.update(update)
        write_json(self.jd.rank_report(self.rank), self.report)


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def verify_backend(backend: Backend, importer: Callable[[str], Any] = __import__) -> str:
    """The plan decided the backend; check that this rank can honour it. -> what was checked"""
    if backend.resolved != "ccl":
        return f"{backend.resolved} as planned ({backend.reason})"
    try:
        importer("oneccl_bindings_for_pytorch")
    except Exception as e:  # ImportError, or an ABI mismatch with this torch
        raise RankError(f"the plan runs DDP over ccl ({backend.reason}), but oneccl_bindings_for_pytorch does "
                        f"not import on {socket.gethostname()} ({type(e).__name__}: {e})",
                        "install oneccl_bind_pt built for this torch on the compute nodes, or submit with "
                        "train.ddp_backend = \"gloo\"") from None
    return f"ccl as planned ({backend.reason}); oneccl_bindings_for_pytorch imported"


def verify_plan(plan: LaunchPlan, env: dict | os._Environ = os.environ) -> None:
    """The wrapper exported the digest of the plan it applied: the trainer must run that very plan."""
    applied = env.get("HPCQA_PLAN_DIGEST")
    if applied and applied != plan.digest:
        raise RankError(f"the rank wrapper applied plan {applied}, the trainer was given plan {plan.digest}",
                        "submit through hpcqa: the wrapper and the trainer must read the same plan file")


def _versions(torch) -> dict:
    import transformers
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__}
    for mod in ("accelerate", "datasets", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    return versions


def _binding_warnings(torch) -> list[str]:
    allowed = sorted(os.sched_getaffinity(0))
    omp, threads = os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()
    local_world, ncpu = int(os.environ.get("LOCAL_WORLD_SIZE", "1")), os.cpu_count() or 1
    bound = os.environ.get("HPCQA_BOUND_CPUS", "")
    warnings = []
    if bound and topology.cpu_list(allowed) != bound:
        warnings.append(f"bound to CPUs {topology.cpu_list(allowed)}, the wrapper chose {bound}")
    if omp and threads != int(omp):
        warnings.append(f"torch uses {threads} threads, OMP_NUM_THREADS={omp}")
    if threads * local_world > ncpu:
        warnings.append(f"OVERSUBSCRIBED: {local_world} ranks x {threads} threads > {ncpu} CPUs on this node")
    if allowed and threads > len(allowed):
        warnings.append(f"OVERSUBSCRIBED: {threads} threads on {len(allowed)} allowed CPUs")
    return warnings


def attempt() -> int:
    """This (re)start of the job (Slurm's SLURM_RESTART_COUNT, a pod script's HPCQA_ATTEMPT)."""
    return attempt_from_env(os.environ)


class _Stop:
    """Notices only raise a flag: SIGTERM (Slurm's preemption notice, scancel, the time limit; a pod's eviction)
    and the requeue signal (launch.requeue_signal, USR2 by default: --signal=USR2@N before the time limit). Every
    rank checks the flag at each step boundary through one collective, so all stop after the same step, save one
    checkpoint together, and no rank waits in an all-reduce for a peer that left. The collective also agrees on
    the kind: SIGTERM anywhere wins, because then Slurm, not hpcqa, decides whether the job comes back."""

    TERM, REQUEUE = 2, 1

    def __init__(self) -> None:
        self.signum: int | None = None
        self.kind = 0
        self.previous: Any = None
        self.agreed_at: int | None = None

    def install(self, requeue_signal: str = "USR2") -> None:
        # submitit's checkpoint-and-requeue listens on USR2; kept to be called once the checkpoint is saved
        self.previous = signal.getsignal(signal.SIGUSR2)
        self.requeue = getattr(signal, f"SIG{requeue_signal}")
        for sig in {self.requeue, signal.SIGTERM}:
            signal.signal(sig, self._raise_flag)

    def _raise_flag(self, signum, frame) -> None:
        kind = self.TERM if signum == signal.SIGTERM else self.REQUEUE
        if kind > self.kind:
            self.signum, self.kind = signum, kind

    def agreed(self, world: int) -> bool:
        flag = self.kind
        if world > 1:
            import torch
            import torch.distributed as dist
            t = torch.tensor([flag], dtype=torch.int32)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = int(t.item())
        self.kind = flag
        return bool(flag)

    @property
    def name(self) -> str:
        return "SIGTERM" if self.kind == self.TERM else signal.Signals(self.requeue).name


STOP = _Stop()
# After a SIGTERM checkpoint a Slurm rank waits to be killed: Slurm ends the job its own way (the grace time's
# SIGKILL then a requeue for PreemptMode=REQUEUE; CANCELLED for scancel; TIMEOUT) -- a job that exited by
# itself during the grace time would count as ended, and a preempted one would not come back.
TERM_WAIT_S = 900


def stop_after_checkpoint(r: Rank, step: int) -> dict:
    """The checkpoint of `step` is saved on every rank. A requeue signal: hpcqa requeues (submitit's handler:
    global rank 0 requeues; a rendered script or a pod: the script / the operator). SIGTERM: Slurm decides."""
    notice = {"signal": STOP.name, "step": step, "attempt": attempt(), "time": time.time(),
              "checkpoint": str(r.jd.checkpoints / f"checkpoint-{step}")}
    r.save_report(status=f"checkpointed on {STOP.name}", stopped_at_step=step, stopped_at=time.time(), notice=notice)
    if STOP.kind == STOP.TERM and os.environ.get("HPCQA_REQUEUE") != "pod":
        r.log(f"SIGTERM (preemption, scancel or the time limit): checkpoint of step {step} saved; Slurm decides "
              "what follows (PreemptMode=REQUEUE brings the job back, a cancel ends it)")
        if os.environ.get("SLURM_JOB_ID"):
            time.sleep(TERM_WAIT_S)
        raise RankStopped(f"stopped at step {step} on SIGTERM; checkpoint saved ({notice['checkpoint']})")
    r.log(f"{STOP.name} received: checkpoint of step {step} saved; requeueing")
    if os.environ.get("HPCQA_REQUEUE") in ("script", "pod"):  # the job script requeues (a pod: is restarted)
        if r.rank == 0:
            write_json(r.jd.requeue_request(attempt()), {"step": step, "time": time.time()})
        return {"rank": r.rank, "stopped_at_step": step, "requeue": "asked of the job script"}
    if callable(STOP.previous):
        STOP.previous(signal.SIGUSR2, None)  # rank 0: checkpoint pickle, scontrol requeue, exit
    if r.rank != 0:
        time.sleep(300)  # the requeue ends this step; a rank 0 that couldn't requeue ends it too
    raise RankStopped(f"stopped at step {step} on a signal; checkpoint saved (no scheduler to requeue it)")


class RankStopped(Exception):
    """The run stopped on a signal after saving a checkpoint, and nothing requeued it."""


def widen_main_thread() -> str:
    """OpenMP (OMP_PLACES + OMP_PROC_BIND, or KMP_AFFINITY) binds the thread that starts it to the
    first place, and every thread or process started later inherits that one core: gloo's threads,
    the TCP store, DataLoader workers. Start OpenMP now, then give this thread the rank's whole pool
    back: the OpenMP workers stay one per core, everything started from here on gets the pool."""
    import torch

    bound = os.environ.get("HPCQA_BOUND_CPUS", "")
    if not bound:
        return "not bound"
    if os.environ.get("HPCQA_KEEP_OPENMP_BINDING") == "1":  # benchmarks/layout_bench.py: the old behaviour
        return "left as OpenMP bound it (HPCQA_KEEP_OPENMP_BINDING=1)"
    torch.ones(1 << 20).sum()                       # a parallel region: OpenMP binds its threads now
    torch.ones(64, 64) @ torch.ones(64, 64)
    before = topology.cpu_list(os.sched_getaffinity(0))
    pool = topology.parse_cpu_list(bound)
    os.sched_setaffinity(0, pool)
    return f"OpenMP had it on {before}; widened to the rank's pool {topology.cpu_list(pool)}"


def _mapped(ld_preload: str) -> list[str]:
    """The LD_PRELOAD libraries the dynamic loader really mapped into this process (/proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return [p for p in ld_preload.split(":") if p and (p in maps or os.path.realpath(p) in maps)]


def startup_report(plan: LaunchPlan, jd: JobDir) -> dict:
    """What this rank actually got vs what the plan said; warnings for mismatches."""
    import torch

    e = os.environ
    return {
        "host": socket.gethostname(), "pid": os.getpid(), "rank": int(e.get("RANK", "0")),
        "local_rank": int(e.get("LOCAL_RANK", "0")), "node_rank": int(e.get("NODE_RANK", "0")),
        "world_size": int(e.get("WORLD_SIZE", "1")), "local_world_size": int(e.get("LOCAL_WORLD_SIZE", "1")),
        "master_addr": e.get("MASTER_ADDR"), "master_port": e.get("MASTER_PORT"),
        "env_source": e.get("HPCQA_ENV_SOURCE"), "planned_cpus": e.get("HPCQA_PLANNED_CPUS"),
        "sockets": _ints(e.get("HPCQA_SOCKETS")), "numa": _ints(e.get("HPCQA_NUMA")), "membind": e.get("HPCQA_MEMBIND"),
        "cpus": sorted(os.sched_getaffinity(0)), "bind_note": e.get("HPCQA_BIND_NOTE"),
        "preload": preload.decode(e.get(preload.FOUND)), "preload_mapped": _mapped(e.get("LD_PRELOAD", "")),
        "omp_num_threads": e.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads(),
        "ld_preload": e.get("LD_PRELOAD", ""), "versions": _versions(torch), "warnings": _binding_warnings(torch),
        "started": time.time(), "job_dir": str(jd.path), "plan_digest": plan.digest,
        "variant": dict(plan.variant), "variant_index": plan.variant_index,
        # launch.pass_env: whether each name arrived (its value is never recorded)
        "passed_env": {name: name in e for name in plan.config.launch.pass_env},
        "code": code_provenance(e),
    }


def code_provenance(env) -> dict:
    """Which hpcqa this rank imported: the submission's snapshot (its provenance), or the live tree."""
    here = str(Path(__file__).resolve().parents[2])
    snap = env.get("HPCQA_CODE")
    if snap:
        got = read_json(JobRoot.code_provenance(Path(snap)))
        return {**(got if isinstance(got, dict) else {}), "imported_from": here, "snapshot": snap}
    return {"imported_from": here, "snapshot": None, "describe": "the live tree (no snapshot)"}


def _ints(text: str | None) -> list[int]:
    return [int(x) for x in text.split(",") if x] if text else []


def weights_digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------ stages

def run_rank(plan: LaunchPlan, jd: JobDir) -> dict:
    rank = int(os.environ.get("RANK", "0"))
    try:
        return _run(plan, jd)
    except SystemExit:
        if STOP.agreed_at is not None:  # submitit's requeue exits this process: not a failure
            raise
        _write_failed(jd, rank, sys.exc_info()[1])
        raise
    except BaseException as e:
        _write_failed(jd, rank, e)
        raise


def _write_failed(jd: JobDir, rank: int, e: BaseException | None) -> None:
    error = f"{type(e).__name__}: {e.message} (fix: {e.hint})" if isinstance(e, HpcqaError) and e.hint \
        else f"{type(e).__name__}: {e}"
    Phases(jd, rank, attempt()).enter("failed", error[:200])
    write_json(jd.rank_failed(rank), {"rank": rank, "host": socket.gethostname(), "error": error,
                                      "traceback": traceback.format_exc().splitlines()[-30:],
                                      "time": time.time(), "attempt": attempt()})


def _run(plan: LaunchPlan, jd: JobDir) -> dict:
    r = startup(plan, jd)
    if plan.config.job.task == "comm":
        return run_link(r)
    args, bf16 = training_arguments(r)
    with args.main_process_first(local=False, desc="model and data"):
        # global rank 0 first: the cache is usually on a shared filesystem; the writes are atomic anyway
        data = load_data(r)
    model, ipex_used, optimizers = build_model(r, data["model_path"], data["model_kwargs"], bf16)
    trainer = build_trainer(r, args, model, data, optimizers)
    own_peak = rank_peak(r, bf16)
    train_out, resumed_from, train_time = train(r, trainer, jd)
    if STOP.agreed_at is not None:
        return stop_after_checkpoint(r, trainer.state.global_step)
    cfg = plan.config.train
    timing = trainer.hpcqa_timer.summary(cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * r.world)
    timing["efficiency"] = run_efficiency(r, model, data, timing, own_peak, bf16)
    timing["comm"] = comm_probe(r, trainer, timing["step_split_s"])
    timing["optimizer"] = optimizer_facts(trainer)
    timing.update(train_runtime_s=train_time, trainer_samples_per_second=train_out.metrics.get("train_samples_per_second"),
                  best_checkpoint=trainer.state.best_model_checkpoint, best_metric=trainer.state.best_metric)
    digest = weights_digest(trainer.model.module if hasattr(trainer.model, "module") else trainer.model)
    r.save_report(weights_digest=digest, finished=time.time(), status="trained")
    result = evaluate(r, trainer, data) if data["eval_features"] is not None and cfg.do_eval else {}
    if data["test_features"] is not None:
        result["predict"] = predict(r, trainer, data)
    r.save_report(usage=own_usage(r))
    r.phases.enter("finishing")
    if r.rank == 0:
        write_results(r, result, data, train_out, timing, resumed_from, digest, bf16, ipex_used)
    leave_process_group()
    r.phases.enter("done")
    return {"rank": r.rank, "weights_digest": digest, **({"results": result} if r.rank == 0 else {})}


def leave_process_group() -> None:
    """Every rank waits here for the others (rank 0 writing the results) before it exits, so no rank leaves
    while its peers still run collectives: a rank whose peer had gone aborted at exit once on the test cluster
    ("terminate called without an active exception"). The group is not destroyed: destroy_process_group hung
    one rank of a 2-node gloo job in its shutdown after everyone had passed this barrier."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def exit_without_teardown() -> None:
    """Once this rank's work is done and saved, end the process without the interpreter's teardown. The process group
    is left alone (see leave_process_group), and gloo's worker threads can still hold tensors then: destroying those
    during finalization aborts the process (SIGABRT, "terminate called without an active exception"; pytorch
    issue 190489) -- seen on the 2-node test cluster after a rank had logged its success, and the job was FAILED.
    Registered at exit: whatever runs the rank (submitit's runtime writes its result file first) finishes, then this
    ends the process with status 0 -- unless an exception reached the top, which keeps its own exit."""
    failed: list[bool] = []
    previous = sys.excepthook

    def hook(*exc):
        failed.append(True)
        previous(*exc)

    def leave() -> None:
        if not failed:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    sys.excepthook = hook
    atexit.register(leave)


def own_usage(r: Rank) -> dict:
    """What this rank used, measured by itself (seff's numbers for local jobs): CPU seconds of the process and
    its waited-for children (tokenising/DataLoader workers), wall seconds, its CPUs, peak RSS."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # getrusage counts from the process's exec (its imports of torch and transformers included), so the wall
    # time must too: timed from start-up instead, a 1-CPU rank once "used" 165 % of its CPU
    return {"cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
            "wall_s": process_age_s() or time.time() - r.t_start,
            "cpus": len(r.report.get("cpus") or []) or os.cpu_count() or 1, "max_rss_bytes": me.ru_maxrss * 1024,
            "threads_outside_cpus": threads_outside(set(r.report.get("cpus") or []))}


def threads_outside(cpus: set[int]) -> list[str]:
    """This process's threads allowed on CPUs beyond the rank's (one started before pinning would be)."""
    if not cpus:
        return []
    out = []
    for status in Path("/proc/self/task").glob("*/status"):
        try:
            line = next(x for x in status.read_text().splitlines() if x.startswith("Cpus_allowed_list:"))
        except (OSError, StopIteration):
            continue
        if not set(topology.parse_cpu_list(line.split(":", 1)[1].strip())) <= cpus:
            out.append(f"{status.parent.name}: {line.split(':', 1)[1].strip()}")
    return out


def process_age_s() -> float | None:
    """Seconds since this process started (/proc/self/stat's starttime against /proc/uptime)."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 1e-3)
    except (OSError, ValueError, IndexError):
        return None


def startup(plan: LaunchPlan, jd: JobDir) -> Rank:
    """Report what this rank got; check the plan and the backend before any heavy work."""
    main_thread = widen_main_thread()  # before anything reads the binding or starts a thread
    report = startup_report(plan, jd)
    report["main_thread"] = main_thread
    report["attempt"] = attempt()
    jd.begin_attempt(report["rank"], report["attempt"])
    if report["rank"] == 0:
        jd.tidy_staging()
    STOP.install(plan.config.launch.requeue_signal)
    r = Rank(plan, jd, report, _logger(report["rank"]), phases=Phases(jd, report["rank"], report["attempt"]))
    missing = [name for name, there in report["passed_env"].items() if not there]
    if missing:
        report["warnings"].append(f"launch.pass_env: {', '.join(missing)} did not reach this rank (a site default "
                                  "of sbatch --export=NONE, or not set where the job was submitted)")
    for w in report["warnings"]:
        r.log(f"WARNING: {w}")
    r.log(f"attempt {report['attempt']} starts")  # `hpcqa logs` shows a log from its attempt's start
    r.log(f"rank {r.rank}/{r.world} on {report['host']}: CPUs {topology.cpu_list(report['cpus'])}, "
          f"{report['torch_threads']} threads ({report['bind_note']}); plan {plan.digest}")
    r.save_report(backend=plan.backend.resolved, backend_reason=plan.backend.reason)
    verify_plan(plan)
    checked = verify_backend(plan.backend)
    r.save_report(backend_check=checked)
    if r.rank == 0:
        r.log(f"ddp backend: {checked}")
    return r


def training_arguments(r: Rank):
    """TrainingArguments for CPU DDP; refuses to go on unless the Trainer really is distributed."""
    from transformers import TrainingArguments
    from transformers.training_args import ParallelMode

    tc = r.plan.config.train
    backend = r.plan.backend.resolved
    bf16, bf16_reason = bf16_choice(tc.bf16, _cpu_flags())
    r.report["bf16_reason"] = bf16_reason
    accepted = TrainingArguments.__dataclass_fields__["ddp_backend"].metadata.get("choices", [])
    ddp_backend = backend if backend in accepted else None
    guard = rendezvous(r, tc.ddp_timeout_s) if r.world > 1 else None  # the process group is set up below
    if r.world > 1 and ddp_backend is None:
        # Newer transformers dropped "ccl": set the process group up ourselves; accelerate adopts it.

        import torch.distributed as dist
        dist.init_process_group(backend=backend, rank=r.rank, world_size=r.world,
                                timeout=datetime.timedelta(seconds=tc.ddp_timeout_s))
    # transformers 5 folded warmup_ratio into warmup_steps (a float < 1 is a ratio)
    warmup = ({"warmup_ratio": tc.warmup_ratio} if "warmup_ratio" in TrainingArguments.__dataclass_fields__
              else {"warmup_steps": tc.warmup_ratio})
    try:
        args = TrainingArguments(
            output_dir=str(r.jd.checkpoints), use_cpu=True, ddp_backend=ddp_backend, bf16=bf16, **_eval_arguments(tc),
            learning_rate=tc.learning_rate, num_train_epochs=tc.num_train_epochs, max_steps=tc.max_steps,
            per_device_train_batch_size=tc.per_device_train_batch_size,
            per_device_eval_batch_size=tc.per_device_eval_batch_size,
            gradient_accumulation_steps=tc.gradient_accumulation_steps, weight_decay=tc.weight_decay,
            seed=tc.seed, logging_steps=tc.logging_steps, optim=tc.optim, ddp_bucket_cap_mb=tc.ddp_bucket_cap_mb,
            save_total_limit=tc.save_total_limit, dataloader_num_workers=tc.dataloader_num_workers,
            report_to=[], disable_tqdm=True,  # TensorBoard: rank 0's own callback (build_trainer), into the job folder
            ddp_find_unused_parameters=False, log_level="warning", ddp_timeout=tc.ddp_timeout_s, **warmup)
    finally:  # an error setting the group up is the rank's error: no watchdog after it
        if guard is not None:
            guard.cancel()
    if r.world > 1 and (args.parallel_mode != ParallelMode.DISTRIBUTED or args.world_size != r.world):
        raise RuntimeError(f"the Trainer did not set up DDP (parallel_mode={args.parallel_mode}, "
                           f"world_size={args.world_size}, expected {r.world}): every rank would train alone")
    r.phases.enter("loading", "rank 0 first" if r.world > 1 else "")
    return args, bf16


RESOLVE_RETRY_S = 5.0
WATCHDOG_GRACE_S = 60.0


def rendezvous(r: Rank, timeout_s: float, lookup: Callable[..., Any] = socket.getaddrinfo) -> threading.Timer:
    """Before the process group is set up: MASTER_ADDR must resolve on this node (retried until timeout_s: a name can
    appear late), because torch's store retries an unresolvable name well past its timeout (seen here: 12 minutes with
    train.ddp_timeout_s = 120, the job RUNNING all along). Then a watchdog: a rendezvous that has not completed
    timeout_s + a minute later ends this rank with a record of why (the main thread is inside c10d and cannot be
    interrupted). -> the watchdog; cancel it once the group is up."""
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    r.phases.enter("rendezvous", f"{addr}:{port}")
    deadline, said = time.time() + timeout_s, False
    while True:
        try:
            lookup(addr, None)
            break
        except (OSError, UnicodeError) as e:
            why = e
        if time.time() >= deadline:
            raise RankError(f"MASTER_ADDR {addr!r} does not resolve on {socket.gethostname()} ({why}); retried for "
                            f"{timeout_s:.0f} s (train.ddp_timeout_s)",
                            "unset a stale MASTER_ADDR where you submit (the ranks inherit it), or set "
                            "launch.master_interface so that the ranks meet at an IPv4 address")
        if not said:
            r.log(f"WARNING: MASTER_ADDR {addr!r} does not resolve here ({why}); retrying until train.ddp_timeout_s")
            r.phases.note(f"{addr}:{port}; the name does not resolve on this node, retrying")
            said = True
        time.sleep(RESOLVE_RETRY_S)

    def give_up() -> None:
        error = RankError(f"the rendezvous at {addr}:{port} did not complete in {timeout_s + WATCHDOG_GRACE_S:.0f} s",
                          "check that every rank started (hpcqa status JOB) and that the port is reachable from "
                          "every node (launch.master_port)")
        r.log(f"ERROR: {error.message}; ending this rank")
        _write_failed(r.jd, r.rank, error)
        os._exit(1)
    guard = threading.Timer(timeout_s + WATCHDOG_GRACE_S, give_up)
    guard.daemon = True
    guard.start()
    return guard


def _eval_arguments(tc) -> dict:
    """Evaluation during training and the best checkpoint (run_qa.py's --eval_strategy, --eval_steps,
    --load_best_model_at_end); checkpoints follow the evaluations when the best one is kept."""
    out: dict[str, Any] = {"eval_strategy": tc.eval_strategy, "save_strategy": "steps", "save_steps": tc.save_steps}
    if tc.eval_strategy == "steps":
        out["eval_steps"] = tc.eval_steps or tc.logging_steps
    if tc.load_best_model_at_end:
        out.update(load_best_model_at_end=True, metric_for_best_model=tc.metric_for_best_model, greater_is_better=True)
        if tc.eval_strategy == "epoch":
            out["save_strategy"] = "epoch"
    return out


def load_data(r: Rank) -> dict:
    """Tokenizer, raw splits (truncated as configured) and tokenised features."""
    out, warnings = qa_data.prepare_data(r.plan.config, Caches.for_data_cache(r.plan.config.data.cache_dir))
    for warning in warnings:
        r.log(f"WARNING: {warning}")
        r.report["warnings"].append(warning)
    return out


def build_model(r: Rank, model_path: str, kwargs: dict, bf16: bool):
    """The QA model; IPEX `optimize` when asked for and installed. -> (model, ipex version, optimizers)"""
    import torch
    from transformers import AutoModelForQuestionAnswering

    from transformers import set_seed

    tc = r.plan.config.train
    set_seed(tc.seed)  # before the model: the new QA head's initial weights follow train.seed
    model = AutoModelForQuestionAnswering.from_pretrained(model_path, **kwargs)
    if not tc.ipex:
        return model, None, (None, None)
    try:
        import intel_extension_for_pytorch as ipex
    except ImportError:
        r.log("train.ipex = true but intel_extension_for_pytorch is not installed: continuing without it")
        return model, None, (None, None)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.learning_rate, weight_decay=tc.weight_decay)
    model, opt = ipex.optimize(model, optimizer=opt, dtype=torch.bfloat16 if bf16 else torch.float32)
    return model, ipex.__version__, (opt, None)


def build_trainer(r: Rank, args, model, data: dict, optimizers: tuple):
    from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, default_data_collator

    tc = r.plan.config.train
    timer = _StepTimer(TrainerCallback, tc.timing_warmup_steps, r)
    callbacks = [timer, _FinalSave(tc.save_final_checkpoint, TrainerCallback), _StopOnSignal(TrainerCallback, r),
                 _MarkComplete(TrainerCallback, r)]
    if r.rank == 0:
        callbacks.append(_ProgressCallback(r.jd.progress, r.t_start, TrainerCallback))
        board = tensorboard_callback(r)
        if board is not None:
            callbacks.append(board)
    if tc.fail_at_step:
        callbacks.append(_FailAt(tc.fail_at_step, r.rank == r.world - 1, TrainerCallback))
    collator = default_data_collator if r.plan.config.data.pad_to_max_length else \
        DataCollatorWithPadding(data["tokenizer"])
    cls = _QATrainer(Trainer, r, data) if tc.eval_strategy != "no" else Trainer
    trainer = cls(model=model, args=args, train_dataset=data["train_features"], processing_class=data["tokenizer"],
                  eval_dataset=data["eval_features"] if tc.eval_strategy != "no" else None,
                  data_collator=collator, callbacks=callbacks, optimizers=optimizers)
    trainer.hpcqa_timer = timer
    if getattr(trainer.accelerator, "ddp_handler", None) is not None:
        # the Trainer passes no gradient_as_bucket_view to accelerate; DDP is built from this handler at train()
        trainer.accelerator.ddp_handler.gradient_as_bucket_view = tc.ddp_bucket_view
    return trainer


def tensorboard_callback(r: Rank):
    """Rank 0's TensorBoard writer into the job folder. A resumed run purges the steps it redoes, so the
    curves don't double back. None (with a warning) when train.report_to = "none" or tensorboard is missing."""
    if r.plan.config.train.report_to != "tensorboard":
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback
    except ImportError as e:
        r.log(f"WARNING: no TensorBoard curves: {e} (pip install tensorboard, or train.report_to = \"none\")")
        r.report["warnings"].append("tensorboard not installed: no training curves")
        return None
    logdir = r.jd.tensorboard

    class Board(TensorBoardCallback):
        def on_train_begin(self, args, state, control, **kw):
            if self.tb_writer is None:
                self.tb_writer = SummaryWriter(log_dir=str(logdir), purge_step=state.global_step or None)
            super().on_train_begin(args, state, control, **kw)

        def on_train_end(self, args, state, control, **kw):
            if self.tb_writer is not None:
                self.tb_writer.flush()
            super().on_train_end(args, state, control, **kw)

    r.save_report(tensorboard=str(logdir))
    return Board()


def _QATrainer(base, r: Rank, data: dict):
    class QATrainer(base):
        """Evaluation during training scores EM/F1 (post-processing the logits as the final evaluation does),
        so eval_f1 can choose the best checkpoint. Every rank scores: all must agree on the best one."""

        def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
            t0 = time.time()
            loop = self.evaluation_loop(self.get_eval_dataloader(data["eval_features"]), description="Evaluation",
                                        prediction_loss_only=False, ignore_keys=ignore_keys,
                                        metric_key_prefix=metric_key_prefix)
            scores, _ = score(r, data, "eval", loop.predictions)
            metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
            metrics[f"{metric_key_prefix}_runtime"] = time.time() - t0
            self.log(metrics)
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
            return metrics

    return QATrainer


def train(r: Rank, trainer, jd: JobDir):
    """Train, resuming from the newest complete checkpoint in the job folder (what a requeue does)."""
    last = resume_point(r, jd)
    wanted = r.plan.config.train.resume_from
    if not last and wanted:
        if not Path(wanted, "trainer_state.json").is_file():
            raise RankError(f"train.resume_from = {wanted!r} is not a Trainer checkpoint (no trainer_state.json)",
                            "point it at a checkpoint-N folder (hpcqa status JOB names the stopped job's)")
        last = wanted
    if last and r.rank == 0:
        r.log(f"resuming from {last}")
    t0 = time.time()
    try:
        out = trainer.train(resume_from_checkpoint=last)
    except Exception as e:  # torch.save says RuntimeError, safetensors SafetensorError, plain writes OSError
        full = disk_full(jd, e)
        if full:
            raise full from None
        began = any(getattr(cb, "t0", 0.0) for cb in trainer.callback_handler.callbacks)  # the step timer's
        if last and not began and not isinstance(e, HpcqaError):
            first = str(e).splitlines()[0][:200] if str(e) else ""
            raise RankError(f"could not resume from {last}: {type(e).__name__}: {first}",
                            "it verified and read back, yet the Trainer could not load it: move it aside and "
                            "requeue or re-submit (the next older checkpoint is used)") from None
        raise
    return out, last, time.time() - t0


def rank_peak(r: Rank, bf16: bool) -> tuple[float, str]:
    """This rank's matmul peak at the run's precision on its own cores (cached per node shape)."""
    import torch
    store = Caches.for_data_cache(r.plan.config.data.cache_dir).peak_store()
    value, source = efficiency.peak(store, len(r.report.get("cpus") or []) or 1, torch.get_num_threads(),
                                    "bf16" if bf16 else "fp32")
    r.save_report(peak_flops=value, peak_source=source)
    return value, source


def run_efficiency(r: Rank, model, data: dict, timing: dict, own_peak: tuple[float, str], bf16: bool) -> dict:
    """Every rank's peak (gathered), the model's FLOPs per sample, the run's achieved FLOP/s and MFU."""
    import torch.distributed as dist
    peaks: list = [own_peak]
    if dist.is_available() and dist.is_initialized():
        peaks = [None] * dist.get_world_size()
        dist.all_gather_object(peaks, own_peak)
    inner = model.module if hasattr(model, "module") else model
    flops = efficiency.model_flops(inner, data["max_seq_length"])
    rate = timing.get("steady_samples_per_second") or timing.get("train_samples_per_second")
    sources = {s for _, s in peaks}
    return efficiency.summary(flops, rate, [p for p, _ in peaks], "bf16" if bf16 else "fp32",
                              sources.pop() if len(sources) == 1 else "mixed")


def optimizer_facts(trainer) -> dict:
    """The optimizer that ran (the Trainer wraps it in accelerate's), and whether it was the fused kernel."""
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    defaults = getattr(opt, "defaults", {}) or {}
    return {"class": f"{type(opt).__module__}.{type(opt).__name__}", "fused": bool(defaults.get("fused")),
            "setting": trainer.args.optim if isinstance(trainer.args.optim, str) else trainer.args.optim.value}


def comm_probe(r: Rank, trainer, split: dict) -> dict:
    """What DDP all-reduces per step, and the part of it the backward did not hide (commbench); the step's split
    gains that part and the compute left when it is taken out of forward + backward."""
    inner = trainer.model
    steps = r.plan.config.train.comm_probe_steps
    if r.world > 1 and steps:
        comm = commbench.exposed_allreduce(trainer, steps)
    else:
        comm = {**commbench.planned_buckets(inner), "exposed_s": 0.0 if r.world == 1 else None}
    exposed = comm.get("exposed_s")
    if split.get("forward_backward") is not None and exposed is not None:
        split["allreduce_exposed"] = min(exposed, split["forward_backward"])
        split["compute"] = split["forward_backward"] - split["allreduce_exposed"]
    r.save_report(comm=comm)
    return comm


def run_link(r: Rank) -> dict:
    """job.task = "comm": the link between the nodes, measured with the training's backend (commbench)."""
    import torch.distributed as dist
    guard = rendezvous(r, r.plan.config.train.ddp_timeout_s)
    dist.init_process_group(backend=r.plan.backend.resolved, rank=r.rank, world_size=r.world,
                            timeout=datetime.timedelta(seconds=r.plan.config.train.ddp_timeout_s))
    guard.cancel()
    r.phases.enter("link")
    t0 = time.time()
    link = commbench.measure_link(int(r.report.get("node_rank") or 0))
    r.save_report(link=link, finished=time.time(), status="measured")
    if r.rank == 0:
        write_json(r.jd.results, {"status": "COMPLETED", "task": "comm", "link": link, "world_size": r.world,
                                  "nodes": link.get("nodes"), "backend": r.plan.backend.resolved,
                                  "hosts": link.get("hosts"), "measure_s": time.time() - t0,
                                  "job_dir": str(r.jd.path), "plan_digest": r.plan.digest,
                                  "finished_at": time.time(), "wall_time_s": time.time() - r.t_start})
        if "error" in link:
            r.log(f"link: {link['error']}")
        else:
            r.log(f"link: {scaling.human_rate(link['bandwidth_Bps'])}, latency {1e6 * link['latency_s']:.0f} us "
                  f"({r.plan.backend.resolved}, {link['nodes']} nodes)")
    leave_process_group()
    r.phases.enter("done")
    return {"rank": r.rank, "link": link}


def resume_point(r: Rank, jd: JobDir) -> str | None:
    """The newest checkpoint that is complete (every rank's part saved: the mark), whose files are the ones the mark
    lists (sizes and sha256) and that loads (its weights and optimizer state read back). Rank 0 decides and tells the
    others (one reader of a shared file system, one verdict); the ones that fail are set aside with a warning naming
    them and why, and the next older one is tried."""
    choice: list = [None, []]
    if r.rank == 0:
        good, bad = jd.usable_checkpoints()
        for path in good:
            why = jd.verify_checkpoint(path) or _load_problem(path)
            if why is None:
                choice[0] = str(path)
                break
            bad.append((path, why))
        choice[1] = [(str(p), why) for p, why in bad]
    _broadcast(r, choice)
    if r.rank == 0:
        for path, why in choice[1]:
            aside = jd.set_aside(Path(path), attempt())
            r.log(f"WARNING: checkpoint {path} set aside ({why}): now {aside.name}")
            r.report["warnings"].append(f"checkpoint {Path(path).name} set aside: {why}")
        if choice[1]:
            r.save_report()
    _barrier(r)
    return choice[0]


def _load_problem(checkpoint: Path) -> str | None:
    """Read back what the Trainer will load first -- the weights (safetensors) and the optimizer state
    (torch.load with weights_only, as the Trainer does) -- before it loads them: a failure here sends the resume to
    the next older checkpoint instead of ending the job in a loader traceback."""
    import torch
    from safetensors.torch import load_file
    try:
        for p in sorted(checkpoint.glob("*.safetensors")):
            load_file(str(p))
        for p in sorted(checkpoint.glob("optimizer.pt")):
            torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever the loader raises, the verdict is "does not load"
        return f"does not load ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
    return None


def _broadcast(r: Rank, box: list) -> None:
    """Rank 0's `box` to every rank (in place)."""
    if r.world > 1:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.broadcast_object_list(box, src=0)


def _barrier(r: Rank) -> None:
    if r.world > 1:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.barrier()


def disk_full(jd: JobDir, e: BaseException) -> RankError | None:
    """A save that failed because the disk filled up: one line naming the checkpoint and the free space."""
    where = jd.checkpoints if jd.checkpoints.is_dir() else jd.path
    free = shutil.disk_usage(where).free
    nospace = (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left" in str(e) or (
        "write" in str(e).lower() and free < 1 << 20)
    if not nospace:
        return None
    good, bad = jd.usable_checkpoints()
    saving = bad[0][0] if bad else where
    kept = f"the last complete checkpoint, {good[0].name}, is kept and a requeue resumes from it" if good else \
        "no complete checkpoint yet"
    return RankError(f"disk full while saving {saving}: {free / 2 ** 20:.1f} MiB free on {where}",
                     f"free space there, or set job.output_dir on a larger filesystem; {kept}")


def _split_index(data: dict, split: str) -> dict:
    """What post-processing and scoring read of a split (examples, feature offsets, golds), taken from the
    datasets once per split, not at every evaluation during training."""
    key = f"{split}_index"
    if key not in data:
        raw, features = data[f"{split}_raw"], data[f"{split}_features"]
        data[key] = {
            "examples": [{"id": i, "context": c} for i, c in zip(raw["id"], raw["context"])],
            "features": [{"example_id": e, "offset_mapping": o}
                         for e, o in zip(features["example_id"], features["offset_mapping"])],
            "golds": {i: a["text"] for i, a in zip(raw["id"], raw["answers"])},
            "first_facts": dict(zip(raw["id"], raw["first_fact"])) if "first_fact" in raw.column_names else {}}
    return data[key]


def score(r: Rank, data: dict, split: str, predictions, with_golds: bool = True):
    """Logits of a split ("eval" or "test") -> (scores by the official rules of the data's version,
    postprocess.Predictions)."""
    from hpcqa.rank.train import postprocess  # numpy

    cfg = r.plan.config
    v2 = cfg.data.version_2_with_negative
    index = _split_index(data, split)
    start_logits, end_logits = predictions[:2]
    out = postprocess.postprocess(
        index["examples"], index["features"], start_logits, end_logits, n_best_size=cfg.train.n_best_size,
        max_answer_length=cfg.train.max_answer_length, version_2_with_negative=v2,
        null_score_diff_threshold=cfg.train.null_score_diff_threshold)
    if not with_golds:
        return {}, out
    golds = index["golds"]
    # v2: the official script fed our null odds and our threshold (--na-prob-file, --na-prob-thresh)
    result: dict[str, Any] = dict(metrics.squad_scores(golds, out.answers, v2, out.null_odds if v2 else None,
                                                       cfg.train.null_score_diff_threshold))
    if any(index["first_facts"].values()):
        base = metrics.squad_scores(golds, index["first_facts"], v2)
        result["baseline"] = {"name": "first_fact (answer with the context's first fact)",
                              "exact_match": base["exact_match"], "f1": base["f1"]}
    return result, out


def _write_predictions(r: Rank, stage: str, out) -> dict:
    files = {"predictions": out.answers, "nbest_predictions": out.nbest}
    if r.plan.config.data.version_2_with_negative:
        files["null_odds"] = out.null_odds
    paths = {}
    for kind, content in files.items():
        path = r.jd.predictions(stage, kind)
        write_json(path, content)
        paths[kind] = str(path)
    return paths


def evaluate(r: Rank, trainer, data: dict) -> dict:
    """Predict on every rank (DDP gathers); rank 0 post-processes, scores and writes run_qa's files."""
    r.phases.enter("evaluating")
    t0 = time.time()
    pred = trainer.predict(data["eval_features"])
    eval_time = time.time() - t0
    if r.rank != 0:
        return {}
    result, out = score(r, data, "eval", pred.predictions)
    result["files"] = _write_predictions(r, "eval", out)
    result.update(eval_runtime_s=eval_time, eval_samples_per_second=len(data["eval_features"]) / eval_time,
                  eval_examples=len(data["eval_raw"]), eval_features=len(data["eval_features"]))
    return result


def predict(r: Rank, trainer, data: dict) -> dict:
    """The test split (train.do_predict): answers without scores, in predict_*.json."""
    r.phases.enter("predicting")
    t0 = time.time()
    pred = trainer.predict(data["test_features"])
    if r.rank != 0:
        return {}
    _, out = score(r, data, "test", pred.predictions, with_golds=False)
    return {"files": _write_predictions(r, "predict", out), "examples": len(data["test_raw"]),
            "features": len(data["test_features"]), "runtime_s": time.time() - t0}


def write_results(r: Rank, result: dict, data: dict, train_out, timing: dict, resumed_from: str | None,
                  digest: str, bf16: bool, ipex_used: str | None) -> None:
    cfg, rep, m = r.plan.config, r.report, train_out.metrics
    result.update(timing)
    result.update(
        status="COMPLETED", job_dir=str(r.jd.path), world_size=r.world, nodes=r.world // rep["local_world_size"],
        backend=r.plan.backend.resolved, backend_reason=r.plan.backend.reason, bf16=bf16,
        bf16_reason=rep.get("bf16_reason"), ipex=ipex_used, model=cfg.model.name_or_path,
        dataset=cfg.data.dataset or cfg.data.train_file, train_examples=len(data["train_raw"]),
        train_features=len(data["train_features"]), train_loss=m.get("train_loss"), global_steps=train_out.global_step,
        resumed_from=resumed_from, wall_time_s=time.time() - r.t_start, threads_per_rank=rep["torch_threads"],
        versions=rep["versions"], weights_digest=digest, finished_at=time.time(), plan_digest=r.plan.digest,
        variant=dict(r.plan.variant), attempt=rep["attempt"], requeues=rep["attempt"],
        resumed_from_step=int(resumed_from.rsplit("-", 1)[1]) if resumed_from else None,
        notices=r.jd.notices(), code=rep.get("code"),
        max_seq_length=data["max_seq_length"], tensorboard=rep.get("tensorboard"), warnings=rep["warnings"])
    write_json(r.jd.results, result)
    board_efficiency(r, result.get("efficiency") or {}, result.get("step_split_s") or {}, train_out.global_step)
    r.log(f"done: EM {result.get('exact_match', float('nan')):.2f}  F1 {result.get('f1', float('nan')):.2f}  "
          f"train {result['train_samples_per_second']:.1f} samples/s")


def board_efficiency(r: Rank, eff: dict, split: dict, step: int) -> None:
    """MFU, achieved FLOP/s and the step's split into the run's TensorBoard event file, next to its curves
    (rank 0)."""
    if r.plan.config.train.report_to != "tensorboard" or not eff.get("mfu"):
        return
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return
    with SummaryWriter(log_dir=str(r.jd.tensorboard)) as board:
        board.add_scalar("hpcqa/mfu", eff["mfu"], step)
        board.add_scalar("hpcqa/achieved_gflops", eff["achieved_flops"] / 1e9, step)
        board.add_scalar("hpcqa/peak_gflops", eff["peak_flops"] / 1e9, step)
        for part, seconds in split.items():
            if isinstance(seconds, (int, float)):
                board.add_scalar(f"hpcqa/step_s/{part}", seconds, step)


def _logger(rank: int):
    def log(msg: str) -> None:
        print(f"[hpcqa rank {rank}] {msg}", file=sys.stderr, flush=True)
    return log


def _ProgressCallback(path: Path, t0: float, base):
    class ProgressCallback(base):
        """Rank 0 writes progress.json (step, total, loss, ETA) for `submit` and `status` to read."""

        def __init__(self) -> None:
            self.last_write = 0.0
            self.loss = None
            self.t_begin = None

        def on_train_begin(self, args, state, control, **kw):
            self.t_begin = time.time()
            self._write(state, "training", force=True)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.loss = logs["loss"]
            self._write(state, "training", force=True)

        def on_step_end(self, args, state, control, **kw):
            self._write(state, "training")

        def on_train_end(self, args, state, control, **kw):
            self._write(state, "evaluating", force=True)

        def _write(self, state, phase: str, force: bool = False) -> None:
            now = time.time()
            if not force and now - self.last_write < 1.0:
                return
            self.last_write = now
            done = state.global_step
            total = state.max_steps or 0
            elapsed = now - (self.t_begin or now)
            eta = elapsed / done * (total - done) if done and total else None
            write_json(path, {"phase": phase, "step": done, "total_steps": total, "epoch": state.epoch,
                              "loss": self.loss, "eta_s": eta, "updated": now, "started": t0, "attempt": attempt()})

    return ProgressCallback()


def _StopOnSignal(base, r: Rank):
    class StopOnSignal(base):
        """After each optimizer step, all ranks agree whether a stop signal arrived anywhere; if so,
        the Trainer saves a checkpoint of this step and stops (at most the current step is lost)."""

        def on_step_end(self, args, state, control, **kw):
            if STOP.agreed(r.world):
                STOP.agreed_at = state.global_step
                r.phases.enter("stopping", f"{STOP.name} at step {state.global_step}")
                control.should_save = True
                control.should_training_stop = True

    return StopOnSignal()


def _StepTimer(base, warmup: int, r: Rank):
    class StepTimer(base):
        """Times optimizer steps only (not start-up, evaluation or checkpoint saving, which happen
        outside on_step_begin..on_step_end); records the rank's threads once, mid-run. Splits each step by the
        Trainer's own callbacks: forward + backward (with DDP's gradient all-reduce, which overlaps the backward)
        up to on_pre_optimizer_step, the optimizer to on_optimizer_step, the rest (scheduler, zero_grad) to
        on_step_end; and the wait for the next batch, from one step's end to the next one's begin (steps after
        which the Trainer logged, saved or evaluated are left out of that)."""

        def __init__(self) -> None:
            self.durations: list[float] = []
            self.parts: dict[str, list[float]] = {"forward_backward": [], "optimizer": [], "other": [], "data_wait": []}
            self.t0 = self.t_pre = self.t_opt = 0.0
            self.t_end: float | None = None
            self.busy = False  # the Trainer logged, saved or evaluated since the last step ended

        def on_train_begin(self, args, state, control, **kw):
            r.phases.enter("training")

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()
            if self.t_end is not None and not self.busy:
                self.parts["data_wait"].append(self.t0 - self.t_end)
            self.t_pre = self.t_opt = 0.0

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.t_pre = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kw):
            self.t_opt = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            self.durations.append(now - self.t0)
            if self.t_pre and self.t_opt:
                self.parts["forward_backward"].append(self.t_pre - self.t0)
                self.parts["optimizer"].append(self.t_opt - self.t_pre)
                self.parts["other"].append(now - self.t_opt)
            self.t_end, self.busy = now, bool(control.should_log or control.should_save or control.should_evaluate)
            if len(self.durations) == min(2, state.max_steps or 2):
                r.save_report(threads=thread_census())
            r.phases.step(state.global_step, state.max_steps)  # where every rank is, for status (throttled)

        def split(self) -> dict:
            """Mean seconds per step of each part, after the warm-up steps."""
            out = {}
            for name, values in self.parts.items():
                steady = values[warmup:] if len(values) > warmup else values
                out[name] = sum(steady) / len(steady) if steady else None
            return out

        def summary(self, samples_per_step: int) -> dict:
            d, steady = self.durations, self.durations[warmup:]
            return {"train_samples_per_second": samples_per_step * len(d) / sum(d) if d else None,
                    "steady_samples_per_second": samples_per_step * len(steady) / sum(steady) if steady else None,
                    "timed_steps": len(d), "timing_warmup_steps": warmup,
                    "step_time_s": sum(steady) / len(steady) if steady else None, "step_split_s": self.split()}

    return StepTimer()


def _FinalSave(wanted: bool, base):
    class FinalSave(base):
        """The Trainer saves a full checkpoint at the last step even when save_steps doesn't fall
        there; unless train.save_final_checkpoint, skip that one (the run is over)."""

        def on_step_end(self, args, state, control, **kw):
            last = state.max_steps and state.global_step >= state.max_steps
            if last and not wanted and state.global_step % args.save_steps:
                control.should_save = False

    return FinalSave()


def _MarkComplete(base, r: Rank):
    class MarkComplete(base):
        """After a checkpoint is saved, every rank has written its part (model, optimizer, its RNG state) once all
        pass the barrier: then rank 0 marks the folder complete. A folder without the mark is not resumed from."""

        def on_save(self, args, state, control, **kw):
            _barrier(r)
            if r.rank == 0:
                path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if path.is_dir():
                    write_json(r.jd.checkpoint_marker(path), {"step": state.global_step, "time": time.time(),
                                                              "world_size": r.world, "attempt": attempt(),
                                                              "files": r.jd.checkpoint_files(path)})

    return MarkComplete()


def thread_census(pid: int | None = None) -> list[dict]:
    """Every thread of this process and of its children (DataLoader workers): name and CPU mask."""
    pid = pid or os.getpid()
    procs = [pid] + [int(p.name) for p in Path("/proc").glob("[0-9]*") if _ppid(p) == pid]
    out = []
    for proc in procs:
        for task in sorted(Path(f"/proc/{proc}/task").glob("[0-9]*")):
            try:
                mask = next(x.split()[1] for x in (task / "status").read_text().splitlines()
                            if x.startswith("Cpus_allowed_list"))
                name = (task / "comm").read_text().strip()
            except (OSError, StopIteration):
                continue
            out.append({"pid": proc, "tid": int(task.name), "name": name, "cpus": mask, "main": int(task.name) == proc})
    return out


def _ppid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _FailAt(step: int, this_rank: bool, base):
    class FailAt(base):
        """Testing aid (train.fail_at_step): the last rank raises at `step`."""

        def on_step_end(self, args, state, control, **kw):
            if this_rank and state.global_step >= step:
                raise RuntimeError(f"train.fail_at_step = {step}: failing on purpose (test aid)")

    return FailAt()
