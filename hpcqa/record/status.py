"""The per-job view (state + progress + results) that `hpcqa status` prints: registry rows, the live states each
row's executor reports (its job verbs, executors/table.py), and the job folders. Never imports torch.

Slurm's states come from ONE batched `sacct` call for all unfinished Slurm jobs (slurmcli.Slurm.query).
Without accounting they come from ONE `squeue` call plus the jobs' own files: a job squeue no
longer lists has ended, and its folder says how (jobdir.JobDir.state_from_files).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from hpcqa.core import states
from hpcqa.record import phases
from hpcqa.record.jobdir import JobDir
from hpcqa.executors import table
from hpcqa.executors.slurmcli import Slurm

@dataclass
class JobView:
    id: str
    name: str
    executor: str
    state: str
    nodes: int
    world_size: int
    elapsed: str = ""
    exit_code: str = ""
    folder: str = ""
    progress: dict | None = None
    results: dict | None = None
    sweep_id: str | None = None
    task_index: int | None = None
    variant: dict | None = None
    notes: list[str] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    reason: str = ""                  # why a PENDING job waits (squeue %r)
    nodelist: str = ""
    ranks: list[dict] = field(default_factory=list)   # detail view: each rank's report (host, CPUs, usage)
    attempts: list[int] = field(default_factory=list)  # detail view: earlier attempts whose files were kept
    notices: list[dict] = field(default_factory=list)  # detail view: stops on SIGTERM / the requeue signal
    failed: list[dict] = field(default_factory=list)   # detail view: failing ranks, causes first
    logs: list[Path] = field(default_factory=list)     # detail view: the ranks' logs (stderr)
    usage: dict | None = None         # detail view: CPU efficiency and peak memory (sacct, or the ranks' own)
    phases: list[dict] = field(default_factory=list)  # unfinished jobs: where each rank is (rank/phase.py)

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in ("id", "name", "state", "executor", "nodes", "world_size", "elapsed",
                                              "exit_code", "folder", "progress", "results", "sweep_id",
                                              "task_index", "variant", "reason", "nodelist", "usage", "phases", "notes")}
        out["outputs"] = dict(self.outputs)
        out["attempts"] = attempt_text(self)
        return out


def collect(reg, slurm: Slurm, ids: Sequence[str] = (), all_jobs: bool = False,
            limit: int = 20) -> tuple[list[JobView], states.Answer]:
    """Rows from the registry, with live states for the unfinished ones (one call per executor: one sacct for
    every Slurm job). -> (views, where Slurm's states came from: sacct, squeue, none, or the error)"""
    rows = reg.jobs(ids=ids, limit=None if (ids or all_jobs) else limit)
    live, source = {}, states.NOBODY
    for name, group in table.by_executor([r for r in rows if not r.final]).items():
        got, said = table.verbs(name, slurm).states(group)
        live.update(got)
        source = said if said.source is not states.Source.NOBODY else source
    views, updates, seen = [], [], set()
    for r in rows:  # newest first: a reused id's live state is its newest job's; the older keep their record
        jd = JobDir(Path(r.folder))
        state, code, elapsed = r.state, r.exit_code or "", r.elapsed or ""
        now = live.get(r.id) if r.id not in seen else None
        seen.add(r.id)
        if now is not None:
            state, code, elapsed = now.state, now.exit_code or code, now.elapsed or elapsed
            final = states.is_final(state)
            if final or state != r.state:
                updates.append((r.id, state, final, code or None, elapsed or None, r.folder))
        v = JobView(id=r.id, name=r.name, executor=r.executor, state=state, nodes=r.nodes, world_size=r.world_size,
                    elapsed=elapsed, exit_code=code, folder=r.folder, sweep_id=r.sweep_id, task_index=r.task_index,
                    variant=r.variant, reason=now.reason if now else "", nodelist=now.nodelist if now else "")
        v.progress = jd.read_progress()
        v.results = jd.read_results()
        if not states.is_final(state):  # the list reads a few ranks' phases; a job's own view reads them all
            v.phases = jd.read_phases(r.world_size if ids else min(r.world_size, LIST_PHASES))
            stuck = phases.stuck_at_rendezvous(v.phases) if state == "RUNNING" else None
            if stuck:
                v.notes.append(stuck)
        if ids:
            v.outputs = [(label, str(p)) for label, p in jd.outputs(v.results)]
            v.ranks = [rep for k in range(r.world_size) if (rep := jd.read_report(k))]
            v.attempts, v.notices, v.failed = jd.attempts(), jd.notices(), jd.failed_ranks()
            v.logs = [p for k in range(r.world_size) if (p := jd.log(k)) is not None]
            v.notes += list(dict.fromkeys(w for rep in v.ranks for w in (rep.get("warnings") or [])
                                          if isinstance(w, str) and w.startswith("checkpoint ")))
        if not jd.path.is_dir():  # said by status and logs alike; the state is what Slurm or the registry knows
            v.notes.append(f"its folder {r.folder} is gone (deleted or moved): logs and results with it")
        elif states.succeeded(state) and not v.results:
            v.notes.append("no results file")
        views.append(v)
    if updates:
        reg.update_states(updates)
    if ids:
        add_usage(views, slurm)
    return views, source


LIST_PHASES = 16  # rank files the list view reads per unfinished job (status JOB reads every rank's)
LOW_EFFICIENCY = 0.6  # below this, the ranks' cores mostly waited: pinning, oversubscription, or I/O


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
            v.notes.append(f"CPU efficiency {eff:.0%} (< {LOW_EFFICIENCY:.0%}): the ranks' cores mostly waited; check "
                           "the pinning (`hpcqa topology CONFIG`), oversubscription, or data loading")


def attempt_text(v: JobView) -> str:
    """"requeued N times, resumed from step S" when the job was restarted."""
    r, p = v.results or {}, v.progress or {}
    n = r.get("requeues", p.get("attempt", 0)) or 0
    if not n:
        return ""
    step = r.get("resumed_from_step")
    why = ", ".join(f"{x['signal']} at step {x['step']}" for x in r.get("notices") or [])
    return f"requeued {n}x" + (f" ({why})" if why else "") + (f", resumed from step {step}" if step else "")


def progress_text(v: JobView, now: float | None = None) -> str:
    again = attempt_text(v)
    again = f" ({again})" if again else ""
    if v.results and "f1" in v.results:
        return f"EM {v.results['exact_match']:.1f} F1 {v.results['f1']:.1f}{again}"
    link = (v.results or {}).get("link") or {}
    if link.get("bandwidth_Bps"):
        return f"link {8 * link['bandwidth_Bps'] / 1e6:.0f} Mbit/s, {1e6 * link['latency_s']:.0f} us"
    p = v.progress
    if states.is_final(v.state):
        return ""
    if not p or p.get("attempt", 0) != _attempt_now(v):  # no step yet (in this attempt): where the ranks are
        read = v.world_size if len(v.phases) > LIST_PHASES else min(v.world_size, LIST_PHASES)
        return phases.summary(v.phases, read) + again if v.phases else ""
    text = f"{p.get('step', 0)}/{p.get('total_steps') or '?'}"
    if isinstance(p.get("loss"), (int, float)):
        text += f" loss {p['loss']:.3f}"
    if p.get("eta_s") and v.state == "RUNNING":
        text += f" ETA {_dur(p['eta_s'])}"
    return text + again


def _attempt_now(v: JobView) -> int:
    """The attempt the ranks are in now, as their phase files say (the progress file may be an earlier attempt's)."""
    got = [r.get("attempt") for r in v.phases if isinstance(r.get("attempt"), int)]
    return max(got) if got else (v.progress or {}).get("attempt", 0)


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
