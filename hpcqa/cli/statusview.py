"""`hpcqa status` on a terminal: the job list (fits 80 columns; --wide shows everything) and the detail view of
`hpcqa status JOB`. Rendering only: the views come from status.collect. Never imports torch."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any, Sequence

from rich import box
from rich.markup import escape
from rich.markup import render as markup
from rich.panel import Panel
from rich.table import Table

from hpcqa.cli import report
from hpcqa.core import command, eta, states, values
from hpcqa.core.states import State
from hpcqa.core.topology import cpu_list
from hpcqa.record import failures, phases, status
from hpcqa.record.jobfiles.failure import Failure
from hpcqa.record.jobfiles.progress import Progress as ProgressFile
from hpcqa.record.jobfiles.results import Results
from hpcqa.record.status import JobView
from hpcqa.text import one_line, shown_lines

COLOUR = {
    "ok": "green",
    "failed": "red",
    "cancelled": "yellow",
    "running": "cyan",
    "pending": "blue",
}


def _state(v: JobView) -> str:
    return f"[{COLOUR.get(states.outcome(v.state), 'white')}]{_cell(v.state)}[/]"


def _progress(v: JobView) -> str:
    if v.state == State.PENDING and v.reason:
        return _cell(f"waiting: {v.reason}")
    return _cell(status.progress_text(v))


def _cell(text: object) -> str:
    """A table cell from what files and schedulers said (the registry, results.json, squeue): control characters
    spelled out, rich's markup brackets escaped ("[/]" in a results.json was a MarkupError)."""
    return escape(values.shown(text))


def _task_name(x: JobView, tasks: Sequence[JobView]) -> str:
    """A sweep task's name: its trial in a search (a task is its trial's number: one without results yet, a
    cancelled run, is named by its index, as results.rows numbers it), else its variant."""
    if x.results and x.results.trial:
        return f" trial {x.results.trial.number}"
    search = any(t.results and t.results.trial for t in tasks)
    return f" {'trial' if search else 'variant'} {x.task_index}"


def _rows(views: Sequence[JobView], expand: bool) -> list[list[str]]:
    """id, name, executor, state, nodes, ranks, elapsed, progress, exit -- sweeps folded into one row."""
    rows, seen = [], set()
    for v in views:
        if v.sweep_id:
            if v.sweep_id in seen:
                continue
            seen.add(v.sweep_id)
            tasks = [x for x in views if x.sweep_id == v.sweep_id]
            counts: dict[str, int] = {}
            for x in tasks:
                counts[x.state] = counts.get(x.state, 0) + 1
            best = max((got[1] for x in tasks if (got := status.scores(x.results))), default=None)
            rows.append(
                [
                    f"[bold]{_cell(v.sweep_id)}[/]",
                    _cell(f"{v.name} (sweep of {len(tasks)})"),
                    _cell(v.executor),
                    _cell(", ".join(f"{n} {s}" for s, n in sorted(counts.items()))),
                    "",
                    "",
                    "",
                    f"best F1 {best:.1f}" if best is not None else "",
                    "",
                ]
            )
            if expand:
                rows += [
                    [
                        _cell(f" {x.id}"),
                        _cell(_task_name(x, tasks)),
                        _cell(x.executor),
                        _state(x),
                        _cell(x.nodes),
                        _cell(x.world_size),
                        _cell(x.elapsed),
                        _progress(x),
                        _cell(x.exit_code or ""),
                    ]
                    for x in sorted(tasks, key=lambda x: x.task_index or 0)
                ]
            continue
        rows.append(
            [
                _cell(v.id),
                _cell(v.name),
                _cell(v.executor),
                _state(v),
                _cell(v.nodes),
                _cell(v.world_size),
                _cell(v.elapsed),
                _progress(v),
                _cell(v.exit_code or ""),
            ]
        )
    return rows


COLUMNS = (
    "id",
    "name",
    "executor",
    "state",
    "nodes",
    "ranks",
    "elapsed",
    "progress / result",
    "exit",
)
# never cut: these are short and a cut one would mislead ("OUT_OF_MEM..." or half a job id)
WHOLE = ("id", "executor", "state", "nodes", "ranks", "elapsed", "exit")


