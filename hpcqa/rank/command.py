"""One rank of a user command (`job.command`): the program runs as this process's child, in its own process group,
with the environment the rank wrapper set (RANK, WORLD_SIZE, MASTER_ADDR ..., the pinning, OMP_*/KMP_*/CCL_*, the
preloads) plus the job's own variables:

    HPCQA_JOB_DIR          the job folder (outputs belong under it)
    HPCQA_CHECKPOINT_DIR   <job folder>/checkpoints: the same folder for every attempt of the job
    HPCQA_ATTEMPT          0 for the first start, 1 after the first requeue ...
    HPCQA_RESUMING         1 when an earlier attempt ran and the checkpoint folder holds something, else 0
    HPCQA_RESULTS          where rank 0 may write a JSON object of metrics: `hpcqa results` and `status` show them
    HPCQA_SWEEP_<KEY>      a sweep variant's values (train.learning_rate -> HPCQA_SWEEP_TRAIN_LEARNING_RATE)
    TORCHELASTIC_RESTART_COUNT / _MAX_RESTARTS / _RUN_ID   as torchrun sets them

A notice -- SIGTERM (preemption, scancel, the time limit) or the requeue signal (launch.requeue_signal) -- reaches the
program's process group as SIGTERM (the program starts with the requeue signal ignored: Slurm signals every process of
the step); once the program has exited, the job goes on as the built-in trainer's does:
the requeue signal is answered by hpcqa's requeue (submitit's, the job script's, the pod's restart), SIGTERM is
Slurm's to decide. Otherwise the program's exit code decides: 0 completes the rank; anything else fails it, with
the code and the last lines of the program's stderr in ranks/rank-N.failed, which `status` shows. Before anything
starts, the program's folder (the copy made at submit) and the files it names are verified against their digests.
No torch: this process only supervises.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hpcqa import fsutil
from hpcqa.core import command as commandmod
from hpcqa.core.eta import StepRate
from hpcqa.core.kinds import PodExit, Requeue
from hpcqa.core.plan import LaunchPlan
from hpcqa.errors import RankError
from hpcqa.fsutil import own_folder
from hpcqa.rank.child import die_with
from hpcqa.rank.exits import (
    all_ranks_stopped,
    code_provenance,
    requeue_through_submitit,
    wait_for_slurms_end,
)
from hpcqa.rank.phase import Phases
from hpcqa.record import trainerfiles, worktree
from hpcqa.record.jobdir import JobDir, attempt_from_env, write_json
from hpcqa.record.jobfiles import failure as failurefile
from hpcqa.record.jobfiles import progress as progressfile
from hpcqa.record.jobfiles import report as reportfile
from hpcqa.record.jobfiles import results as resultsfile
from hpcqa.record.jobfiles.fields import MAX_TEXT
from hpcqa.record.jobfiles.report import Report
from hpcqa.record.phases import Phase

TAIL_LINES = 20
MAX_RESULTS_BYTES = 1 << 20


class CommandFailed(RankError):
    """The program ended with a non-zero code (the job fails with it)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message, "hpcqa logs JOB --rank N shows the program's output")
        self.code = code


def child_env(plan: LaunchPlan, jd: JobDir, attempt: int, base: dict[str, str]) -> dict[str, str]:
    """What the program gets: the rank's environment and the job's variables (the docstring's table)."""
    env = dict(base)
    env.pop(
        "PYTHONSAFEPATH", None
    )  # hpcqa's own import isolation; a script imports its neighbours as usual
    ckpt = jd.checkpoints
    earlier = attempt > 0 and ckpt.is_dir() and any(ckpt.iterdir())
    env.update(
        {
            "HPCQA_JOB_DIR": str(jd.path),
            "HPCQA_CHECKPOINT_DIR": str(ckpt),
            "HPCQA_ATTEMPT": str(attempt),
            "HPCQA_RESUMING": "1" if earlier else "0",
            "HPCQA_RESULTS": str(jd.command_results),
            "TORCHELASTIC_RESTART_COUNT": str(attempt),
            "TORCHELASTIC_MAX_RESTARTS": str(plan.config.cluster.max_requeues),
            "TORCHELASTIC_RUN_ID": env.get("SLURM_JOB_ID") or jd.path.name,
            **commandmod.sweep_env(plan.variant),
        }
    )
    return env


