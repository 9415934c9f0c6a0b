"""The job list across executors: the registry's rows, the live states each row's executor reports (its job verbs,
executors/table.py: one scheduler call per executor, one sacct for every Slurm job), and the job folders, as the
views `hpcqa status`, `logs`, `results` and the API's Job read. Never imports torch.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Sequence

from hpcqa.core import eta, states
from hpcqa.core.states import State
from hpcqa.executors import table
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import phases
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles import results
from hpcqa.record.jobfiles.fields import Damaged
from hpcqa.record.jobfiles.report import Report
from hpcqa.record.jobfiles.results import Results
from hpcqa.record.status import LIST_PHASES, JobView


def collect(
    reg, slurm: Slurm, ids: Sequence[str] = (), all_jobs: bool = False, limit: int = 20
) -> tuple[list[JobView], states.Answer]:
    """Rows from the registry, with live states for the unfinished ones (one call per executor: one sacct for
    every Slurm job). -> (views, where Slurm's states came from: sacct, squeue, none, or the error)"""
    rows = reg.jobs(ids=ids, limit=None if (ids or all_jobs) else limit)
    live, source = {}, states.NOBODY
    for name, group in table.by_executor([r for r in rows if not r.final]).items():
        got, said = table.verbs(name, slurm).states(group)
        live.update(got)
        source = said if said.source is not states.Source.NOBODY else source
    views, updates, seen = [], [], set()
    for r in (
        rows
    ):  # newest first: a reused id's live state is its newest job's; the older keep their record
        jd = JobDir(Path(r.folder))
        state, code, elapsed = r.state, r.exit_code or "", r.elapsed or ""
        now = live.get(r.id) if r.id not in seen else None
        seen.add(r.id)
        if now is not None:
            state, code, elapsed = now.state, now.exit_code or code, now.elapsed or elapsed
            final = states.is_final(state)
            if final or state != r.state:
                updates.append((r.id, state, final, code or None, elapsed or None, r.folder))
        v = JobView(
            id=r.id,
            name=r.name,
            executor=r.executor,
            state=state,
            nodes=r.nodes,
            world_size=r.world_size,
            elapsed=elapsed,
            exit_code=code,
            folder=r.folder,
            sweep_id=r.sweep_id,
            task_index=r.task_index,
            variant=r.variant,
            reason=now.reason if now else "",
            nodelist=now.nodelist if now else "",
        )
        _read_folder(v, jd, bool(ids))
        if (
            not jd.path.is_dir()
        ):  # said by status and logs alike; the state is what Slurm or the registry knows
            v.notes.append(
                f"its folder {r.folder} is gone (deleted or moved): logs and results with it"
            )
        elif states.succeeded(state) and not v.results:
            v.notes.append("no results file")
        views.append(v)
    if updates:
        reg.update_states(updates)
    if ids:
        add_usage(views, slurm)
    return views, source


def _elapsed_from_files(v: JobView) -> None:
    """A job no scheduler times (a local one): its ranks' wall time once it has results, else the time since its
    ranks started, as sacct would say it."""
    if v.elapsed:
        return
    if v.results is not None and v.results.wall_time_s:
        v.elapsed = eta.sacct_clock(v.results.wall_time_s)
    elif v.state == State.RUNNING and v.progress is not None and v.progress.started:
        v.elapsed = eta.sacct_clock(time.time() - v.progress.started)


def _read_folder(v: JobView, jd: JobDir, detail: bool) -> None:
    """What a job's folder says into its view: progress, results, and the phases of a job not over (a few ranks'
    in a list); for the job's own view (`detail`) also its ranks, attempts, notices, logs and damaged files."""
    v.progress = jd.read_progress()
    got = results.read(jd.results)
    v.results = got if isinstance(got, Results) else None
    trial = v.results.trial if v.results else None
    if trial is not None and trial.state == State.PRUNED and states.succeeded(v.state):
        v.state = State.PRUNED  # the job ran to its end: its search's pruner stopped its training
    _elapsed_from_files(v)
    if (
        isinstance(got, Damaged) and not detail
    ):  # the detail view lists it with the other damaged files
        v.notes.append(f"{got}: not used (hpcqa status {v.id})")
    if not states.is_final(v.state):
        v.phases = jd.read_phases(v.world_size if detail else min(v.world_size, LIST_PHASES))
        stuck = phases.stuck_at_rendezvous(v.phases) if v.state == State.RUNNING else None
        if stuck:
            v.notes.append(stuck)
    if detail:
        v.outputs = [(label, str(p)) for label, p in jd.outputs(v.results)]
        v.ranks = [rep for k in range(v.world_size) if (rep := jd.read_report(k))]
        v.attempts, v.notices, v.failed = jd.attempts(), jd.notices(), jd.failed_ranks()
        v.logs = [p for k in range(v.world_size) if (p := jd.log(k)) is not None]
        v.damaged = jd.damaged(v.world_size)
        run = jd.read_tracking()  # train.report_to with "mlflow": where the run went
        if run is not None:
            nested = f", nested under {run.parent_run_id}" if run.parent_run_id else ""
            v.outputs.append(("MLflow run", f"{run.run_id} at {run.uri}{nested}"))
        v.notes += list(
            dict.fromkeys(w for rep in v.ranks for w in rep.warnings if w.startswith("checkpoint "))
        )


LOW_EFFICIENCY = (
    0.6  # below this, the ranks' cores mostly waited: pinning, oversubscription, or I/O
)


def add_usage(views: Sequence[JobView], slurm: Slurm) -> None:
    """Finished jobs: CPU efficiency and peak memory, from their executor (Slurm: one batched sacct call, seff's
    numbers: TotalCPU / (Elapsed x AllocCPUS), the largest step MaxRSS; local jobs: their ranks' measurements)."""
    done = [v for v in views if states.is_final(v.state)]
    for name, group in table.by_executor(done).items():
        for job_id, usage in table.verbs(name, slurm).usage(group).items():
            next(v for v in group if v.id == job_id).usage = usage
    for v in done:
        eff = (v.usage or {}).get("cpu_efficiency")
        if eff is not None and eff < LOW_EFFICIENCY:
            v.notes.append(low_efficiency_note(eff, run_queue_share(v.ranks)))


BUSY_NODE = (
    0.2  # a rank ready to run but off its cores this share of its core time: others had them
)


def run_queue_share(ranks: Sequence[Report]) -> float | None:
    """The largest share of a rank's core time (wall x CPUs) that it spent ready to run but waiting for a CPU, from
    the ranks' own reports (schedstat); None when no report says."""
    shares = [
        u.run_delay_s / (u.wall_s * u.cpus)
        for rep in ranks
        if (u := rep.usage) and u.run_delay_s is not None and u.wall_s * u.cpus > 0
    ]
    shares = [x for x in shares if math.isfinite(x)]
    return max(shares) if shares else None


def low_efficiency_note(eff: float, waited: float | None) -> str:
    """Why a job's cores sat idle, as far as the ranks measured: busy cores (ready to run, no CPU) are the node's
    load, not hpcqa's pinning; otherwise the ranks themselves waited (communication, data, a slow peer)."""
    head = f"CPU efficiency {eff:.0%} (< {LOW_EFFICIENCY:.0%})"
    if waited is not None and waited >= BUSY_NODE:
        return (
            f"{head}: the ranks were ready to run but waited for their cores {min(waited, 1):.0%} of the time: "
            "other processes had them (a busy node); `hpcqa topology CONFIG` shows whose cores they are"
        )
    return (
        f"{head}: the ranks' cores mostly waited; check the pinning (`hpcqa topology CONFIG`), "
        "oversubscription, or data loading"
    )
