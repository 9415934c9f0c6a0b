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

from hpcqa.core import eta, states
from hpcqa.errors import JobFailed
from hpcqa.record import failures, status
from hpcqa.record.jobdir import JobDir

STDERR_LINES = 8  # of a failed program's stderr, error first, in submit's report


class CountedBar(BarColumn):
    """A bar only for progress that is counted (step of total steps): a job without a step count (a program that
    writes no Trainer files, the start) shows its phase and elapsed time, not a bar that looks full or busy."""

    def render(self, task: Any) -> Any:
        return super().render(task) if task.total is not None else ""


@contextlib.contextmanager
def progress_bar(title: str) -> Iterator[Callable[[dict], None]]:
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


def bar_fields(title: str, p: dict, now: float) -> dict[str, Any]:
    """What the bar shows of one progress reading at `now`."""
    step, total = p.get("step"), p.get("total_steps")
    counted = isinstance(step, int) and isinstance(total, int) and total > 0
    steps = f"{step}/{total} steps" if counted else f"step {step}" if isinstance(step, int) else ""
    phase = str(p.get("phase") or "")[:20]
    return {
        "completed": step if counted else 0,
        "total": total if counted else None,
        "steps": steps,
        "loss": f"loss {p['loss']:.3f}" if isinstance(p.get("loss"), (int, float)) else "",
        "eta": eta.eta_text(p, now),
        "description": f"{title} [{phase}]" if phase else title,
    }


def finish(outcome: Any, plan: Any, say: Callable[[str], None]) -> int:
    """The exit code of a followed job, after saying how it ended: 130 when the following was interrupted."""
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
        print(f"job {job_id} COMPLETED  ({jd.path})")
        for line in summary_lines(results):
            print("  " + line)
        model = jd.saved_model()
        if model is not None:  # the folder itself, not what results.json says of it
            print(f"  trained model (from_pretrained): {model}")
        return 0
    lines = [f"job {job_id} {'FAILED' if states.succeeded(state) else state}"]
    for i, f in enumerate(failed):
        lines.append(
            f"rank {f['rank']} on {f['host']}: {f['error']}"
            + ("  <- first failure" if i == 0 and len(failed) > 1 else "")
        )
        if i == 0 and isinstance(f.get("stderr_tail"), list):  # a program's: its own error, first
            lines += [
                "    " + line[:200]
                for line in failures.error_first(f["stderr_tail"])[:STDERR_LINES]
            ]
    if not failed:
        for r in range(plan.world_size):
            t = failures.error_first(jd.tail(r, 20))[:6]
            if t:
                lines.append(f"rank {r} stderr tail:\n    " + "\n    ".join(t))
    raise JobFailed(
        "\n  ".join(lines), f"logs: hpcqa logs {job_id} [--rank N]  (files in {jd.path})"
    )


def mfu_lines(eff: dict) -> list[str]:
    """MFU on the tokens that carry text and on all tokens, against the measured peak (80 columns); an unreliable
    peak (the run beat it) is said as such, with the fix, never as an MFU over 100 %."""
    if eff.get("mfu_unreliable"):
        bad = eff["mfu_unreliable"]
        # printed indented by 2: each line within 76 columns here
        return [
            *textwrap.wrap(f"MFU not given: {bad['why']}", 76, subsequent_indent="  "),
            *textwrap.wrap(f"  fix: {bad['fix']}", 76, subsequent_indent="       "),
        ]
    if eff.get("mfu") is None:
        return []
    line = f"MFU {100 * eff['mfu']:.1f} % on text tokens"
    if eff.get("mfu_all_tokens") is not None:
        padding = (eff.get("tokens") or {}).get("padding_share")
        line += f", {100 * eff['mfu_all_tokens']:.1f} % on all tokens" + (
            f" ({100 * padding:.0f} % padding)" if padding is not None else ""
        )
    return [
        line,
        f"achieved {eff['achieved_flops'] / 1e9:.2f} GFLOP/s of {eff['peak_flops'] / 1e9:.1f}, the measured "
        f"{eff['precision']} matmul peak",
    ]


def command_lines(results: dict) -> list[str]:
    """A user command's job: that it ended well on every rank, and the metrics its rank 0 wrote (HPCQA_RESULTS)."""
    wall = results.get("wall_time_s")
    lines = [
        f"the command ended with 0 on {results.get('world_size')} rank(s)"
        + (f"; rank 0 ran {wall:.0f} s" if isinstance(wall, (int, float)) else "")
    ]
    metrics = results.get("metrics")
    if isinstance(metrics, dict) and metrics:
        lines.append(
            "metrics: "
            + ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in list(metrics.items())[:8]
            )
        )
    elif results.get("metrics_error"):
        lines.append(str(results["metrics_error"]))
    return lines


def summary_lines(results: dict) -> list[str]:
    if isinstance(results.get("command"), list):
        return command_lines(results)
    lines = []
    if "exact_match" in results:
        lines.append(
            f"EM {results['exact_match']:.2f}  F1 {results['f1']:.2f}  ({results.get('eval_examples')} "
            "questions)"
        )
        lines += status.v2_lines(results)
        if results.get("baseline"):  # one line each: an 80-column terminal shows them whole
            b = results["baseline"]
            lines.append(
                f"baseline '{b['name'].split(' ')[0]}': EM {b['exact_match']:.2f}  F1 {b['f1']:.2f}"
            )
    tps = results.get("train_samples_per_second")
    if tps:
        lines.append(
            f"train {tps:.2f} samples/s over {results.get('world_size')} rank(s), "
            f"{results.get('threads_per_rank')} thread(s) each; {results.get('train_runtime_s', 0):.0f} s"
        )
        lines.append(f"backend {results.get('backend')}; bf16 {results.get('bf16')}")
        lines += attention_lines(results.get("step_recipe"))
    eff = results.get("efficiency") or {}
    lines += mfu_lines(eff)
    if results.get("eval_samples_per_second"):
        lines.append(
            f"eval {results['eval_samples_per_second']:.1f} features/s; wall time "
            f"{results.get('wall_time_s', 0):.0f} s"
        )
    if results.get("best_checkpoint"):
        lines.append(f"best checkpoint {results['best_checkpoint']} ({results.get('best_metric')})")
    for stage in ("files", "predict"):
        files = (
            (results.get(stage) or {}).get("files") if stage == "predict" else results.get("files")
        )
        if files:
            lines.append(
                f"{'test' if stage == 'predict' else 'eval'} predictions: {files.get('predictions')}"
            )
    if results.get("tensorboard"):
        lines.append(f"TensorBoard: tensorboard --logdir {results['tensorboard']}")
    return lines


def attention_lines(recipe: Any) -> list[str]:
    """Which attention ran and why (the rank's record), and a switch the model made during training."""
    if not isinstance(recipe, dict) or not isinstance(recipe.get("attention"), str):
        return []
    lines = [
        textwrap.shorten(
            f"attention {recipe['attention']} ({recipe.get('attention_reason', '')})", 76
        )
    ]
    if isinstance(recipe.get("attention_switched"), str):
        lines.append(textwrap.shorten(f"attention switched: {recipe['attention_switched']}", 76))
    return lines