def job_table(views: Sequence[JobView], expand: bool = False, wide: bool = False, width: int = 80):
    """A rich Table. Narrow (default), for a terminal of `width` columns: no empty column, no executor column
    (the title counts them), names cut with an ellipsis to what is left; ids, states and numbers are never cut,
    and the progress column wraps between words only. Wide: every column, nothing cut."""
    rows = _rows(views, expand)
    keep = list(range(len(COLUMNS)))
    if not wide:
        keep = [i for i in keep if COLUMNS[i] in ("id", "name", "state") or any(r[i] for r in rows)]
        keep.remove(2)
        if 4 in keep:  # nodes folded into ranks: "8 on 4"
            keep.remove(4)
            rows = [
                [*r[:5], f"{r[5]} on {r[4]}" if r[4] not in ("1", "") else r[5], *r[6:]]
                for r in rows
            ]
    counts: dict[str, int] = {}
    top = [r for r in rows if not r[0].startswith(" ")]  # a sweep is one job however it is shown
    for r in top:
        counts[r[2]] = counts.get(r[2], 0) + 1
    n_tasks = sum(1 for v in views if v.sweep_id)
    plain = [[markup(c).plain for c in r] for r in rows]
    need = {i: max(len(x) for x in [COLUMNS[i], *(r[i] for r in plain)]) for i in keep}
    fixed = {i: need[i] for i in keep if COLUMNS[i] in WHOLE}
    spare = width - sum(fixed.values()) - 2 * (len(keep) - 1) - 3  # name + progress share the rest
    widths = dict(fixed)
    if not wide:
        progress = max(min(need.get(7, 0), spare - 10), 12) if 7 in keep else 0
        widths[1] = max(min(need[1], spare - progress), 8)
        if 7 in keep:
            widths[7] = max(spare - widths[1], 12)
    title = (
        f"{len(top)} job(s): "
        + ", ".join(f"{n} {e}" for e, n in sorted(counts.items()))
        + (f" ({n_tasks} sweep task(s))" if n_tasks else "")
    )
    t = Table(
        title=None if wide else title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
        expand=False,
    )
    for i in keep:
        opts: dict[str, Any] = {"overflow": "ellipsis", "no_wrap": i != 7}
        if not wide:
            opts["width"] = widths[i]
        t.add_column(COLUMNS[i], **opts)
    for r in rows:
        t.add_row(*[r[i] for i in keep])
    return t


def print_list(
    con,
    views: Sequence[JobView],
    source: states.Answer,
    path: Path | str,
    expand: bool = False,
    wide: bool = False,
) -> None:
    if not views:
        con.print(f"no jobs in {_cell(path)}", highlight=False)
        return
    con.print(job_table(views, expand, wide, con.width))
    if not source.answered:
        con.print(
            f"[yellow]warning:[/] Slurm could not be asked ({one_line(source.error)}); states are the last known, "
            "or what the jobs' own files say. Fix: hpcqa doctor",
            highlight=False,
        )
    for v in views:
        if (
            v.notes
        ):  # a note can quote a job file (a rank's phase detail): spelled out, never markup
            said = escape(_printable("; ".join(v.notes)))
            con.print(f"[bold]{escape(_printable(v.id))}[/]: {said}", highlight=False)


def _bar(p: ProgressFile, width: int = 30) -> str:
    total, step = p.total_steps or 0, p.step or 0
    if not total:
        return f"step {step}"
    done = min(int(width * step / total), width)
    return f"[{'#' * done}{'.' * (width - done)}] {step}/{total} steps ({100 * step / total:.0f} %)"


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


