"""The Python API: what `hpcqa submit/status/cancel/logs` do, as values and handles (for notebooks and scripts).

    import hpcqa
    cfg = hpcqa.load_config("configs/quickstart.toml", ["train.max_steps=20"])
    print(hpcqa.plan(cfg).world_size)
    job = hpcqa.submit(cfg)             # returns once queued (Slurm) or started (local)
    job.wait()                          # -> final state: COMPLETED, FAILED, CANCELLED, ...
    job.results()                       # results.json as a dict; JobFailed names the first failing rank
    job.model_path()                    # the trained model's folder (from_pretrained loads it), or None
    job.logs(rank=0)                    # that rank's log text
    job.cancel()

A config with a [sweep] table gives a `Sweep` over its tasks' `Job`s. The CLI builds its submissions and its
pre-queue checks with these same functions. Nothing here imports torch: the ranks do.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Sequence

from hpcqa import fsutil, preflight, text
from hpcqa.core import config as configmod
from hpcqa.core import plan as planmod
from hpcqa.core import states, sweep
from hpcqa.core.config import Config
from hpcqa.errors import ConfigError, HpcqaError, JobFailed, UsageError
from hpcqa.executors import cancel as canceller
from hpcqa.executors import hostprobe, jobs, searching, table, tracking
from hpcqa.executors.interface import Executor, Request, Say, Submitted, silent
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import logtail, manifest, registry, scalingruns
from hpcqa.record.jobdir import JobDir


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read and validate a TOML config; overrides are `--set` texts: "train.learning_rate=5e-5". A file with a
    [sweep] is not one config: submit(path) runs every variant, submission(path) plans them."""
    raw = configmod.load_raw(path, list(overrides))
    if sweep.has_sweep(raw):
        raise UsageError(
            f"{text.shown(path)} has a [sweep]: it is several configs, not one",
            f"hpcqa.submit({str(path)!r}) submits every variant; hpcqa.api.submission(path) plans them",
        )
    return configmod.validate(raw, path, list(overrides))


def plan(cfg: Config) -> planmod.LaunchPlan:
    """The frozen launch plan `submit` would run (what `hpcqa submit --dry-run` prints)."""
    return planmod.build_plan(cfg, hostprobe.probe_host())


def submission(path: str | Path, overrides: Sequence[str] = ()) -> sweep.SweepPlan:
    """Config file (and its [sweep], if any) -> the SweepPlan submit runs (a job is a sweep of one)."""
    raw = configmod.load_raw(path, list(overrides))
    host = hostprobe.probe_host()
    if sweep.has_sweep(raw):
        spec = sweep.searched(raw, str(path))
        if spec is not None:  # a search: its next batch of trials, asked of its study
            return searching.plan_batch(raw, str(path), spec)
        return sweep.build(raw, str(path), host, table.max_array_size)
    cfg = configmod.validate(raw, path, list(overrides))
    return sweep.single(planmod.build_plan(cfg, host))


def dry_run(sp: sweep.SweepPlan, snapshot: bool = True) -> tuple[Executor, Request]:
    """The executor that runs this sweep plan, and the request it would submit (nothing is written). snapshot: the
    ranks import a copy of hpcqa made at submit (False: the live tree)."""
    tracking.check(
        sp.plans
    )  # said by the dry run too: a run sent nowhere is found out now, not at the end
    ex = table.for_sweep(sp, snapshot=snapshot)
    return ex, ex.dry_run(sp)


