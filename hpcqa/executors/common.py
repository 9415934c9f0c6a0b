"""What both executors share: submitting through submitit with the rank wrapper, watching a job folder."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

from hpcqa import render
from hpcqa.plan import LaunchPlan, write_plan
from hpcqa.status import read_json


def job_root(plan: LaunchPlan) -> Path:
    return Path(plan.config.job.output_dir, plan.config.job.name).absolute()


def prepare(plan: LaunchPlan) -> tuple[Path, str]:
    """Write the plan where the ranks can read it; return (plan path, submitit python= string)."""
    path = write_plan(plan, job_root(plan) / "plans")
    return path, render.submitit_python(plan.python, str(path))


def register(plan: LaunchPlan, job_id: str, folder: Path, **extra) -> None:
    from hpcqa.registry import Registry
    Registry(plan.config.job.registry or None).add(
        id=str(job_id), name=plan.config.job.name, executor=plan.executor, folder=str(folder),
        config=plan.config.to_dict(), source=plan.config.source, nodes=plan.nodes, world_size=plan.world_size,
        **extra)


def report(job_id: str, folder: Path, state: str, plan: LaunchPlan) -> int:
    """Print the outcome; raise JobFailed (exit 1) with the failing ranks' errors when it failed."""
    from hpcqa.errors import JobFailed
    results = read_json(folder / "results.json")
    failed = failed_ranks(folder)
    if results and not failed and state in ("COMPLETED", "FINISHED", "DONE"):
        print(f"job {job_id} COMPLETED  ({folder})")
        for line in summary_lines(results):
            print("  " + line)
        return 0
    lines = [f"job {job_id} {'FAILED' if state in ('COMPLETED', 'FINISHED', 'DONE') else state}"]
    for i, f in enumerate(failed):
        lines.append(f"rank {f['rank']} on {f['host']}: {f['error']}" + ("  <- first failure" if i == 0 and
                                                                          len(failed) > 1 else ""))
    if not failed:
        for r in range(plan.world_size):
            logs = sorted(folder.glob(f"*_{r}_log.err"))
            t = tail(logs[0], 6) if logs else []
            if t:
                lines.append(f"rank {r} stderr tail:\n    " + "\n    ".join(t))
    raise JobFailed("\n  ".join(lines), f"logs: hpcqa logs {job_id} [--rank N]  (files in {folder})")


def tidy(plan: LaunchPlan) -> None:
    """submitit leaves an empty '%j' staging folder behind; remove it if empty."""
    try:
        (job_root(plan) / "%j").rmdir()
    except OSError:
        pass


def failed_ranks(folder: Path) -> list[dict]:
    """The ranks that failed, earliest first: the first is the cause, the others usually lost their peer."""
    out = []
    for p in (folder / "ranks").glob("rank-*.failed"):
        d = read_json(p)
        if d:
            out.append(d)
    return sorted(out, key=lambda d: (d.get("time", 0), d.get("rank", 0)))


def tail(path: Path, n: int = 15) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def watch(folder: Path, is_done: Callable[[], bool], title: str, fail_fast: Callable[[], None] | None = None,
          poll_s: float = 1.0) -> None:
    """Show rank 0's progress.json as a rich progress bar until is_done()."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
               TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn()]
    failed_at = None
    with Progress(*columns, transient=False, disable=not sys.stderr.isatty(),
                  console=None) as bar:
        task = bar.add_task(title, total=None, loss="-")
        while not is_done():
            p = read_json(folder / "progress.json")
            if p:
                bar.update(task, completed=p.get("step", 0), total=p.get("total_steps") or None,
                           loss=f"{p['loss']:.3f}" if isinstance(p.get("loss"), (int, float)) else "-",
                           description=f"{title} [{p.get('phase', '')}]")
            if fail_fast and failed_ranks(folder):
                failed_at = failed_at or time.time()
                if time.time() - failed_at > 10:  # let the other ranks fail on their own first
                    fail_fast()
                    failed_at = float("inf")
            time.sleep(poll_s)


def summary_lines(results: dict) -> list[str]:
    lines = []
    if "exact_match" in results:
        line = f"EM {results['exact_match']:.2f}  F1 {results['f1']:.2f}  ({results.get('eval_examples')} questions)"
        if results.get("baseline"):
            b = results["baseline"]
            line += f"   baseline '{b['name'].split(' ')[0]}': EM {b['exact_match']:.2f}  F1 {b['f1']:.2f}"
        lines.append(line)
    tps = results.get("train_samples_per_second")
    if tps:
        lines.append(f"train {tps:.2f} samples/s over {results.get('world_size')} rank(s), "
                     f"{results.get('threads_per_rank')} thread(s) each; {results.get('train_runtime_s', 0):.0f} s; "
                     f"backend {results.get('backend')}; bf16 {results.get('bf16')}")
    if results.get("eval_samples_per_second"):
        lines.append(f"eval {results['eval_samples_per_second']:.1f} features/s; wall time "
                     f"{results.get('wall_time_s', 0):.0f} s")
    return lines