def verify(plan: LaunchPlan) -> str | None:
    """What keeps the program from starting as submitted (None: the copy and the named files verify)."""
    w = plan.work
    if w.get("snapshot"):
        bad = worktree.problem(str(Path(w["run_in"]).parent), w["snapshot"])
        if bad:
            return bad
    if w.get("named"):
        return worktree.named_problem(w["named"])
    if w.get("run_in") and not os.path.isdir(w["run_in"]):
        return f"the working directory {w['run_in']} is not there on {socket.gethostname()}"
    return None


def working_folder(plan: LaunchPlan, jd: JobDir) -> str:
    """Where the program runs: the job's own copy of its verified folder (laid again before every attempt, so the
    submitted files are as submitted and the job's own outputs stay); without a copy (--no-snapshot), the folder
    itself."""
    w = plan.work
    if not w.get("snapshot"):
        return w.get("run_in") or ""
    return str(worktree.lay(str(Path(w["run_in"]).parent), jd.work))


def job_argv(plan: LaunchPlan, jd: JobDir) -> list[str]:
    """The command with the job's own paths filled in ({job.dir}, {job.work_dir}, {job.checkpoint_dir}: known here,
    at the rank, once the job has its folder)."""
    run_in = jd.work if plan.work.get("snapshot") else Path(plan.work.get("run_in") or os.getcwd())
    return commandmod.job_paths(
        list(plan.command),
        plan.work.get("job_paths") or (),
        {
            "job.dir": str(jd.path),
            "job.work_dir": str(run_in),
            "job.checkpoint_dir": str(jd.checkpoints),
        },
    )


class _Notices:
    """SIGTERM and the requeue signal are remembered (the strongest: SIGTERM) and passed on to the program's group
    as SIGTERM; SIGINT and SIGHUP are passed on as they are."""

    def __init__(self, requeue_signal: str) -> None:
        self.requeue = getattr(signal, f"SIG{requeue_signal}")
        self.kind: int | None = None  # the signal that first asked for a stop (SIGTERM wins)
        self.previous: Any = None
        self.pid: int | None = None

    def install(self) -> None:
        self.previous = signal.getsignal(signal.SIGUSR2)  # submitit's checkpoint-and-requeue
        for sig in {self.requeue, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}:
            signal.signal(sig, self._on)

    def names(self) -> frozenset[str]:
        """The notices' names as a rank's report records them."""
        return frozenset({signal.Signals(self.requeue).name, "SIGTERM"})

    def _on(self, signum: int, frame: Any) -> None:
        if signum in (signal.SIGTERM, self.requeue) and self.kind != signal.SIGTERM:
            self.kind = signum
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGTERM if signum == self.requeue else signum)
            except ProcessLookupError:
                pass