def before_queueing(plans: Sequence[Any], warn=None, space: Sequence[Config] = ()) -> None:
    """What every rank would otherwise find after the queue wait: staged items gone (stage.require), bad data
    or output (preflight), a damaged registry. Raises before anything is queued or started. space: a search's
    configs with each searched value alone (sweep.edge_configs): later batches' trials are checked now too."""
    if warn:  # what the dry run warned of, said again when it is for real
        for note in dict.fromkeys(w for p in plans for w in p.warnings):
            warn(note)
    seen = set()
    for p in plans:
        key = (p.config.job, p.config.data, p.config.model, p.config.train)
        if key not in seen:
            seen.add(key)
            if p.command:  # the program loads its own model and data: only the job folders are hpcqa's to check
                preflight.output_writable(p.config)
                continue
            manifest.require(p.config)
            for note in preflight.check(p.config):
                if warn:
                    warn(note)
    checked = {(p.config.data, p.config.model) for p in plans}
    for cfg in (
        space
    ):  # a model or data only a later batch's trials name; their train values are validated
        if (cfg.data, cfg.model) not in checked:
            checked.add((cfg.data, cfg.model))
            manifest.require(cfg)
            preflight.check(cfg)
    for note in scaling_notes(plans):
        if warn:
            warn(note)
    registry.Registry(plans[0].config.job.registry or None, create=False)
    tracking.check(plans)
    # every variant's: a sweep may pass more in some of them
    passed = dict.fromkeys(n for p in plans for n in p.config.launch.pass_env)
    missing = [n for n in passed if n not in os.environ]
    if missing:
        raise ConfigError(
            "launch.pass_env",
            f"{', '.join(missing)} not set in this environment: nothing to pass to the ranks",
            f"export {missing[0]}=... before submitting (the value is passed, never "
            "written), or drop it from launch.pass_env",
            plans[0].config.source,
        )


def would_refuse(sp: sweep.SweepPlan) -> HpcqaError | None:
    """What `submit` would refuse this request for on this machine (before_queueing's checks, which read only), or
    None: the dry run says it instead of showing a plan that would never be queued."""
    try:
        before_queueing(sp.plans, space=_space(sp))
    except HpcqaError as e:
        return e
    return None


def _space(sp: sweep.SweepPlan) -> list[Config]:
    """A search's configs with each searched value alone (checked before its first batch is queued); [] else."""
    if sp.search is None:
        return []
    return sweep.edge_configs(json.loads(sp.search_config), sp.search, sp.source)


def scaling_notes(plans: Sequence[Any]) -> list[str]:
    """Multi-node plans that the scaling model predicts to train slower than one node (a stored link and a
    finished run of the same shape are needed; silent without them)."""
    out, seen = [], set()
    for p in plans:
        if (
            p.nodes < 2 or p.command or (p.nodes, p.config.job.registry) in seen
        ):  # the model knows its own trainer
            continue
        seen.add((p.nodes, p.config.job.registry))
        out += scalingruns.warnings_for(
            p, registry.Registry(p.config.job.registry or None, create=False)
        )
    return out


def submit_request(ex: Executor, request: Request, say: Say = silent, warn=None) -> Submitted:
    """The checks before queueing, then `ex.submit(request)`: the very request the dry run showed."""
    before_queueing(request.sweep.plans, warn, _space(request.sweep))
    job = request.sweep.plans[0].config.job
    with fsutil.owner_umask(job.group_readable):
        # before anything is queued: a registry that cannot be created or written would otherwise be found out
        # after sbatch, with the job queued and unrecorded
        registry.check_writable(job.registry or None, job.group_readable)
        plans = request.sweep.plans
        with tracking.sweep_parent(plans, request.sweep.is_sweep, ex.runs_here) as parent:
            if parent:
                say(
                    f"  MLflow: the sweep's parent run {parent}; each variant's run is nested under it"
                )
            return ex.submit(request, say)


def submit(config: Config | str | Path, overrides: Sequence[str] = ()) -> "Job | Sweep":
    """Queue (Slurm) or start (local executor) a job; returns without waiting. A local sweep runs its variants
    one after another and returns when the last has ended."""
    sp = sweep.single(plan(config)) if isinstance(config, Config) else submission(config, overrides)
    done = submit_request(*dry_run(sp))
    reg = sp.plans[0].config.job.registry or None
    jobs = [Job(i, reg) for i in done.ids]
    return Sweep(done.sweep_id, jobs) if done.sweep_id else jobs[0]


