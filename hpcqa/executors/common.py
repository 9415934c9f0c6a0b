"""What the executors share: the plan files and the rank wrapper in front of every rank, the
registry rows, watching a job folder and reporting how a job ended."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from hpcqa.core import sweep
from hpcqa.executors.interface import File
from hpcqa.record import jobdir
from hpcqa.record.jobdir import TASK_ID, JobDir, JobRoot, atomic_write_text
from hpcqa.core.plan import LaunchPlan
from hpcqa.core import states
from hpcqa.record.registry import Registry
from hpcqa.errors import JobFailed
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def job_root(plan: LaunchPlan) -> JobRoot:
    return JobRoot.of(plan.config.job.output_dir, plan.config.job.name)


def plan_paths(plans: Sequence[LaunchPlan]) -> list[Path]:
    """Where each plan's file goes: plans/<group digest>/task-<i>.json (i = array task). Content-
    addressed, so the dry run can name the very paths a submission will use."""
    root = job_root(plans[0])
    digest = jobdir.plan_group_digest([p.digest for p in plans])
    return [root.task_plan(root.plan_group(digest), i) for i in range(len(plans))]


def plan_files(plans: Sequence[LaunchPlan]) -> list:
    """The plan files of one group, and for an array the group's index (its tasks' plan digests, whose digest names the
    group folder): the rank wrapper checks its plan against the folder name the submitted script gave it."""
    paths = plan_paths(plans)
    files = [File(str(path), p.dumps()) for path, p in zip(paths, plans)]
    if len(plans) > 1:
        files.append(File(str(JobRoot.plan_index(paths[0].parent)), jobdir.plan_index_text([p.digest for p in plans])))
    return files


def write_files(request) -> None:
    """A request's files, under a job root only its owner (and with job.group_readable its group) can enter:
    plan files are content-addressed (kept when present); scripts are the submission's own."""
    job = request.sweep.plans[0].config.job
    job_root(request.sweep.plans[0]).ensure(job.group_readable)
    for f in request.files:
        path = Path(f.path)
        if not path.exists():
            atomic_write_text(path, f.text, mode=f.mode)


def plan_argument(paths: Sequence[Path]) -> str:
    """What the rank wrapper gets as --plan: the file itself, or, for an array, the per-task pattern."""
    if len(paths) == 1:
        return str(paths[0])
    return str(JobRoot.task_plan(paths[0].parent, TASK_ID))


def wrapper_python(python: str, plan_arg: str, folder: str) -> str:
    """The interpreter string given to submitit: our rank wrapper in front of the real python. The
    wrapper gets submitit's folder pattern (%j) to record there how its rank ended."""
    q = shlex.quote
    return f"{q(python)} -m hpcqa.rank --plan {q(plan_arg)} --job-dir {q(folder)} -- {q(python)}"


def registry_row(sp: sweep.SweepPlan, plan: LaunchPlan, job_id: str, folder: Path, sweep_id: str | None) -> dict:
    keys = sweep.swept_keys(list(sp.variants))
    row = dict(id=str(job_id), name=plan.config.job.name, executor=plan.executor, folder=str(folder),
               config=plan.config.to_dict(), source=plan.config.source, nodes=plan.nodes,
               world_size=plan.world_size)
    if sp.is_sweep:
        row.update(array_size=len(sp.variants), sweep_id=sweep_id, task_index=plan.variant_index,
                   variant={k: plan.variant.get(k) for k in keys})
    return row


def register(plan: LaunchPlan, rows: list[dict]) -> None:
    Registry(plan.config.job.registry or None, group_readable=plan.config.job.group_readable).add_many(rows)


def report(job_id: str, jd: JobDir, state: str, plan: LaunchPlan) -> int:
    """Print the outcome; raise JobFailed (exit 1) with the failing ranks' errors when it failed."""
    results = jd.read_results()
    failed = jd.failed_ranks()
    if results and not failed and states.succeeded(state):
        print(f"job {job_id} COMPLETED  ({jd.path})")
        for line in summary_lines(results):
            print("  " + line)
        return 0
    lines = [f"job {job_id} {'FAILED' if states.succeeded(state) else state}"]
    for i, f in enumerate(failed):
        lines.append(f"rank {f['rank']} on {f['host']}: {f['error']}" + ("  <- first failure" if i == 0 and
                                                                          len(failed) > 1 else ""))
    if not failed:
        for r in range(plan.world_size):
            t = jd.tail(r, 6)
            if t:
                lines.append(f"rank {r} stderr tail:\n    " + "\n    ".join(t))
    raise JobFailed("\n  ".join(lines), f"logs: hpcqa logs {job_id} [--rank N]  (files in {jd.path})")


def watch(jd: JobDir, is_done: Callable[[], bool], title: str, fail_fast: Callable[[], None] | None = None,
          poll_s: float = 1.0) -> None:
    """Show rank 0's progress as a rich progress bar until is_done()."""

    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
               TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn()]
    failed_at = None
    with Progress(*columns, transient=False, disable=not sys.stderr.isatty(), console=None) as bar:
        task = bar.add_task(title, total=None, loss="-")
        while not is_done():
            p = jd.read_progress()
            if p:
                bar.update(task, completed=p.get("step", 0), total=p.get("total_steps") or None,
                           loss=f"{p['loss']:.3f}" if isinstance(p.get("loss"), (int, float)) else "-",
                           description=f"{title} [{p.get('phase', '')}]")
            if fail_fast and jd.failed_ranks():
                failed_at = failed_at or time.time()
                if time.time() - failed_at > 10:  # let the other ranks fail on their own first
                    fail_fast()
                    failed_at = float("inf")
            time.sleep(poll_s)


def summary_lines(results: dict) -> list[str]:
    lines = []
    if "exact_match" in results:
        lines.append(f"EM {results['exact_match']:.2f}  F1 {results['f1']:.2f}  ({results.get('eval_examples')} "
                     "questions)")
        if results.get("baseline"):  # one line each: an 80-column terminal shows them whole
            b = results["baseline"]
            lines.append(f"baseline '{b['name'].split(' ')[0]}': EM {b['exact_match']:.2f}  F1 {b['f1']:.2f}")
    tps = results.get("train_samples_per_second")
    if tps:
        lines.append(f"train {tps:.2f} samples/s over {results.get('world_size')} rank(s), "
                     f"{results.get('threads_per_rank')} thread(s) each; {results.get('train_runtime_s', 0):.0f} s")
        lines.append(f"backend {results.get('backend')}; bf16 {results.get('bf16')}")
    eff = results.get("efficiency") or {}
    if eff.get("mfu") is not None:
        lines.append(f"MFU {100 * eff['mfu']:.1f} % ({eff['achieved_flops'] / 1e9:.2f} of "
                     f"{eff['peak_flops'] / 1e9:.1f} GFLOP/s {eff['precision']} peak)")
    if results.get("eval_samples_per_second"):
        lines.append(f"eval {results['eval_samples_per_second']:.1f} features/s; wall time "
                     f"{results.get('wall_time_s', 0):.0f} s")
    if results.get("best_checkpoint"):
        lines.append(f"best checkpoint {results['best_checkpoint']} ({results.get('best_metric')})")
    for stage in ("files", "predict"):
        files = (results.get(stage) or {}).get("files") if stage == "predict" else results.get("files")
        if files:
            lines.append(f"{'test' if stage == 'predict' else 'eval'} predictions: {files.get('predictions')}")
    if results.get("tensorboard"):
        lines.append(f"TensorBoard: tensorboard --logdir {results['tensorboard']}")
    return lines
