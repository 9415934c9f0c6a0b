"""How a followed job is shown: rank 0's progress as a bar on a terminal, then how it ended (the results' summary,
or the failing ranks and the fix). The executors return an Outcome and print nothing; this is where it is said."""

from __future__ import annotations

import contextlib
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from hpcqa.cli.say import tell
from hpcqa.core import eta, states
from hpcqa.errors import JobFailed
from hpcqa.record import failures, status
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles.parts import Recipe
from hpcqa.record.jobfiles.progress import Progress as ProgressFile
from hpcqa.record.jobfiles.results import Efficiency, Results

STDERR_LINES = 8  # of a failed program's stderr, error first, in submit's report


class CountedBar(BarColumn):
    """A bar only for progress that is counted (step of total steps): a job without a step count (a program that
    writes no Trainer files, the start) shows its phase and elapsed time, not a bar that looks full or busy."""

    def render(self, task: Any) -> Any:
        return super().render(task) if task.total is not None else ""


@contextlib.contextmanager
def progress_bar(title: str) -> Iterator[Callable[[ProgressFile], None]]:
    """A rich progress bar on stderr (only on a terminal); yields the callback an executor's wait feeds. The texts
    are data, not rich markup: "[command]" is a phase shown as it is. Its ETA is the one `status` shows (the rank's
    estimate, hpcqa.core.eta), not one of rich's own from how often the bar was fed."""
    columns = [
        TextColumn("{task.description}", markup=False),
        CountedBar(),
        TextColumn("{task.fields[steps]}", markup=False),
        TextColumn("{task.fields[loss]}", markup=False),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}", markup=False),
    ]
    with Progress(*columns, transient=False, disable=not sys.stderr.isatty(), console=None) as bar:
        task = bar.add_task(f"{title} [starting]", total=None, loss="", steps="", eta="")
        yield lambda p: bar.update(task, **bar_fields(title, p, time.time()))


def bar_fields(title: str, p: ProgressFile, now: float) -> dict[str, Any]:
    """What the bar shows of one progress reading at `now`."""
    step, total = p.step, p.total_steps
    counted = step is not None and bool(total)
    steps = f"{step}/{total} steps" if counted else f"step {step}" if step is not None else ""
    phase = (p.phase or "")[:20]
    return {
        "completed": step if counted else 0,
        "total": total if counted else None,
        "steps": steps,
        "loss": f"loss {p.loss:.3f}" if p.loss is not None else "",
        "eta": eta.eta_text(p.eta_s, p.updated, now),
        "description": f"{title} [{phase}]" if phase else title,
    }


def finish(outcome: Any, plan: Any, say: Callable[[str], None]) -> int:
    """The exit code of a followed job, after saying how it ended: 130 when the following was interrupted."""
    for warning in outcome.warnings:
        say(f"WARNING: {warning}")
    if outcome.interrupted:
        say(
            f"\nstopped watching; job {outcome.job_id} keeps running (hpcqa cancel {outcome.job_id})"
            if outcome.keeps_running
            else f"\ninterrupted: local job {outcome.job_id} cancelled (all ranks stopped)"
        )
        return 130
    return report(outcome.job_id, JobDir(Path(outcome.folder)), outcome.state, plan)


def report(job_id: str, jd: JobDir, state: str, plan: Any) -> int:
    """Print the outcome; raise JobFailed (exit 1) with the failing ranks' errors when it failed."""
    results = jd.read_results()
    failed = jd.failed_ranks()
    if results and not failed and states.succeeded(state):
        tell(f"job {job_id} COMPLETED  ({jd.path})")
        for line in summary_lines(results):
            tell("  " + line)
        model = jd.saved_model()
        if model is not None:  # the folder itself, not what results.json says of it
            tell(f"  trained model (from_pretrained): {model}")
        return 0
    lines = [f"job {job_id} {'FAILED' if states.succeeded(state) else state}"]
    for i, f in enumerate(failed):
        lines.append(
            f"rank {f.rank} on {f.host or '?'}: {f.error}"
            + ("  <- first failure" if i == 0 and len(failed) > 1 else "")
        )
        if i == 0 and f.stderr_tail:  # a program's: its own error, first
            lines += [
                "    " + line[:200]
                for line in failures.error_first(list(f.stderr_tail))[:STDERR_LINES]
            ]
    if not failed:
        for r in range(plan.world_size):
            t = failures.error_first(jd.tail(r, 20))[:6]
            if t:
                lines.append(f"rank {r} stderr tail:\n    " + "\n    ".join(t))
    raise JobFailed(
        "\n  ".join(lines), f"logs: hpcqa logs {job_id} [--rank N]  (files in {jd.path})"
    )


