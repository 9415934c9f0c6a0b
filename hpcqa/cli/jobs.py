"""Verbs about submitted jobs: status, logs, cancel, the registry, a sweep's results."""

from __future__ import annotations

import argparse
import codecs
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hpcqa import errors
from hpcqa.cli import statusview
from hpcqa.cli.console import Console
from hpcqa.cli.outfile import PLOT_SUFFIXES, output_target
from hpcqa.cli.say import say, tell, warn
from hpcqa.core import states, values
from hpcqa.core.search import shown_params
from hpcqa.core.states import State
from hpcqa.errors import HpcqaError, RegistryError, UsageError
from hpcqa.executors import cancel, jobs
from hpcqa.executors.cancel import chosen
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import logtail, registry, registryfix, results, scalingruns
from hpcqa.record.jobdir import JobDir
from hpcqa.text import plural


def cmd_status(args: argparse.Namespace) -> int:

    reg, slurm = registry.Registry(args.registry, create=False), Slurm()
    unreachable_since = None
    while True:
        views, source = (
            jobs.collect(reg, slurm, args.jobs, args.all) if reg.exists else ([], states.NOBODY)
        )
        if args.jobs and not views:
            raise registry.not_found(args.jobs, reg.path)
        if args.json:
            print(json.dumps([v.to_json() for v in views], indent=2, default=str))
        else:
            if args.watch:
                if source.answered:
                    unreachable_since = None
                elif unreachable_since is None:
                    unreachable_since = time.strftime("%H:%M:%S")
                _watch_header(unreachable_since)
            print_status(views, source, reg.path, args.jobs, wide=args.wide)
        if reg.damaged:
            warn(
                f"{len(reg.damaged)} damaged row(s) in {values.shown(reg.path)} skipped (hpcqa registry check names them; "
                "hpcqa registry recover keeps the rest)"
            )
        if not args.watch or all(states.is_final(v.state) for v in views):
            return 0
        time.sleep(WATCH_S)


WATCH_S = 5


def _watch_header(unreachable_since: str | None) -> None:
    """--watch: each refresh says when it was taken, and that Slurm is not answering, since when."""

    con = Console()
    if con.is_terminal:
        con.clear()
    line = f"hpcqa status at {time.strftime('%H:%M:%S')}, every {WATCH_S} s (Ctrl-C stops)"
    if unreachable_since:
        line += f"; Slurm not answering since {unreachable_since}, still asking"
    con.print(line, style="bold", highlight=False)


def print_status(
    views, source: states.Answer, path, asked: list[str] | None = None, wide: bool = False
) -> None:
    """The detail view for the jobs asked for by id (a sweep task, 900_1, is a job too); the list otherwise, and
    for a whole sweep (its tasks listed under it)."""

    con = Console()
    whole_sweep = any(v.sweep_id and v.sweep_id in (asked or []) for v in views)
    if asked and views and not whole_sweep:
        statusview.print_detail(con, views, source)
    else:
        statusview.print_list(con, views, source, path, expand=bool(asked), wide=wide)


def find_job(reg_path, job_id: str):
    reg = registry.Registry(reg_path, create=False)
    return reg, chosen(reg, [job_id], None)[0]


def cmd_logs(args: argparse.Namespace) -> int:
    reg, row = find_job(args.registry, args.job)
    jd = JobDir(Path(row.folder))
    if not jd.path.is_dir():
        raise UsageError(
            f"job {row.id}'s folder {jd.path} is gone (deleted or moved): its logs went with it",
            "hpcqa status JOB shows what the registry and Slurm still know",
        )
    rank = args.rank
    if rank is None:
        failed = jd.failed_ranks()
        rank = failed[0].rank if failed else 0
        if failed:
            print(
                errors.for_terminal(
                    f"first failure: rank {rank} on {failed[0].host}: {failed[0].error}"
                ),
                file=sys.stderr,
            )
    if not 0 <= rank < row.world_size:
        raise UsageError(
            f"job {row.id} has ranks 0-{row.world_size - 1}, not {rank}",
            "pass --rank N in that range",
        )
    stream = "out" if args.stdout else "err"
    if jd.log(rank, stream) is None and not args.follow:
        raise UsageError(
            f"no log for rank {rank} in {jd.path} yet", "the job may still be pending; try -f"
        )
    _follow(reg, row, jd, rank, stream, args)
    return 0