def _eff(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def detail_lines(v: JobView, now: float | None = None) -> list[tuple[str, str]]:
    """(label, text) rows of `hpcqa status JOB`."""
    now = now or time.time()
    rows = [
        (
            "state",
            v.state
            + (f" -- waiting: {v.reason}" if v.reason else "")
            + (f" (exit {v.exit_code})" if v.exit_code and v.exit_code != "0:0" else ""),
        ),
        (
            "job",
            f"{v.name} ({v.executor}), {v.world_size} rank(s) on {v.nodes} node(s)"
            + (f": {v.nodelist}" if v.nodelist else ""),
        ),
        (
            "elapsed",
            v.elapsed
            or (
                eta.clock(v.results.wall_time_s) + " (the ranks' wall time)"
                if v.results and v.results.wall_time_s
                else "-"
            ),
        ),
    ]
    attempts = v.attempts
    again = status.attempt_text(v)
    if len(attempts) > 1 or again:
        rows.append(("attempts", f"{max(len(attempts), 1)}" + (f" ({again})" if again else "")))
    rows += _progress_rows(v, now)
    code = (v.results.code if v.results else None) or next(
        (rep.code for rep in v.ranks if rep.code), None
    )
    if code:
        rows.append(
            (
                "code",
                (f"snapshot {code.digest or '?'}, " if code.snapshot else "")
                + f"hpcqa {code.version or '?'}, {code.describe or '?'}",
            )
        )
    rows += _command_rows(v)
    rows += _stop_rows(v)
    rows += _failure_rows(v)
    rows += _score_rows(v)
    rows += _efficiency_rows(v)
    rows += _usage_rows(v)
    rows += _preload_rows(v)
    rows += _rank_rows(v, now)
    logs = v.logs
    if logs:
        rows.append(
            ("logs", f"{len(logs)} rank log(s), e.g. {logs[0].name}: hpcqa logs {v.id} [--rank N]")
        )
    folder = dict(v.outputs).get("folder", v.folder)
    for label, path in v.outputs:
        inside = label != "folder" and path.startswith(folder.rstrip("/") + "/")
        rows.append((label, path[len(folder.rstrip("/")) + 1 :] if inside else path))
    return rows + _damaged_rows(v)


def _score_rows(v: JobView) -> list[tuple[str, str]]:
    """EM/F1, and for SQuAD v2 data the answerable and unanswerable questions apart."""
    got = status.scores(v.results)
    if not got or not v.results:
        return []
    rows = [("results", f"EM {got[0]:.2f}  F1 {got[1]:.2f}")]
    return rows + [("", line) for line in status.v2_lines(v.results)]


def _progress_rows(v: JobView, now: float) -> list[tuple[str, str]]:
    """A job still training: its bar, last loss, ETA and how fresh that is."""
    p = v.progress
    if not p or v.results:
        return []
    text = _bar(p)
    if p.loss is not None:
        text += f", last loss {p.loss:.4f}"
    if v.state == State.RUNNING and (left := eta.eta_text(p.eta_s, p.updated, now)):
        text += f", {left}"
    if p.updated:
        text += f" (updated {int(max(now - p.updated, 0))} s ago)"
    return [("progress", text)]


def _stop_rows(v: JobView) -> list[tuple[str, str]]:
    """The last notice a job without results stopped at, and (once it is over) how to continue from it."""
    stops = v.notices
    if not stops or v.results:
        return []
    last = stops[-1]
    rows = [
        (
            "stopped",
            f"{last.signal} at step {last.step} (attempt {last.attempt}): checkpoint {last.checkpoint}",
        )
    ]
    if states.is_final(v.state) and last.checkpoint:
        rows.append(("continue", f"hpcqa submit CONFIG --set train.resume_from={last.checkpoint}"))
    return rows


def _damaged_rows(v: JobView) -> list[tuple[str, str]]:
    """A row per job file that is there but was not used (jobdir.JobDir.damaged): status shows the job without it."""
    return [("damaged", f"{text}: not used") for text in v.damaged]


def _rank_rows(v: JobView, now: float) -> list[tuple[str, str]]:
    """A row per rank: its host and CPUs (its report), its resource use (finished), and while the job runs where it
    is and for how long (its phase file: a rank writes one before it has a report)."""
    reports = {rep.rank: rep for rep in v.ranks}
    where = {ph.rank: ph for ph in v.phases}
    rows = []
    for k in sorted(set(reports) | set(where)):
        rep, ph = reports.get(k), where.get(k)
        u = ((v.usage or {}).get("per_rank") or {}).get(k, {})
        parts = [(rep.host if rep else None) or (ph.host if ph else None) or "?"]
        if rep:
            parts.append(f"CPUs {cpu_list(list(rep.cpus)) or '-'}")
        if u:
            parts.append(
                f"CPU efficiency {_eff(u.get('cpu_efficiency'))}, peak {_mb(u.get('max_rss_bytes'))}"
            )
        if ph and not states.is_final(v.state):
            parts.append(phases.text(ph, now))
        rows.append((f"rank {k}", ", ".join(parts)))
    return rows


def _usage_rows(v: JobView) -> list[tuple[str, str]]:
    u = v.usage
    if not u:
        return []
    if u.get("error"):
        return [("resource use", f"sacct could not say ({u['error']})")]
    if u["source"] == states.Source.SACCT:
        return [
            (
                "resource use",
                f"CPU efficiency {_eff(u.get('cpu_efficiency'))} ({u['cpu_s']:.0f} CPU-s of "
                f"{u['elapsed_s']:.0f} s x {u['cpus']} CPUs), peak memory {_mb(u.get('max_rss_bytes'))}"
                " (largest step, sacct MaxRSS)",
            )
        ]
    return [
        (
            "resource use",
            f"CPU efficiency {_eff(u.get('cpu_efficiency'))} (lowest rank), peak memory "
            f"{_mb(u.get('max_rss_bytes'))} (largest rank); measured by the ranks",
        )
    ]


def print_detail(con, views: Sequence[JobView], source: states.Answer) -> None:
    for v in views:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for label, text in detail_lines(v):
            # labels too: a rank's number comes from its report ("rank 0"), which the program can rewrite
            grid.add_row(escape(_printable(label)), escape(_printable(text)))
        con.print(Panel(grid, title=f"job {v.id}", expand=False))
        for note in v.notes:
            con.print(f"[yellow]warning:[/] {escape(_printable(note))}", highlight=False)
        tb = dict(v.outputs).get("TensorBoard")
        if tb:
            con.print(
                f"view the curves: tensorboard --logdir {escape(tb)}",
                highlight=False,
                soft_wrap=True,
            )
    if not source.answered:
        con.print(
            f"[yellow]warning:[/] Slurm could not be asked ({escape(one_line(source.error))}). Fix: hpcqa doctor",
            highlight=False,
        )


def _printable(text: str) -> str:
    """A detail line as a terminal should get it: what the job folder's files held (a rank's host, its error, a
    warning) can carry escape sequences; each control character but the line break is spelled out, not sent."""
    return shown_lines(str(text))


def _by_the_cancel(record: Failure) -> bool:
    """A rank's end that a cancel causes: Ctrl-C / SIGINT (KeyboardInterrupt), or killed by SIGINT/TERM/KILL."""
    return failures.by_an_interrupt(record.error)


def _preload_rows(v: JobView) -> list[tuple[str, str]]:
    """What each node's ranks preloaded, found there (not on the submit host): one line per distinct answer."""
    seen: dict[str, list[str]] = {}
    for rep in v.ranks:
        if rep.preload:
            text = "; ".join(
                f"{name} {path}" if path else f"{name} not found"
                for name, path in rep.preload.items()
            )
            seen.setdefault(text, []).append(rep.host or "?")
    return [
        ("preloaded", f"{text} (on {', '.join(sorted(set(hosts)))})")
        for text, hosts in seen.items()
    ]


def _failure_rows(v: JobView) -> list[tuple[str, str]]:
    """The first failing rank and its error; for a cancelled job, the ranks the cancel interrupted are not it."""
    rows, failed = [], v.failed
    if (
        v.state == State.CANCELLED
    ):  # the cancel itself stops the ranks: an interrupt then is not a failure
        stopped = [f for f in failed if _by_the_cancel(f)]
        failed = [f for f in failed if not _by_the_cancel(f)]
        if stopped:
            rows.append(("stopped", f"{len(stopped)} rank(s) stopped by the cancel"))
    if failed:
        f = failed[0]
        rows.append(("first failure", f"rank {f.rank} on {f.host or '?'}: {f.error}"))
        tail = failures.error_first(list(f.stderr_tail))[:8]
        if tail:
            rows.append(("its stderr", "\n".join(line[:200] for line in tail)))
    return rows


def _command_rows(v: JobView) -> list[tuple[str, str]]:
    """A user command's job: what ran, where, as submitted; the metrics it wrote to HPCQA_RESULTS."""
    rep = next((r for r in v.ranks if r.command is not None), None)
    res = v.results
    argv = (res.command if res else None) or (rep.command if rep else None)
    if not argv:
        return []
    work = (res.work if res else None) or (rep.work if rep else None)
    where = (
        f"in a copy of {work.dir} (snapshot {work.snapshot}, verified)"
        if work and work.snapshot
        else f"in {(work.run_in if work else None) or 'the image default folder'}"
    )
    rows = [("command", command.display(list(argv))[:400] + "\n" + where)]
    if res and res.metrics:
        rows.append(("metrics", report.metrics_text(res.metrics, 12)[:400]))
    if res and res.metrics_error:
        rows.append(("metrics", res.metrics_error[:200]))
    return rows


def _comm_rows(res: Results) -> list[tuple[str, str]]:
    """What DDP all-reduced per step and how much the backward hid; for a `tune --comm` job, the link."""
    link = res.link
    if link and link.bandwidth_Bps:
        return [
            (
                "link",
                f"{8 * link.bandwidth_Bps / 1e6:.1f} Mbit/s, latency {1e6 * (link.latency_s or 0):.0f} us "
                f"({res.backend}, all-reduce among {link.nodes} nodes)",
            )
        ]
    comm = res.comm
    if not comm or not comm.bucket_bytes:
        return []
    text = (
        f"{(comm.grad_bytes or 0) / 1e6:.1f} MB of gradients per step in {len(comm.bucket_bytes)} bucket(s)"
        + (" (as DDP would build them: one rank)" if comm.planned else "")
        + (
            f", sent in {comm.compress} ({sum(comm.wire_bucket_bytes) / 1e6:.1f} MB)"
            if comm.compress in ("fp16", "bf16")
            else ""
        )
    )
    if comm.allreduce_s:
        exposed = comm.exposed_s or 0
        hidden = max(1 - exposed / comm.allreduce_s, 0)
        text += (
            f"; {comm.allreduce_s:.3f} s alone, {exposed:.3f} s exposed "
            f"({100 * hidden:.0f} % hidden behind the backward)"
        )
    return [("all-reduce", text)]


WEIGHTS = {  # results.json bf16_weights.mode (train.bf16_weights): the weights' precision, as the recipe row says it
    "master": "bf16 weights, fp32 masters",
    "autocast": "fp32 weights, bf16 autocast",
    "fp32": "fp32 weights",
}


def _recipe_rows(res: Results) -> list[tuple[str, str]]:
    """The step's recipe: the attention (the fused kernel, or why not), the dropout (model.attention, model.dropout,
    model.*_dropout), the weights' precision (train.bf16_weights) and the allocator."""
    rec, weights = res.step_recipe, res.bf16_weights

    def rate(x: float | None) -> str:
        return "none" if x is None else f"{x:g}"

    parts = []
    if rec is not None and rec.attention is not None:
        fallback = rec.attention_fallback
        parts += [
            f"attention {rec.attention[:40]}"
            + (f" (not the fused kernel: {textwrap.shorten(fallback, 60)})" if fallback else "")
            + f", {str(rec.dropout_masks)[:10]} dropout masks",
            f"dropout {rate(rec.attention_dropout)} on attention, {rate(rec.hidden_dropout)} on hidden states",
        ]
    if weights is not None and weights.mode is not None:
        parts.append(WEIGHTS.get(weights.mode, f"weights {weights.mode[:20]}"))
    if not parts:
        return []
    if res.allocator:
        parts.append(f"allocator {res.allocator[:20]}")
    return [("recipe", "; ".join(parts))]


STEP_PARTS = {  # the step's split (results.json step_split_s): forward+backward split into its compute and the
    # all-reduce it did not hide when "compute" is there
    True: {
        "compute": "compute",
        "allreduce_exposed": "exposed all-reduce",
        "optimizer": "optimizer",
        "other": "scheduler etc.",
        "data_wait": "waiting for data",
    },
    False: {
        "forward_backward": "forward+backward (with the all-reduce)",
        "optimizer": "optimizer",
        "other": "scheduler etc.",
        "data_wait": "waiting for data",
    },
}


def _efficiency_rows(v: JobView) -> list[tuple[str, str]]:
    res = v.results
    if res is None:
        return []
    rows = []
    known = {k: x for k, x in res.step_split_s.items() if x is not None}
    names = STEP_PARTS["compute" in known]
    total = sum(known[k] for k in names if k in known)
    if known and total > 0:
        rows.append(
            (
                "step",
                f"{total:.3f} s: "
                + ", ".join(
                    f"{names[k]} {100 * known[k] / total:.0f} %" for k in names if k in known
                ),
            )
        )
    rows += _recipe_rows(res) + _comm_rows(res)
    eff = res.efficiency
    peak = [("peak", eff.peak_taken)] if eff and eff.peak_taken else []
    if eff and eff.mfu_unreliable:
        bad = eff.mfu_unreliable
        return rows + [("efficiency", f"MFU not given: {bad.why}; {bad.fix}"), *peak]
    if eff is None or eff.mfu is None or eff.achieved_flops is None or eff.peak_flops is None:
        return rows + peak
    tokens = eff.tokens
    all_tokens = (
        f"; on all tokens {100 * eff.mfu_all_tokens:.1f} % ({100 * tokens.padding_share:.0f} % "
        f"padding, {tokens.text_per_sample:.0f} of {tokens.all_per_sample:.0f} tokens per sample "
        "carry text)"
        if eff.mfu_all_tokens is not None and tokens
        else ""
    )
    return rows + [
        (
            "efficiency",
            f"MFU on text tokens {100 * eff.mfu:.1f} %: {eff.achieved_flops / 1e9:.2f} "
            f"of {eff.peak_flops / 1e9:.1f} GFLOP/s ({eff.precision} matmul peak measured on "
            f"{len(eff.peak_flops_per_rank)} rank(s), {eff.peak_source}); "
            f"{(eff.model_flops_per_sample or 0) / 1e9:.2f} GFLOP per sample{all_tokens}",
        ),
        *peak,
    ]
