"""What an executor is: `dry_run(sweep plan) -> Request`, `submit(request) -> Submitted`, and the job verbs.

In the spirit of torchx's Scheduler (`schedule(submit_dryrun(app))`): the dry run computes the request -- the
exact files that will be written and the script(s) and commands that will be run -- and `submit` is handed
that same value and does what it says, deciding nothing new. `hpcqa submit --dry-run` prints the Request;
`hpcqa submit` is `submit(dry_run(sp))`. Which executor runs a plan is one table (executors/table.py).

Job verbs (state, usage, cancel) belong to where a job runs -- the registry row's executor -- not to how it
was submitted: a rendered mpirun script and a submitit array are both Slurm jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from hpcqa.core.config import Config
from hpcqa.core.kinds import ExecutorKind, Requeue
from hpcqa.core.plan import HostProbe
from hpcqa.core.states import Answer
from hpcqa.core.sweep import SweepPlan
from hpcqa.errors import UsageError
from hpcqa.executors.snapshot import Snapshot
from hpcqa.record.jobfiles.progress import Progress as ProgressFile
from hpcqa.record.registry import JobRow
from hpcqa.record.status import JobView
from hpcqa.record.worktree import WorkTree

Say = Callable[
    [str], None
]  # where an executor reports what it is doing (the CLI: stderr; the API: nowhere)
Progress = Callable[
    [ProgressFile], None
]  # rank 0's progress (progress.json) each time it is read while a job is followed


def silent(_: str) -> None:
    pass


@dataclass(frozen=True)
class File:
    """A file `submit` writes before anything runs (plans, scripts), and its mode (None: what submit's owner umask
    gives: never group- or other-writable)."""

    path: str
    text: str
    mode: int | None = None


@dataclass(frozen=True)
class Request:
    """Everything `submit` will do, computed by `dry_run`. Printed as it is by `submit --dry-run`."""

    executor: str  # the executor kind's name (core/kinds.py): local, slurm, k8s
    via: str  # how the executor that made it submits ("submitit", ...)
    sweep: SweepPlan
    submission: str  # the token that names this submission's job folders
    files: tuple[
        File, ...
    ] = ()  # written first (plan files are content-addressed: kept if present)
    scripts: tuple[
        str, ...
    ] = ()  # batch script per array (Slurm), the script (mpirun, hosts), YAML (k8s)
    commands: tuple[tuple[str, ...], ...] = ()  # what is run to submit, in order
    facts: tuple[
        tuple[str, str], ...
    ] = ()  # what the dry run shows besides the plan (time limit, hosts ...)
    notes: tuple[
        str, ...
    ] = ()  # warnings observed while making the request (this node's cores ...)
    summary: str = ""  # one line: what this request runs
    placement: tuple[
        str, ...
    ] = ()  # per variant: where it runs ("array 0: --array=0-3%2", "local ...")
    code: Snapshot | None = (
        None  # the snapshot of hpcqa the ranks import, or None (the installed one)
    )
    work: WorkTree | None = (
        None  # job.command's folder, copied for the ranks (None: no command/copy)
    )

    def to_json(self) -> dict[str, Any]:
        default = (
            0o640 if self.sweep.plans[0].config.job.group_readable else 0o600
        )  # submit's owner umask
        return {
            "executor": self.executor,
            "via": self.via,
            "submission": self.submission,
            "files": [
                {"path": f.path, "mode": oct(f.mode or default), "bytes": len(f.text)}
                for f in self.files
            ],
            "scripts": list(self.scripts),
            "commands": [list(c) for c in self.commands],
            "facts": dict(self.facts),
            "notes": list(self.notes),
            "code": {"path": str(self.code.path), **self.code.provenance} if self.code else None,
            "work": {
                "source": self.work.source,
                "digest": self.work.digest,
                "files": len(self.work.files),
                "bytes": self.work.size,
                "skipped": list(self.work.skipped),
                **self.work.provenance,
            }
            if self.work
            else None,
        }


@dataclass(frozen=True)
class Submitted:
    """What `submit` did: the job ids (one per variant), the sweep id (None: a single job), and what the
    executor needs to follow them (handles, job folders)."""

    request: Request
    ids: tuple[str, ...]
    sweep_id: str | None = None
    folders: tuple[str, ...] = ()
    exit_code: int = 0  # a local sweep has run to its end when submit returns
    handles: tuple[
        object, ...
    ] = ()  # what the executor follows its jobs by (local: submitit's jobs)


@dataclass(frozen=True)
class Outcome:
    """How a followed job ended -- or that following it stopped (Ctrl-C): a local job is then cancelled, a Slurm job
    keeps running. Executors return it; the CLI reports it."""

    job_id: str
    state: str  # a name of the states table (final unless interrupted)
    folder: str
    interrupted: bool = False
    keeps_running: bool = False
    # said before the outcome: a tracking store that did not take the failed run's end
    warnings: tuple[str, ...] = ()


class Executor(Protocol):
    """One way of running a plan. Who it is, it says itself: the executor kind it serves (its name, when it applies, its
    launchers and run-time environment: core/kinds.py), who requeues its stopped ranks (stamped on the plans
    it hands them), how it submits, and what it makes of a config it renders."""

    kind: type[ExecutorKind]  # where its plans run: the name of the plan, the registry and `status`
    requeue: Requeue  # who brings a rank back after a checkpoint on a signal (the plan's field)
    via: str  # how it submits, for people: "submitit", "a rendered script under sbatch" ...
    runs_here: bool  # the ranks run on this machine (its cores and registry decide where)
    scheduler: (
        str | None
    )  # the scheduler that takes the submission and can judge it beforehand (`check`):
    # "Slurm"; None where nothing is asked (this machine, a script handed to the user)

    def max_array_size(self) -> tuple[int, str]:
        """How many tasks one array may hold where it runs, and how that is known."""
        ...

    def dry_run(self, sp: SweepPlan) -> Request: ...

    def submit(self, request: Request, say: Say = silent) -> Submitted: ...

    def wait(self, submitted: Submitted, progress: Progress | None = None) -> Outcome:
        """Follow a single job to its end, passing rank 0's progress on as it changes; prints nothing."""
        ...

    def check(self, request: Request) -> tuple[bool, str]:
        """Would the scheduler accept the request? (sbatch --test-only) -> (accepted, its answer)."""
        ...