def _follow(reg: Any, row: Any, jd: Any, rank: int, stream: str, args: argparse.Namespace) -> None:
    """Print the log (from the current attempt's start, or its last N lines); with -f, what is appended, until the
    job is final -- and then what was written before it ended."""

    pos, slurm, first, printed = 0, Slurm(), True, 0
    shown = logtail.for_terminal if sys.stdout.isatty() else str
    decode = codecs.getincrementaldecoder("utf-8")(
        errors="replace"
    ).decode  # a character split across reads
    while True:
        final = False
        if args.follow:  # asked before reading, so that the last read comes after the end
            views, _ = jobs.collect(reg, slurm, [row.id])
            final = bool(views) and states.is_final(views[0].state)
        path = jd.log(rank, stream)
        if path:
            try:
                log = logtail.open_log(path)
            except OSError as e:
                raise UsageError(
                    f"rank {rank}'s log {path} cannot be read: {e.strerror}",
                    "hpcqa reads only the regular files a job writes; look at the folder by hand",
                ) from None
            with log as f:
                if (
                    first
                ):  # from the end, in bounded memory: the current attempt's start, its last N lines
                    pos = logtail.start_offset(f, args.lines, args.all_attempts)
                    first = f.seek(0, 2) == 0
                f.seek(pos)
                for block in iter(lambda: f.read(logtail.BLOCK), b""):
                    pos += len(block)
                    printed += len(block)
                    sys.stdout.write(shown(decode(block)))
            sys.stdout.write(shown(decode(b"", final=final or not args.follow)))
            sys.stdout.flush()
        if not args.follow or final:
            if not printed and stream == "err":
                print(
                    f"hpcqa: rank {rank}'s stderr has nothing to show; its stdout: hpcqa logs {row.id} --rank "
                    f"{rank} --stdout",
                    file=sys.stderr,
                )
            return
        time.sleep(1)


def cmd_cancel(args: argparse.Namespace) -> int:
    reg = registry.Registry(args.registry, create=False)
    for line in cancel.cancel(cancel.chosen(reg, args.jobs, args.task), args.task is None, Slurm()):
        tell(line)
    return 0


def cmd_registry(args: argparse.Namespace) -> int:
    if args.action == "recover":
        path = registry.resolve_path(args.registry)
        try:
            jobs, verdict = registry.Registry(path, create=False).check()
            if verdict in ("ok", "no registry yet"):
                tell(f"{values.shown(path)}: readable, {jobs} job(s), nothing to recover")
                return 0
        except HpcqaError as e:
            if "is not an hpcqa job registry" in e.message:
                raise
        new, aside, n, bad = registryfix.recover(path)
        tell(
            f"{values.shown(new)}: fresh registry with {n} job(s) read back"
            + (f", {bad} damaged row(s) left out" if bad else "")
            + f"; the damaged file is kept as {values.shown(aside)}"
        )
        return 0
    reg = registry.Registry(args.registry, create=False)
    jobs, verdict = reg.check()
    if verdict not in ("ok", "no registry yet"):
        raise RegistryError(
            f"job registry {values.shown(reg.path)}: SQLite integrity check: {verdict}",
            f"hpcqa registry recover --registry {values.shown(reg.path)}",
        )
    tell(f"{values.shown(reg.path)}: {verdict}, {jobs} job(s)")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    output_target(
        args.plot,
        ((registry.resolve_path(args.registry), "the job registry"),),
        PLOT_SUFFIXES,
        "--plot",
    )
    reg = registry.Registry(args.registry, create=False)
    if not reg.exists or not reg.jobs(sweep_id=args.sweep):
        task = next((j for j in reg.jobs([args.sweep]) if j.id == args.sweep and j.sweep_id), None)
        if task is not None:  # a trial's or a variant's own job id: its sweep is what results shows
            raise UsageError(
                f"{values.shown(args.sweep)} is a job of sweep {values.shown(task.sweep_id)}, not a sweep",
                f"hpcqa results {values.shown(task.sweep_id)} (hpcqa status {values.shown(args.sweep)}: the job)",
            )
        raise registry.not_found([args.sweep], reg.path, "sweep")
    views, _ = jobs.collect(reg, Slurm(), [args.sweep])
    views = [v for v in views if v.sweep_id == args.sweep]
    keys = []
    for v in views:
        keys += [k for k in (v.variant or {}) if k not in keys]
    table = results.rows(views, args.metric)
    if args.metric not in results.NUMERIC and not any(
        isinstance(r.get(args.metric), (int, float)) for r in table
    ):
        raise UsageError(
            f"no variant has a metric {args.metric!r}", f"use one of: {', '.join(results.NUMERIC)}"
        )
    sc = results.scaling(table)
    if args.plot:
        logs = _study_of(views).get("study", {}).get("log_keys", [])
        results.plot(table, keys, args.metric, str(args.plot), log_keys=logs)
        say(f"wrote {values.shown(args.plot)}")
    if args.json:
        print(
            json.dumps(
                {
                    "sweep": args.sweep,
                    "metric": args.metric,
                    "variants": table,
                    "scaling": sc,
                    **_study_of(views),
                },
                indent=2,
            )
        )
        return 0
    if args.csv:
        sys.stdout.write(results.to_csv(table, keys, args.metric))
        return 0
    con = Console()
    con.print(_fitted_table(con, args.sweep, args.metric, table, keys))
    for line in _model_lines(table) + _refused_lines(views):
        con.print(line, highlight=False, markup=False, soft_wrap=True)
    if sc:
        _print_scaling(con, reg, args.sweep, sc)
    return 0


