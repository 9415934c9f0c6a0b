"""The per-job view (state + progress + results) that `hpcqa status` prints, and its texts. The views are filled
by executors/jobs.py (registry rows, the live states each row's executor reports, the job folders). Never imports
torch.

Slurm's states come from ONE batched `sacct` call for all unfinished Slurm jobs (executors/slurm/cli.py, Slurm.query).
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
from hpcqa.record.jobfiles.failure import Failure
from hpcqa.record.jobfiles.fields import to_json
from hpcqa.record.jobfiles.parts import Notice
from hpcqa.record.jobfiles.phase import PhaseRecord
from hpcqa.record.jobfiles.progress import Progress
from hpcqa.record.jobfiles.report import Report
from hpcqa.record.jobfiles.results import Results

LIST_PHASES = (
    16  # rank files the list view reads per unfinished job (status JOB reads every rank's)
)


@dataclass
class JobView:
    id: str
    name: str
    executor: str  # where it ran: local | slurm
    state: str
    nodes: int
    world_size: int
    elapsed: str = ""
    exit_code: str = ""
    folder: str = ""
    progress: Progress | None = None
    results: Results | None = None
    sweep_id: str | None = None
    task_index: int | None = None
    variant: dict | None = None
    notes: list[str] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    reason: str = ""  # why a PENDING job waits (squeue %r)
    nodelist: str = ""
    ranks: list[Report] = field(
        default_factory=list
    )  # detail view: each rank's report (host, CPUs, usage)
    attempts: list[int] = field(
        default_factory=list
    )  # detail view: earlier attempts whose files were kept
    notices: list[Notice] = field(
        default_factory=list
    )  # detail view: stops on SIGTERM / the requeue signal
    failed: list[Failure] = field(default_factory=list)  # detail view: failing ranks, causes first
    logs: list[Path] = field(default_factory=list)  # detail view: the ranks' logs (stderr)
    usage: dict | None = (
        None  # detail view: CPU efficiency and peak memory (sacct, or the ranks' own)
    )
    phases: list[PhaseRecord] = field(
        default_factory=list
    )  # unfinished jobs: where each rank is (rank/phase.py)
    damaged: list[str] = field(
        default_factory=list
    )  # detail view: job files there but unusable, with why

    def to_json(self) -> dict:
        out = {
            k: getattr(self, k)
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
        out.update({k: to_json(out[k]) for k in ("progress", "results", "phases")})
        out["outputs"] = dict(self.outputs)
        out["attempts"] = attempt_text(self)
        return out


def scores(results: Results | None) -> tuple[float, float] | None:
    """(EM, F1) when results.json holds both."""
    return results.scores() if results else None


def v2_lines(results: Results) -> list[str]:
    """SQuAD v2: the answerable and unanswerable questions' scores apart, and the no-answer threshold that would
    have scored best (the official v2.0 script's HasAns_*, NoAns_*, best_f1), each line within 78 columns."""
    r, lines = results, []
    for label, em, f1, n in (
        ("answerable", r.HasAns_exact, r.HasAns_f1, r.HasAns_total),
        ("unanswerable", r.NoAns_exact, r.NoAns_f1, r.NoAns_total),
    ):
        if em is not None and f1 is not None and n is not None:
            lines.append(f"{label}: EM {em:.2f}  F1 {f1:.2f}  ({n:.0f} questions)")
    if r.best_f1 is not None and r.best_f1_thresh is not None:
        lines.append(
            f"best train.null_score_diff_threshold {r.best_f1_thresh:.4g}: F1 {r.best_f1:.2f}"
        )
    return lines


def attempt_text(v: JobView) -> str:
    """ "requeued N times, resumed from step S" when the job was restarted."""
    r, p = v.results, v.progress
    n = (r.requeues if r and r.requeues is not None else p.attempt if p else None) or 0
    if not n:
        return ""
    step = r.resumed_from_step if r else None
    why = ", ".join(
        f"{x.signal}" + (f" at step {x.step}" if x.step is not None else "")
        for x in (r.notices if r else ())
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
    link = v.results.link if v.results else None
    if link and link.bandwidth_Bps and link.latency_s is not None:
        return f"link {8 * link.bandwidth_Bps / 1e6:.0f} Mbit/s, {1e6 * link.latency_s:.0f} us"
    p = v.progress
    if states.is_final(v.state):
        return ""
    if not p or (p.attempt or 0) != _attempt_now(v) or p.step is None:
        # no step yet (in this attempt), or a program that counts none: where the ranks are, for how long
        read = v.world_size if len(v.phases) > LIST_PHASES else min(v.world_size, LIST_PHASES)
        return phases.summary(v.phases, read) + again if v.phases else ""
    text = f"{p.step}/{p.total_steps or '?'}"
    if p.loss is not None:
        text += f" loss {p.loss:.3f}"
    now = time.time() if now is None else now
    if v.state == State.RUNNING and (left := eta.eta_text(p.eta_s, p.updated, now)):
        text += f" {left}"
    return text + again


def _attempt_now(v: JobView) -> int:
    """The attempt the ranks are in now, as their phase files say (the progress file may be an earlier attempt's)."""
    got = [r.attempt for r in v.phases if r.attempt is not None]
    if got:
        return max(got)
    return (v.progress.attempt or 0) if v.progress else 0