class Job:
    """A submitted job, by id, as the registry and the scheduler know it."""

    def __init__(self, job_id: str, registry: str | None = None) -> None:
        self.id = str(job_id)
        self.registry = registry

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    def view(self):
        """The status view (state, progress, results, pending reason, usage once finished)."""
        views, _ = jobs.collect(registry.Registry(self.registry, create=False), Slurm(), [self.id])
        if not views:
            raise registry.not_found([self.id], registry.resolve_path(self.registry))
        return views[0]

    @property
    def folder(self) -> Path:
        return Path(self.view().folder)

    def state(self) -> str:
        return self.view().state

    def done(self) -> bool:
        return states.is_final(self.state())

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> str:
        """Block until the job is final; -> its state. TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.time() + timeout
        while True:
            state = self.state()
            if states.is_final(state):
                return state
            if deadline is not None and time.time() > deadline:
                raise TimeoutError(f"job {self.id} still {state} after {timeout} s")
            time.sleep(poll_s)

    def results(self, wait: bool = True) -> dict | None:
        """results.json of a completed job (waits for it by default); JobFailed when it did not complete."""
        state = self.wait() if wait else self.state()
        v = self.view()
        if not states.succeeded(state) or not v.results:
            if not wait and not states.is_final(state):
                return None
            name = JobDir(Path(v.folder)).results.name
            damaged = [d for d in v.damaged if d.startswith(f"{name}:")]
            if states.succeeded(state) and damaged:
                raise JobFailed(
                    f"job {self.id} ended {state}, but its {text.shown(damaged[0])}",
                    f"hpcqa status {self.id} shows the rest; look at the file by hand",
                )
            failed = JobDir(Path(v.folder)).failed_ranks()
            first = f": rank {failed[0].rank}: {failed[0].error}" if failed else ""
            raise JobFailed(
                text.shown(f"job {self.id} ended {state}{first}")[:2000], f"hpcqa logs {self.id}"
            )
        return v.results.to_json()

    def model_path(self) -> Path | None:
        """The trained model's folder (train.save_model) once the job has written it whole, else None: what
        `AutoModelForQuestionAnswering.from_pretrained` and `AutoTokenizer.from_pretrained` load."""
        return JobDir(self.folder).saved_model()

    def cancel(self) -> list[str]:
        reg = registry.Registry(self.registry, create=False)
        return canceller.cancel(canceller.chosen(reg, [self.id], None), False, Slurm())

    def logs(
        self, rank: int = 0, stream: str = "err", lines: int = 0, all_attempts: bool = True
    ) -> str:
        """A rank's log ("err": stderr, where hpcqa and the Trainer write; "out": stdout), read as `hpcqa logs`
        reads it: its last `lines` lines (0: all), every attempt or the current one, at most 64 MiB from its end.
        UsageError when the file there is not the regular file a job writes (a FIFO, a link)."""
        if (
            isinstance(rank, bool)
            or not isinstance(rank, int)
            or rank < 0
            or stream not in ("err", "out")
        ):
            raise UsageError(
                f"logs(rank={rank!r}, stream={stream!r}): a rank is a whole number >= 0, a stream err or out",
                "job.logs(0) or job.logs(1, stream='out')",
            )
        path = JobDir(self.folder).log(rank, stream)
        if path is None:
            return ""
        try:
            return logtail.text(path, lines, all_attempts)
        except OSError as e:
            raise UsageError(
                f"rank {rank}'s log {path} cannot be read: {e.strerror}",
                "hpcqa reads only the regular files a job writes; look at the folder by hand",
            ) from None


class Sweep:
    """A sweep's tasks (one Job per variant)."""

    def __init__(self, sweep_id: str, jobs: list[Job]) -> None:
        self.id, self.jobs = sweep_id, jobs

    def __repr__(self) -> str:
        return f"Sweep({self.id!r}, {len(self.jobs)} tasks)"

    def states(self) -> dict[str, str]:
        return {j.id: j.state() for j in self.jobs}

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> dict[str, str]:
        deadline = None if timeout is None else time.time() + timeout
        for j in self.jobs:
            left = None if deadline is None else max(deadline - time.time(), 0)
            j.wait(left, poll_s)
        return self.states()

    def results(self) -> list[dict | None]:
        """Each task's results (None for a task that did not complete)."""
        out = []
        for j in self.jobs:
            try:
                out.append(j.results())
            except JobFailed:
                out.append(None)
        return out

    def cancel(self) -> list[str]:
        return [m for j in self.jobs for m in j.cancel()]