def _study_of(views: list) -> dict:
    """A search's study (record/study.py), for --json; {} for a grid."""
    trial = next((v.results.trial for v in views if v.results and v.results.trial), None)
    if trial is None or not trial.study:
        return {}
    from hpcqa.record import study  # Optuna: only for a search's results

    return {"study": study.dump(trial.study, trial.storage)}


def _refused_lines(views: list) -> list[str]:
    """A search's trials that were asked and not run (their values do not go together, or are an ended trial's):
    they have no job to list."""
    trials = _study_of(views).get("study", {}).get("trials", [])
    return [
        f"trial {t['number']} not run ({shown_params(t['params'])}): {values.shown(t['refused'])}"
        for t in trials
        if t.get("refused")
    ] + [
        f"trial {t['number']} not run: the values of trial {t['repeat_of']}, whose outcome it was told "
        f"({t['state']}{_value(t.get('value'))})"
        for t in trials
        if t.get("repeat_of") is not None
    ]


def _value(v: object) -> str:
    return f" {v:.2f}" if isinstance(v, (int, float)) else ""


LEFT_OUT_FIRST = ("samp/s", "wall s", "EM")  # what gives way when the swept values would not fit


def _fitted_table(con: Any, sweep_id: str, metric: str, table: list[dict], keys: list[str]) -> Any:
    """The variants' table at the console's width: columns that rich would squeeze to nothing (the swept values,
    on 80 columns with a search's extra columns) make room by leaving out samp/s, wall s and EM in that order, said
    under the table (--json has them)."""
    for n in range(len(LEFT_OUT_FIRST) + 1):
        t = _variants_table(sweep_id, metric, table, keys, LEFT_OUT_FIRST[:n])
        if _least_width(t) <= con.width:
            break
    if not n:
        return t
    note = f"({', '.join(LEFT_OUT_FIRST[:n])} left out at {con.width} columns: --json has them)"
    return Group(t, Text(note))


def _least_width(t: Table) -> int:
    """The width the table needs with every column shown: its unwrapped columns whole, the others (the swept values)
    at their minimum width; between two columns a padding each side of the box's blank rule, and the box's edges.
    Rich would rather squeeze a column to nothing."""

    def whole(c: Any) -> int:
        return Text.from_markup(c).cell_len if isinstance(c, str) else 1

    widths = [
        max([whole(col.header), *map(whole, col.cells)]) if col.no_wrap else col.min_width or 1
        for col in t.columns
    ]
    return sum(widths) + 3 * (len(widths) - 1) + 2


def _title(sweep_id: str, metric: str, table: list[dict], search: bool) -> str:
    """'search 9: 5 trials (6 runs), sorted by f1 (* best)': a trial stopped and run again is two rows, one trial."""
    trials = len({r.get("trial") for r in table})
    counted = (
        plural(trials, "trial") + (f" ({len(table)} runs)" if trials != len(table) else "")
        if search
        else plural(len(table), "variant")
    )
    return f"{'search' if search else 'sweep'} {sweep_id}: {counted}, sorted by {metric} (* best)"


