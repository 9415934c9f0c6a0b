"""Job states: Slurm's state table, and the per-job view (state + progress + results) that
`hpcqa status` prints. Never imports torch.

States come from ONE batched `sacct` call for all unfinished Slurm jobs (slurmcli.Slurm.query).
Without accounting they come from ONE `squeue` call plus the jobs' own files: a job squeue no
longer lists has ended, and its folder says how (jobdir.JobDir.state_from_files).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from hpcqa.core import states
from hpcqa.record.jobdir import JobDir
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
    usage: dict | None = None         # detail view: CPU efficiency and peak memory (sacct, or the ranks' own)

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in ("id", "name", "state", "executor", "nodes", "world_size", "elapsed",
                                              "exit_code", "folder", "progress", "results", "sweep_id",
                                              "task_index", "variant", "reason", "nodelist", "usage")}
        out["outputs"] = dict(self.outputs)
        out["attempts"] = attempt_text(self)
        return out


def collect(reg, slurm: Slurm, ids: Sequence[str] = (), all_jobs: bool = False,
            limit: int = 20) -> tuple[list[JobView], str]:
    """Rows from the registry, with live states for the unfinished ones (one scheduler call)."""
    from hpcqa.executors.local import local_state

    rows = reg.jobs(ids=ids, limit=None if (ids or all_jobs) else limit)
    pending = [r.id for r in rows if r.executor == "slurm" and not r.final]
    recs, source = slurm.query(pending) if pending else ({}, "none")
    views, updates = [], []
    for r in rows:
        jd = JobDir(Path(r.folder))
        state, code, elapsed = r.state, r.exit_code or "", r.elapsed or ""
        if not r.final:
            if r.executor == "local":
                state = local_state(r.id, jd)
            else:
                state, code, elapsed = _slurm_state(r.id, jd, recs, source, (state, code, elapsed))
            final = states.is_final(state)
            if final or state != r.state:
                updates.append((r.id, state, final, code or None, elapsed or None))
        v = JobView(id=r.id, name=r.name, executor=r.executor, state=state, nodes=r.nodes, world_size=r.world_size,
                    elapsed=elapsed, exit_code=code, folder=r.folder, sweep_id=r.sweep_id, task_index=r.task_index,
                    variant=r.variant)
        v.progress = jd.read_progress()
        v.results = jd.read_results()
        rec = recs.get(r.id)
        if rec is not None:
            v.reason = rec.reason if state == "PENDING" else ""
            v.nodelist = rec.nodelist
        if ids:
            v.outputs = [(label, str(p)) for label, p in jd.outputs(v.results)]
            v.ranks = [rep for k in range(r.world_size) if (rep := jd.read_report(k))]
        if state == "COMPLETED" and not v.results:
            v.notes.append("no results file")
        views.append(v)
    if updates:
        reg.update_states(updates)
    if ids:
        add_usage(views, slurm)
    return views, source


LOW_EFFICIENCY = 0.6  # below this, the ranks' cores mostly waited: pinning, oversubscription, or I/O


def add_usage(views: Sequence[JobView], slurm: Slurm) -> None:
    """Finished jobs: CPU efficiency and peak memory. Slurm jobs from one batched sacct call (seff's numbers:
    TotalCPU / (Elapsed x AllocCPUS), the largest step MaxRSS); local jobs from their ranks' own measurements."""
    done = [v for v in views if states.is_final(v.state)]
    slurm_ids = [v.id for v in done if v.executor == "slurm"]
    got, err = slurm.usage(slurm_ids) if slurm_ids else ({}, "")
    for v in done:
        if v.executor == "slurm" and v.id in got:
            u = got[v.id]
            v.usage = {"source": "sacct", "cpu_efficiency": u.cpu_efficiency, "max_rss_bytes": u.max_rss_bytes,
                       "cpu_s": u.total_cpu_s, "elapsed_s": u.elapsed_s, "cpus": u.alloc_cpus}
        elif v.executor == "slurm" and err:
            v.usage = {"source": "sacct", "error": err}
        else:
            per_rank = [(rep["rank"], rep["usage"]) for rep in v.ranks if isinstance(rep.get("usage"), dict)]
            if per_rank:
                effs = {k: u["cpu_s"] / (u["wall_s"] * u["cpus"]) for k, u in per_rank if u["wall_s"] and u["cpus"]}
                v.usage = {"source": "ranks", "per_rank": {k: {**u, "cpu_efficiency": effs.get(k)}
                                                           for k, u in per_rank},
                           "cpu_efficiency": min(effs.values()) if effs else None,
                           "max_rss_bytes": max(u["max_rss_bytes"] for _, u in per_rank)}
        eff = (v.usage or {}).get("cpu_efficiency")
        if eff is not None and eff < LOW_EFFICIENCY:
            v.notes.append(f"CPU efficiency {eff:.0%} (< {LOW_EFFICIENCY:.0%}): the ranks' cores mostly waited; check "
                           "the pinning (`hpcqa topology CONFIG`), oversubscription, or data loading")


def _slurm_state(job_id: str, jd: JobDir, recs: Mapping, source: str,
                 known: tuple[str, str, str]) -> tuple[str, str, str]:
    """(state, exit code, elapsed) of an unfinished Slurm job from the scheduler's answer."""
    if job_id in recs:
        rec = recs[job_id]
        state = rec.state
        if source == "squeue" and state == "COMPLETING":
            state = jd.state_from_files() or state
        return state, rec.exit_code, rec.elapsed
    if source not in ("sacct", "squeue", "none"):
        # the scheduler could not be asked: what the job's own files say beats the last state we knew
        return jd.state_from_files() or known[0], known[1], known[2]
    if source in ("sacct", "squeue"):
        # the scheduler doesn't list it (any more): it ended, and its files say how. Without
        # accounting and without files there is nothing to tell success from failure.
        files = jd.state_from_files()
        if files:
            return files, known[1], known[2]
        if source == "squeue":
            return "FAILED", known[1], known[2]
    return known


def attempt_text(v: JobView) -> str:
    """"requeued N times, resumed from step S" when the job was restarted."""
    r, p = v.results or {}, v.progress or {}
    n = r.get("requeues", p.get("attempt", 0)) or 0
    if not n:
        return ""
    step = r.get("resumed_from_step")
    return f"requeued {n}x" + (f", resumed from step {step}" if step else "")


def progress_text(v: JobView, now: float | None = None) -> str:
    again = attempt_text(v)
    again = f" ({again})" if again else ""
    if v.results and "f1" in v.results:
        return f"EM {v.results['exact_match']:.1f} F1 {v.results['f1']:.1f}{again}"
    p = v.progress
    if not p or states.is_final(v.state):
        return ""
    text = f"{p.get('step', 0)}/{p.get('total_steps') or '?'}"
    if isinstance(p.get("loss"), (int, float)):
        text += f" loss {p['loss']:.3f}"
    if p.get("eta_s") and v.state == "RUNNING":
        text += f" ETA {_dur(p['eta_s'])}"
    return text + again


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