@dataclass(frozen=True)
class Live:
    """A job's state as the scheduler (or the job's controller and files) says it now."""

    state: str
    exit_code: str = ""
    elapsed: str = ""
    reason: str = ""  # why a PENDING job waits
    nodelist: str = ""


class JobVerbs(Protocol):
    """What can be asked of a submitted job, by the registry row's executor."""

    def states(self, rows: Sequence[JobRow]) -> tuple[dict[str, Live], Answer]:
        """Live states of unfinished rows (one scheduler call for all). -> (by id, where they came from)"""
        ...

    def usage(self, views: Sequence[JobView]) -> dict[str, dict]:
        """CPU efficiency and peak memory of finished jobs, by id."""
        ...

    def cancel(self, rows: Sequence[JobRow], whole_sweeps: bool) -> list[str]:
        """Stop these jobs; -> one message per job."""
        ...


@runtime_checkable
class Renders(Protocol):
    """An executor that renders (`hpcqa render`): the config and host as it renders them."""

    def prepare_render(self, cfg: Config, host: HostProbe) -> tuple[Config, HostProbe]:
        """A script's interpreter, a pod's image: what rendering for this executor changes of the config and host."""
        ...


class RenderOnly:
    """An executor whose request is handed to the user (a script for plain hosts, Kubernetes manifests): it
    renders, and refuses to submit, naming what does."""

    runs_here = False
    scheduler = None
    no_scheduler = "nothing to ask: no scheduler"

    def max_array_size(self) -> tuple[int, str]:
        return 1, "no arrays: one rendered job"

    refusal: tuple[str, str] = ("hpcqa only renders this", "run what it rendered")

    def check(self, request: Request) -> tuple[bool, str]:
        return True, self.no_scheduler

    def submit(self, request: Request, say: Say = silent) -> Submitted:
        raise UsageError(*self.refusal)

    def wait(self, submitted: Submitted, progress: Progress | None = None) -> Outcome:
        raise UsageError(*self.refusal)