def mfu_lines(eff: Efficiency | None) -> list[str]:
    """MFU on the tokens that carry text and on all tokens, against the measured peak (80 columns; how the peak was
    taken: `hpcqa status JOB`); an unreliable peak (the run beat it, or it moved during the job) is said as such,
    with the fix, never as an MFU."""
    if eff is None:
        return []
    # printed indented by 2, each line within 76 columns, two lines in all: the summary's end (the state, EM/F1)
    # stays on a small terminal's screen; `hpcqa status JOB` says the why, the fix and how the peak was taken whole
    if eff.mfu_unreliable:
        bad = eff.mfu_unreliable
        return [
            textwrap.shorten(f"MFU not given: {bad.why}", 76, placeholder=" [...]"),
            textwrap.shorten(f"  fix: {bad.fix}", 76, placeholder=" [...]"),
        ]
    if eff.mfu is None or eff.achieved_flops is None or eff.peak_flops is None:
        return []
    line = f"MFU {100 * eff.mfu:.1f} % on text tokens"
    if eff.mfu_all_tokens is not None:
        padding = eff.tokens.padding_share if eff.tokens else None
        line += f", {100 * eff.mfu_all_tokens:.1f} % on all tokens" + (
            f" ({100 * padding:.0f} % padding)" if padding is not None else ""
        )
    return [
        line,
        f"achieved {eff.achieved_flops / 1e9:.2f} GFLOP/s of {eff.peak_flops / 1e9:.1f}, the measured "
        f"{eff.precision} matmul peak",
    ]


def command_lines(results: Results) -> list[str]:
    """A user command's job: that it ended well on every rank, and the metrics its rank 0 wrote (HPCQA_RESULTS)."""
    wall = results.wall_time_s
    lines = [
        f"the command ended with 0 on {results.world_size} rank(s)"
        + (f"; rank 0 ran {wall:.0f} s" if wall is not None else "")
    ]
    if results.metrics:
        lines.append("metrics: " + metrics_text(results.metrics, 8))
    elif results.metrics_error:
        lines.append(results.metrics_error)
    return lines


def metrics_text(metrics: dict[str, Any], most: int) -> str:
    """A user program's metrics (HPCQA_RESULTS): "name value" each, floats to 4 digits, the first `most`."""
    return ", ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in list(metrics.items())[:most]
    )


def summary_lines(results: Results) -> list[str]:
    r = results
    if r.command is not None:
        return command_lines(r)
    lines = []
    if r.exact_match is not None and r.f1 is not None:
        lines.append(f"EM {r.exact_match:.2f}  F1 {r.f1:.2f}  ({r.eval_examples} questions)")
        lines += status.v2_lines(r)
        b = r.baseline
        if b and b.exact_match is not None and b.f1 is not None:  # one line each: 80 columns
            lines.append(
                f"baseline '{b.name.split(' ')[0]}': EM {b.exact_match:.2f}  F1 {b.f1:.2f}"
            )
    if r.train_samples_per_second:
        lines.append(
            f"train {r.train_samples_per_second:.2f} samples/s over {r.world_size} rank(s), "
            f"{r.threads_per_rank} thread(s) each; {r.train_runtime_s or 0:.0f} s"
        )
        lines.append(f"backend {r.backend}; bf16 {r.bf16}")
        lines += attention_lines(r.step_recipe)
    lines += mfu_lines(r.efficiency)
    if r.eval_samples_per_second:
        lines.append(
            f"eval {r.eval_samples_per_second:.1f} features/s; wall time {r.wall_time_s or 0:.0f} s"
        )
    if r.best_checkpoint:
        lines.append(f"best checkpoint {r.best_checkpoint} ({r.best_metric})")
    for stage, files in (("eval", r.files), ("test", r.predict.files if r.predict else {})):
        if files:
            lines.append(f"{stage} predictions: {files.get('predictions')}")
    if r.tensorboard:
        lines.append(f"TensorBoard: tensorboard --logdir {r.tensorboard}")
    return lines


def attention_lines(recipe: Recipe | None) -> list[str]:
    """Which attention ran and why (the rank's record), and a switch the model made during training."""
    if recipe is None or recipe.attention is None:
        return []
    lines = [
        textwrap.shorten(f"attention {recipe.attention} ({recipe.attention_reason or ''})", 76)
    ]
    if recipe.attention_switched is not None:
        lines.append(textwrap.shorten(f"attention switched: {recipe.attention_switched}", 76))
    return lines