def _start(
    argv: list[str], cwd: str, env: dict[str, str], parent: int, requeue: int
) -> tuple[int, int]:
    """Fork and exec the program in a process group of its own, its stderr into a pipe (-> pid, the pipe's read end).
    Before the exec it is made to die with this process, and to ignore the requeue signal (SIG_IGN survives exec,
    until the program sets a handler of its own): Slurm signals every process of the step -- `--signal=USR2@N` and
    `scancel --signal` reach the program directly, and USR2's default action would kill it before it saved anything;
    the notice reaches it as SIGTERM, from here. A program that cannot be started exits 127, saying why."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - replaced by exec
        try:
            os.setsid()
            os.dup2(write, 2)
            os.close(read)
            os.close(write)
            signal.signal(requeue, signal.SIG_IGN)
            die_with(parent)
            if cwd:
                os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as e:  # noqa: BLE001 - anything: the child must not return into this program
            os.write(2, f"hpcqa: cannot start {argv[0]!r}: {e}\n".encode(errors="replace"))
        finally:
            os._exit(127)
    os.close(write)
    return pid, read


PUMP_CHUNK = 64 << 10  # read from the program's stderr at a time
TAIL_LINE = 500  # characters kept of each of the last lines


def _pump(stream, tail: collections.deque) -> None:
    """The program's stderr to this rank's log as it comes (a progress bar's \\r updates too, not held until a
    newline), keeping the last lines, each cut to TAIL_LINE characters, for the failure record. Memory stays
    bounded whatever the program writes: a 200 MiB line without a newline is passed on in PUMP_CHUNK pieces and
    only its first TAIL_LINE characters are kept."""
    fd = stream.fileno()
    line = bytearray()  # the current line's start (at most TAIL_LINE * 4 bytes: UTF-8)
    while True:
        chunk = os.read(fd, PUMP_CHUNK)
        if not chunk:
            break
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        *done, rest = chunk.split(b"\n")
        for piece in done:
            line += piece[: max(0, TAIL_LINE * 4 - len(line))]
            tail.append(line.decode("utf-8", "replace")[:TAIL_LINE])
            line = bytearray()
        line += rest[: max(0, TAIL_LINE * 4 - len(line))]
    if line:
        tail.append(line.decode("utf-8", "replace")[:TAIL_LINE])


def run_command(plan: LaunchPlan, jd: JobDir) -> dict:
    rank, attempt = int(os.environ.get("RANK", "0")), attempt_from_env(os.environ)
    phases, report = _begin(plan, jd, rank, attempt)
    notices = _Notices(plan.config.launch.requeue_signal)
    notices.install()
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    parent = os.getpid()
    started = time.time()
    cwd = working_folder(plan, jd)
    roots = [Path(cwd or os.getcwd()), jd.checkpoints]
    if attempt > 0:
        _set_aside_interrupted(jd, roots, rank, attempt, report)
    pid, err = _start(
        job_argv(plan, jd),
        cwd,
        child_env(plan, jd, attempt, dict(os.environ)),
        parent,
        notices.requeue,
    )
    notices.pid = pid
    phases.enter(Phase.COMMAND, commandmod.display(plan.command)[:120], pid=pid)
    pump = threading.Thread(target=_pump, args=(os.fdopen(err, "rb"), tail), daemon=True)
    pump.start()
    ended = threading.Event()
    if (
        rank == 0
    ):  # what an HF Trainer program already writes, read into progress.json for submit and status
        threading.Thread(
            target=_follow, args=(jd, roots, attempt, started, ended), daemon=True
        ).start()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    ended.set()
    pump.join(timeout=5)
    if rank == 0:
        _progress(jd, roots, attempt, started)
    report.update(exit_code=code, finished=time.time(), run_s=time.time() - started)
    # the notice in the same write as `finished`: rank 0, reading it, sees both or neither
    if notices.kind is not None:
        report.update(_notice(notices.kind, attempt, code, jd))
    reportfile.write(jd.rank_report(rank), report)
    world = int(report.get("world_size") or 1)
    if notices.kind is None and code == 0 and rank == 0 and world > 1:
        notices.kind = _peers_notice(jd, world, attempt, notices.names())
        if notices.kind is not None:
            report.update(_notice(notices.kind, attempt, code, jd))
    if notices.kind is not None:
        return _after_notice(plan, jd, rank, attempt, notices, code, report)
    if code != 0:
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        _failed(jd, rank, attempt, f"the command {how}", code, list(tail))
        phases.enter(Phase.FAILED, f"the command {how}")
        raise CommandFailed(code, f"rank {rank}: the command {how}")
    if rank == 0:
        resultsfile.write(jd.results, _results(plan, jd, report, roots))
    phases.enter(Phase.DONE)
    return {"rank": rank, "exit_code": 0}


def _begin(plan: LaunchPlan, jd: JobDir, rank: int, attempt: int) -> tuple[Phases, dict]:
    """The attempt begun, its report written, the command's files verified against what was submitted (a
    mismatch is refused). -> (the rank's phases, its report)"""
    jd.begin_attempt(rank, attempt)
    if rank == 0:
        jd.tidy_staging()
    phases = Phases(jd, rank, attempt)
    phases.enter(Phase.STARTING, "checking the command's files")
    report = _report(plan, jd, rank, attempt)
    reportfile.write(jd.rank_report(rank), report)
    bad = verify(plan)
    if bad:
        _failed(
            jd,
            rank,
            attempt,
            f"refusing to run: {bad}; re-submit to copy the files again",
            None,
            [],
        )
        raise RankError(
            f"refusing to run the command: {bad}", "re-submit (the folder is copied again)"
        )
    return phases, report


def _first_start(jd: JobDir, rank: int) -> float | None:
    """When this job's first attempt started this rank (its report, kept aside by begin_attempt)."""
    for a in jd.attempts():
        old = reportfile.read(jd.attempt_dir(a) / jd.rank_report(rank).name)
        if isinstance(old, Report) and old.started is not None:
            return float(old.started)
    return None


def _set_aside_interrupted(
    jd: JobDir, roots: list[Path], rank: int, attempt: int, report: dict
) -> None:
    """Before a requeued attempt starts the program: a Trainer checkpoint whose save an earlier attempt of this job
    did not finish (no trainer_state.json: the preemption came mid-save) is moved out of the program's sight, kept,
    so that the program's own resume (get_last_checkpoint(): the highest number) takes the last complete one instead
    of dying on the missing file. It goes beside the output folder, not into it (OUT.set-aside/checkpoint-N.attempt-K):
    run_qa.py refuses an output folder that holds something but no checkpoint, and the Trainer's rotation takes
    every checkpoint-* name in it for one of its own. Only folders written since the job first started are touched.
    Every rank looks before its program starts, and no program saves before every rank's has started (the process
    group forms first): the first rank to look moves it, the others find it gone."""
    since = _first_start(jd, rank)
    if since is None:
        return
    for path, why in trainerfiles.interrupted(roots, since - 1.0):
        aside = (
            path.parent.parent / f"{path.parent.name}.set-aside" / f"{path.name}.attempt-{attempt}"
        )
        try:
            own_folder(
                aside.parent
            )  # the program may have made OUT.set-aside a link: never moved through it
            os.replace(path, aside)
        except FileNotFoundError:
            continue  # another rank moved it first
        except OSError as e:
            line = f"checkpoint {_shown(path, roots)} is incomplete ({why}) and could not be moved aside: {e.strerror}"
        else:
            line = f"checkpoint {_shown(path, roots)} set aside ({why}): kept as {aside}"
        print(f"hpcqa: WARNING: {line}", file=sys.stderr, flush=True)
        report.setdefault("warnings", []).append(line)
    reportfile.write(jd.rank_report(rank), report)


def _shown(path: Path, roots: list[Path]) -> str:
    """`path` as the program names it: relative to its working folder (out/checkpoint-20) when under it."""
    try:
        return str(path.relative_to(roots[0]))
    except ValueError:
        return str(path)


def _report(plan: LaunchPlan, jd: JobDir, rank: int, attempt: int) -> dict:
    e = os.environ
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "rank": rank,
        "attempt": attempt,
        "local_rank": int(e.get("LOCAL_RANK", "0")),
        "node_rank": int(e.get("NODE_RANK", "0")),
        "world_size": int(e.get("WORLD_SIZE", "1")),
        "master_addr": e.get("MASTER_ADDR"),
        "master_port": e.get("MASTER_PORT"),
        "cpus": sorted(os.sched_getaffinity(0)),
        "bind_note": e.get("HPCQA_BIND_NOTE"),
        "omp_num_threads": e.get("OMP_NUM_THREADS"),
        "ld_preload": e.get("LD_PRELOAD", ""),
        "started": time.time(),
        "job_dir": str(jd.path),
        "plan_digest": plan.digest,
        "variant": dict(plan.variant),
        "variant_index": plan.variant_index,
        "command": list(plan.command),
        "work": dict(plan.work),
        "code": code_provenance(e),
    }


