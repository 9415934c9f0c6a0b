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

from hpcqa.jobdir import JobDir
from hpcqa.slurmcli import Slurm

# Slurm state -> (finished?, outcome). Outcome groups: pending, running, ok, failed, cancelled.
SLURM_STATES: Mapping[str, tuple[bool, str]] = {
    "PENDING": (False, "pending"), "CONFIGURING": (False, "pending"), "REQUEUED": (False, "pending"),
    "REQUEUE_FED": (False, "pending"), "REQUEUE_HOLD": (False, "pending"), "RESV_DEL_HOLD": (False, "pending"),
    "SPECIAL_EXIT": (False, "pending"), "RESIZING": (False, "running"), "SIGNALING": (False, "running"),
    "STAGE_OUT": (False, "running"), "STOPPED": (False, "running"), "SUSPENDED": (False, "running"),
    "RUNNING": (False, "running"), "COMPLETING": (False, "running"),
    "COMPLETED": (True, "ok"),
    "FAILED": (True, "failed"), "TIMEOUT": (True, "failed"), "NODE_FAIL": (True, "failed"),
    "OUT_OF_MEMORY": (True, "failed"), "BOOT_FAIL": (True, "failed"), "DEADLINE": (True, "failed"),
    "PREEMPTED": (True, "failed"), "REVOKED": (True, "cancelled"), "CANCELLED": (True, "cancelled"),
}
# NODE_FAIL and PREEMPTED are final only when Slurm no longer has the job: Slurm.query replaces them
# with squeue's live state (PENDING, RUNNING ...) while the job is requeued under the same id.
# squeue never shows finished states except COMPLETING.

def is_final(state: str) -> bool:
    return SLURM_STATES.get(state, (False, ""))[0]


def outcome(state: str) -> str:
    return SLURM_STATES.get(state, (False, "unknown"))[1]


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

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in ("id", "name", "state", "executor", "nodes", "world_size", "elapsed",
                                              "exit_code", "folder", "progress", "results", "sweep_id",
                                              "task_index", "variant")}
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
            final = is_final(state)
            if final or state != r.state:
                updates.append((r.id, state, final, code or None, elapsed or None))
        v = JobView(id=r.id, name=r.name, executor=r.executor, state=state, nodes=r.nodes, world_size=r.world_size,
                    elapsed=elapsed, exit_code=code, folder=r.folder, sweep_id=r.sweep_id, task_index=r.task_index,
                    variant=r.variant)
        v.progress = jd.read_progress()
        v.results = jd.read_results()
        if ids:
            v.outputs = [(label, str(p)) for label, p in jd.outputs(v.results)]
        if state == "COMPLETED" and not v.results:
            v.notes.append("no results file")
        views.append(v)
    if updates:
        reg.update_states(updates)
    return views, source


def _slurm_state(job_id: str, jd: JobDir, recs: Mapping, source: str,
                 known: tuple[str, str, str]) -> tuple[str, str, str]:
    """(state, exit code, elapsed) of an unfinished Slurm job from the scheduler's answer."""
    if job_id in recs:
        rec = recs[job_id]
        state = rec.state
        if source == "squeue" and state == "COMPLETING":
            state = jd.state_from_files() or state
        return state, rec.exit_code, rec.elapsed
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
    if not p or is_final(v.state):
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
