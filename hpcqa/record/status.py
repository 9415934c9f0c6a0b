"""The per-job view (state + progress + results) that `hpcqa status` prints, and its texts. The views are filled
by executors/jobs.py (registry rows, the live states each row's executor reports, the job folders). Never imports
torch.

Slurm's states come from ONE batched `sacct` call for all unfinished Slurm jobs (slurmcli.Slurm.query).
Without accounting they come from ONE `squeue` call plus the jobs' own files: a job squeue no
longer lists has ended, and its folder says how (jobdir.JobDir.state_from_files).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hpcqa.core import eta, states
from hpcqa.core.states import State
from hpcqa.record import phases
from hpcqa.record.jsonfiles import count, list_at, number

LIST_PHASES = (
    16  # rank files the list view reads per unfinished job (status JOB reads every rank's)
)


@dataclass
class JobView:
    id: str
    name: str
    target: str  # where it runs: local | slurm ("executor" in --json and the list)
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
    reason: str = ""  # why a PENDING job waits (squeue %r)
    nodelist: str = ""
    ranks: list[dict] = field(
        default_factory=list
    )  # detail view: each rank's report (host, CPUs, usage)
    attempts: list[int] = field(
        default_factory=list
    )  # detail view: earlier attempts whose files were kept
    notices: list[dict] = field(
        default_factory=list
    )  # detail view: stops on SIGTERM / the requeue signal
    failed: list[dict] = field(default_factory=list)  # detail view: failing ranks, causes first
    logs: list[Path] = field(default_factory=list)  # detail view: the ranks' logs (stderr)
    usage: dict | None = (
        None  # detail view: CPU efficiency and peak memory (sacct, or the ranks' own)
    )
    phases: list[dict] = field(
        default_factory=list
    )  # unfinished jobs: where each rank is (rank/phase.py)
    damaged: list[str] = field(
        default_factory=list
    )  # detail view: job files there but unusable, with why

    def to_json(self) -> dict:
        # "executor": the --json field users read, the target's name
        out = {
            k: getattr(self, "target" if k == "executor" else k)
            for k in (
                "id",
                "name",
                "state",
                "executor",
                "nodes",
                "world_size",
                "elapsed",
                "exit_code",
                "folder",
                "progress",
                "results",
                "sweep_id",
                "task_index",
                "variant",
                "reason",
                "nodelist",
                "usage",
                "phases",
                "notes",
                "damaged",
            )
        }
        out["outputs"] = dict(self.outputs)
        out["attempts"] = attempt_text(self)
        return out


def scores(results: dict | None) -> tuple[float, float] | None:
    """(EM, F1) when results.json holds both as numbers."""
    em, f1 = (number((results or {}).get(k)) for k in ("exact_match", "f1"))
    return (em, f1) if em is not None and f1 is not None else None


def v2_lines(results: dict) -> list[str]:
    """SQuAD v2: the answerable and unanswerable questions' scores apart, and the no-answer threshold that would
    have scored best (the official v2.0 script's HasAns_*, NoAns_*, best_f1), each line within 78 columns."""
    lines = []
    for key, label in (("HasAns", "answerable"), ("NoAns", "unanswerable")):
        em, f1, n = (number(results.get(f"{key}_{k}")) for k in ("exact", "f1", "total"))
        if em is not None and f1 is not None and n is not None:
            lines.append(f"{label}: EM {em:.2f}  F1 {f1:.2f}  ({n:.0f} questions)")
    best, thresh = number(results.get("best_f1")), number(results.get("best_f1_thresh"))
    if best is not None and thresh is not None:
        lines.append(f"best train.null_score_diff_threshold {thresh:.4g}: F1 {best:.2f}")
    return lines


def attempt_text(v: JobView) -> str:
    """ "requeued N times, resumed from step S" when the job was restarted."""
    r, p = v.results or {}, v.progress or {}
    n = count(r.get("requeues", p.get("attempt", 0))) or 0
    if not n:
        return ""
    step = count(r.get("resumed_from_step"))
    why = ", ".join(
        f"{x.get('signal')}" + (f" at step {s}" if (s := count(x.get("step"))) is not None else "")
        for x in list_at(r, "notices")
        if isinstance(x, dict)
    )
    return (
        f"requeued {n}x"
        + (f" ({why})" if why else "")
        + (f", resumed from step {step}" if step else "")
    )


def progress_text(v: JobView, now: float | None = None) -> str:
    again = attempt_text(v)
    again = f" ({again})" if again else ""
    if got := scores(v.results):
        return f"EM {got[0]:.1f} F1 {got[1]:.1f}{again}"
    link = (v.results or {}).get("link")
    bandwidth, latency = (
        number(link.get(k)) if isinstance(link, dict) else None
        for k in ("bandwidth_Bps", "latency_s")
    )
    if bandwidth and latency is not None:
        return f"link {8 * bandwidth / 1e6:.0f} Mbit/s, {1e6 * latency:.0f} us"
    p = v.progress
    if states.is_final(v.state):
        return ""
    if not p or p.get("attempt", 0) != _attempt_now(v) or not isinstance(p.get("step"), int):
        # no step yet (in this attempt), or a program that counts none: where the ranks are, for how long
        read = v.world_size if len(v.phases) > LIST_PHASES else min(v.world_size, LIST_PHASES)
        return phases.summary(v.phases, read) + again if v.phases else ""
    text = f"{p.get('step', 0)}/{p.get('total_steps') or '?'}"
    if isinstance(p.get("loss"), (int, float)):
        text += f" loss {p['loss']:.3f}"
    if v.state == State.RUNNING and (left := eta.eta_text(p, time.time() if now is None else now)):
        text += f" {left}"
    return text + again


def _attempt_now(v: JobView) -> int:
    """The attempt the ranks are in now, as their phase files say (the progress file may be an earlier attempt's)."""
    got = [a for r in v.phases if isinstance(a := r.get("attempt"), int)]
    if got:
        return max(got)
    a = (v.progress or {}).get("attempt")
    return a if isinstance(a, int) else 0