def _failed(
    jd: JobDir, rank: int, attempt: int, error: str, code: int | None, tail: list[str]
) -> None:
    failurefile.write(
        jd.rank_failed(rank),
        {
            "rank": rank,
            "host": socket.gethostname(),
            "error": error[: MAX_TEXT // 2],
            "exit_code": code,
            "stderr_tail": tail,
            "time": time.time(),
            "attempt": attempt,
        },
    )


def _after_notice(
    plan: LaunchPlan,
    jd: JobDir,
    rank: int,
    attempt: int,
    notices: _Notices,
    code: int,
    report: dict,
) -> dict:
    """The program has stopped on a notice (`report` records it): whatever it saved in HPCQA_CHECKPOINT_DIR is what
    the next attempt resumes from. The requeue signal: hpcqa requeues; SIGTERM: Slurm decides (or, with no Slurm,
    the job ends)."""
    name = signal.Signals(notices.kind).name if notices.kind else "a notice"
    reportfile.write(jd.rank_report(rank), report)
    Phases(jd, rank, attempt).enter(Phase.STOPPING, f"{name}: the command exited with {code}")
    term = notices.kind == signal.SIGTERM

    def say(line: str) -> None:
        print(f"[hpcqa rank {rank}] {line}", file=sys.stderr, flush=True)

    if plan.requeue is Requeue.POD:
        sys.exit(int(PodExit.STOPPED))
    if term:
        if os.environ.get("SLURM_JOB_ID"):  # Slurm requeues (PreemptMode=REQUEUE) or ends the job
            world = int(report.get("world_size") or 1)
            wait_for_slurms_end(
                say, saved=(lambda: all_ranks_stopped(jd, world, attempt)) if rank == 0 else None
            )
        raise RankError(
            f"rank {rank}: stopped on SIGTERM (the command exited with {code})",
            "a SIGTERM without Slurm's requeue ends the job; submit again to continue",
        )
    if plan.requeue.by_the_job_script:
        if rank == 0:
            write_json(jd.requeue_request(attempt), {"time": time.time(), "signal": name})
        return {"rank": rank, "requeue": "asked of the job script"}
    if callable(notices.previous):  # submitit: rank 0 checkpoints its pickle, requeues, exits
        requeue_through_submitit(notices.previous, lambda: notices.kind == signal.SIGTERM, say)
    if rank != 0:
        wait_for_slurms_end(say, 300)
    raise RankError(
        f"rank {rank}: stopped on {name}; nothing requeued it", "submit again to continue"
    )


def _notice(kind: int, attempt: int, code: int, jd: JobDir) -> dict:
    """A rank report's record of the notice its program stopped on."""
    name = signal.Signals(kind).name
    notice = {
        "signal": name,
        "attempt": attempt,
        "time": time.time(),
        "exit_code": code,
        "checkpoint": str(jd.checkpoints),
        "step": None,
    }
    return {"status": f"stopped on {name}", "notice": notice}


# how long rank 0 waits for the other ranks' reports once its own program has ended
PEER_WAIT_S = 30.0


def _peers_notice(
    jd: JobDir, world: int, attempt: int, names: frozenset[str], wait_s: float = PEER_WAIT_S
) -> int | None:
    """Rank 0's program ended with 0 and no notice reached rank 0: a program whose ranks agree to stop (every rank
    ends the same step, rank 0 saves, all exit 0) ends so too when the notice has reached another node only, as
    Slurm signals each node in its own time (seen: this node's notice 0.4 s after the program had ended). Taken
    for done, the job was neither requeued nor run again (its results said complete). The other ranks' reports of
    this attempt say: once each has finished (at most wait_s; they end with the same step), the first notice one
    of them recorded -- a name in `names`, of this attempt; anything else in the file is no notice. -> its signal,
    or None."""
    end = time.monotonic() + wait_s
    pending = set(range(1, world))
    while True:
        for k in sorted(pending):
            got = jd.read_report(k)
            if got is None or got.attempt != attempt or got.finished is None:
                continue
            pending.discard(k)
            notice = got.notice_in(attempt)
            if notice and notice.signal in names:
                return int(getattr(signal, notice.signal))
        if not pending or time.monotonic() > end:
            return None
        time.sleep(0.2)


FOLLOW_S = 5.0


def _progress(
    jd: JobDir, roots: list[Path], attempt: int, started: float, rate: StepRate | None = None
) -> None:
    """progress.json from the program's newest trainer_state.json; without one, the program's phase (no steps).
    `rate`: the steps seen so far (from the attempt's start), for the ETA."""
    got = trainerfiles.progress(roots)
    now = time.time()
    step, total = (got or {}).get("step"), (got or {}).get("total_steps")
    rate = rate or StepRate()
    if (
        not rate.samples
    ):  # the first look, as the program starts: a step seen now is where it resumes from
        rate.add(started, step if isinstance(step, int) else 0)
    if isinstance(step, int):
        rate.add(now, step)
    eta = rate.eta(now, total) if isinstance(total, int) else None
    progressfile.write(
        jd.progress,
        {
            "phase": Phase.TRAINING if got else Phase.COMMAND,
            "step": step,
            "total_steps": total,
            "epoch": (got or {}).get("epoch"),
            "loss": (got or {}).get("loss"),
            "eta_s": eta,
            "updated": now,
            "started": started,
            "attempt": attempt,
            "source": (got or {}).get("source"),
        },
    )


def _follow(
    jd: JobDir, roots: list[Path], attempt: int, started: float, ended: threading.Event
) -> None:
    """Rank 0, while the program runs: its progress every FOLLOW_S (a report: a failure here is not the job's)."""
    rate = StepRate()
    while not ended.is_set():
        try:
            _progress(jd, roots, attempt, started, rate)
        except OSError:
            pass
        ended.wait(FOLLOW_S)


def _results(plan: LaunchPlan, jd: JobDir, report: dict, roots: list[Path]) -> dict:
    """results.json of a command job: what ran, how long, and its metrics -- those the program wrote to
    HPCQA_RESULTS, else those an HF Trainer program saved (all_results.json ...)."""
    out: dict[str, Any] = {
        "command": list(plan.command),
        "exit_code": 0,
        "world_size": plan.world_size,
        "wall_time_s": report.get("run_s"),
        "work": dict(plan.work),
        "code": report.get("code"),
        "variant": dict(plan.variant),
        "task": "command",
        "requeues": report.get("attempt", 0),
        "notices": [n.to_json() for n in jd.notices(0)],
    }
    path = jd.command_results
    if path.exists():
        try:
            metrics = json.loads(fsutil.read_bytes(path, MAX_RESULTS_BYTES))
            if not isinstance(metrics, dict):
                raise ValueError("not a JSON object")
            if fsutil.deeper_than(metrics, fsutil.MAX_DEPTH):
                raise ValueError(f"nested deeper than {fsutil.MAX_DEPTH} levels")
            out["metrics"] = metrics
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in out:
                    out[k] = v
        except OSError as e:
            out["metrics_error"] = f"HPCQA_RESULTS ({path}): {e.strerror or e}"
        except (ValueError, RecursionError) as e:
            out["metrics_error"] = f"HPCQA_RESULTS ({path}): {e}"
    saved = trainerfiles.metrics(roots) if "metrics" not in out else None
    if saved:
        out["metrics"], out["metrics_from"] = saved["metrics"], saved["sources"]
        for k, v in saved["metrics"].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in out:
                out[k] = v
        for k in (
            "exact_match",
            "f1",
        ):  # run_qa.py's eval_exact_match / eval_f1: the list's result column
            if k not in out and isinstance(saved["metrics"].get(f"eval_{k}"), (int, float)):
                out[k] = saved["metrics"][f"eval_{k}"]
    return out