def _variants_table(
    sweep_id: str, metric: str, table: list[dict], keys: list[str], left_out: tuple = ()
) -> Table:
    """One row a variant, best first: its job id (an array's task is in it), the values swept, state and scores.
    Borderless and the numbers unwrapped, so that 80 columns show them whole (the swept values give way first)."""
    search = any(r.get("trial") is not None for r in table)
    t = Table(
        title=_title(sweep_id, metric, table, search),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    own = [] if metric in results.NUMERIC else [metric]  # a program's own metric (HPCQA_RESULTS)
    # SQuAD v2 data: F1 on the answerable and on the unanswerable questions apart (the official script's split)
    v2 = [k for k in ("HasAns_f1", "NoAns_f1") if any(k in r for r in table)]
    heads = {"HasAns_f1": "F1 has", "NoAns_f1": "F1 no"}  # HasAns_f1, NoAns_f1
    t.add_column("job", no_wrap=True)
    if search:
        t.add_column("trial", no_wrap=True, justify="right")
    for k in (
        keys
    ):  # headed by the key's last part (train.learning_rate: learning_rate); --json has them whole
        shown = max((len(repr(r["params"].get(k))) for r in table), default=6)
        t.add_column(k.rsplit(".", 1)[-1], overflow="fold", min_width=min(max(shown, 6), 12))
    t.add_column("state", no_wrap=True)
    trial_cols = ["steps", "node-h"] if search else []
    numbers = [*own, "EM", "F1", *(heads[k] for k in v2), "samp/s", "wall s", *trial_cols]
    for col in numbers:
        if col not in left_out:
            t.add_column(col, no_wrap=True, justify="right")
    f = lambda x, d=1: "-" if not isinstance(x, (int, float)) else f"{x:.{d}f}"  # noqa: E731
    for r in table:
        t.add_row(
            ("[bold green]*[/]" if r["best"] else " ") + escape(values.shown(r["id"])),
            *([f(r.get("trial"), 0)] if search else []),
            *[escape(_param(r["params"].get(k))) for k in keys],
            r["state"],
            *[
                cell
                for col, cell in zip(
                    numbers,
                    [
                        *[
                            f"{r.get(m):.4g}" if isinstance(r.get(m), (int, float)) else "-"
                            for m in own
                        ],
                        f(r["exact_match"]),
                        f(r["f1"]),
                        *(f(r.get(k)) for k in v2),
                        f(r["train_samples_per_second"]),
                        f(r["wall_time_s"], 0),
                        *([f(r.get("steps"), 0), f(r.get("node_hours"), 3)] if search else []),
                    ],
                )
                if col not in left_out
            ],
        )
    return t


def _param(v: object) -> str:
    """A swept value as the table shows it: floats a search drew to 4 significant digits (--json has them whole)."""
    return f"{v:.4g}" if isinstance(v, float) else repr(v)


def _model_lines(table: list[dict]) -> list[str]:
    """Where each variant's trained model is (train.save_model), best first: a path to copy, shortened to ~ or to the
    folder you ask from."""
    kept = [r for r in table if r.get("model")]
    if not kept:
        return []
    width = max(len(str(r["id"])) for r in kept)
    lines = ["trained models (AutoModelForQuestionAnswering.from_pretrained):"]
    for r in kept:
        mark = "best" if r["best"] else ""
        lines.append(
            f"  {mark:4}  job {values.shown(r['id']):{width}}  {values.shown(short_path(r['model']))}"
        )
    return lines


def short_path(path: str) -> str:
    """A path as the user would type it: relative to the current folder when inside it, else with ~ for home."""
    p = Path(path)
    for base, shown in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return shown + str(p.relative_to(base))
        except ValueError:
            continue
    return path


def _print_scaling(con: Console, reg, sweep_id: str, sc: list[dict]) -> None:
    """A sweep over cluster.nodes: each node count against 1 node, measured and predicted."""
    predicted, why = predicted_for_sweep(reg, sweep_id)
    s2 = Table(title="scaling vs 1 node")
    for col in ("nodes", "train samples/s", "speedup", "efficiency", "predicted steady samples/s"):
        s2.add_column(col)
    for r in sc:
        p = predicted.get(r["nodes"])
        s2.add_row(
            str(r["nodes"]),
            f"{r['train_samples_per_second']:.2f}",
            f"{r['speedup']:.2f}x",
            f"{100 * r['efficiency']:.0f} %",
            f"{p:.2f}" if p else "-",
        )
    con.print(s2)
    if why:
        con.print(why, style="dim", highlight=False)


def predicted_for_sweep(reg, sweep_id: str) -> tuple[dict[int, float], str]:
    """{nodes: predicted samples/s} from the sweep's smallest run and the stored link; or why there is none."""
    rows = reg.jobs(sweep_id=sweep_id)
    try:
        base = min((r for r in rows if r.state == State.COMPLETED), key=lambda r: r.nodes)
        table = scalingruns.study(rows, scalingruns.link_of_run(base))
    except (ValueError, UsageError) as e:
        return {}, f"no prediction: {e.message if isinstance(e, UsageError) else e}"
    return {r["nodes"]: r["predicted"] for r in table if r["predicted"]}, ""
