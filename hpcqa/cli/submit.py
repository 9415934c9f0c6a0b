"""`hpcqa submit`: the dry run (the plan, every rank, the script as it will be submitted) and the submission."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from hpcqa import api, modelcheck
from hpcqa.cli import report
from hpcqa.cli.console import Console
from hpcqa.cli.say import say, stop_like_ctrl_c, warn
from hpcqa.core import command, modelfacts, search, sweep
from hpcqa.core.topology import cpu_list
from hpcqa.errors import UsageError
from hpcqa.executors import searching, tracking
from hpcqa.record import manifest, registry
from hpcqa.record.jobdir import SUBMISSION, JobDir
from hpcqa.text import plural, shown


def _submission(path: str, overrides: list[str]) -> sweep.SweepPlan | None:
    """api.submission; None for a search that has asked all its trials: nothing to run is not bad input, said
    with how to go on, exit 0 (as make's "up to date")."""
    try:
        return api.submission(path, overrides)
    except searching.SearchDone as e:
        say(f"{e.message}: nothing to run")
        say(f"  to go on: {e.hint}")
        return None


def cmd_submit(args: argparse.Namespace) -> int:

    # a closed terminal (SIGHUP) or a runner stopping us (SIGTERM) is a Ctrl-C: a local job stops every rank, a
    # Slurm job keeps running and we stop watching it. Not a SIGHUP we were told to ignore (`nohup hpcqa submit`):
    # that job is meant to outlive the terminal.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, stop_like_ctrl_c)
    if args.json and not args.dry_run:
        raise UsageError(
            "--json prints the dry run's plan; a real submit prints the job id",
            "add --dry-run (or drop --json)",
        )
    overrides = args.overrides + (
        [f"job.registry={json.dumps(args.registry)}"] if args.registry else []
    )
    sp = _submission(args.config, overrides)
    if sp is None:
        return 0
    for w in search.one_value_lines(sp.search) if sp.search else []:
        warn(w)
    ex, request = api.dry_run(sp, snapshot=not args.no_snapshot)
    if args.check:
        ok, answer = ex.check(request)
        if not ok:
            raise UsageError(
                f"{ex.scheduler or 'submit'} would refuse this request: {answer}",
                "fix the key it names (cluster.partition, account, qos, time_limit_min, nodes ...); "
                "nothing was queued",
            )
        print(f"{ex.scheduler} would accept it: {answer}" if ex.scheduler else answer)
        return 0
    if args.dry_run:
        refusal = api.would_refuse(request.sweep)
        print_request(ex, request, args.json, refusal)
        if refusal and not args.json:  # --json carries both in its plan
            warn(
                f"submit here would refuse it: {refusal.message}"
                + (f"\n  fix: {refusal.hint}" if refusal.hint else "")
            )
        return 0
    done = api.submit_request(ex, request, say=say, warn=warn)
    registry_note(request.sweep.plans[0].config.job.registry)
    if done.sweep_id:
        if not ex.runs_here:
            print(done.sweep_id)
        return done.exit_code
    if args.no_wait:
        if ex.runs_here:
            say(
                f"  runs on in the background: hpcqa status {done.ids[0]} / hpcqa logs {done.ids[0]} -f / "
                f"hpcqa cancel {done.ids[0]}"
            )
        print(done.ids[0])
        return 0
    with report.progress_bar(f"job {done.ids[0]}") as show:
        outcome = ex.wait(done, show)
    return report.finish(outcome, done.request.sweep.plans[0], say)


def registry_note(chosen: str) -> None:
    """A registry that is not the user's default is said, with what status, logs and cancel need to find it."""
    reg, how = registry.chosen_by(chosen)
    if how != "your default":
        say(
            f"  registry {shown(reg)} ({how}; not your default: status, logs and cancel need "
            + (
                "the same $HPCQA_REGISTRY)"
                if how[0] == "$"
                else f"--registry {shown(shlex.quote(str(reg)))})"
            )
        )


def print_request(ex: Any, request: Any, as_json: bool, refusal: Any = None) -> None:
    """`submit --dry-run`: the request `submit` would be given (plan, files, scripts, commands), nothing run; and
    what submit would refuse it for on this machine (a missing data file, a model not in the cache ...)."""
    sp = request.sweep
    if as_json:
        out = sp.plans[0].to_json()
        out["would_refuse"] = {"error": refusal.message, "fix": refusal.hint} if refusal else None
        out["plan_digest"] = sp.plans[0].digest
        scripts = list(request.scripts) or None
        out["sbatch"] = scripts[0] if scripts and not sp.is_sweep else scripts
        out["request"] = request.to_json()
        out["submission"] = request.submission
        reg, how = registry.chosen_by(sp.plans[0].config.job.registry)
        out["registry"] = {"path": str(reg), "chosen_by": how}
        out["tracking"] = tracking.where(sp.plans[0])
        if sp.is_sweep:
            out["sweep"] = sp.to_json()
        print(json.dumps(out, indent=2, sort_keys=True))
    elif sp.is_sweep:
        print_sweep(ex, request)
    else:
        print_plan(ex, request)


def print_sweep(ex: Any, request: Any) -> None:

    sp = request.sweep
    con = Console()
    keys = sweep.swept_keys(list(sp.variants))
    known = sp.max_array_size_known
    assumed = known.startswith("assumed")
    limit = f"MaxArraySize {sp.max_array_size}" + (
        " assumed: Slurm could not be asked" if assumed else ""
    )
    shape = (
        "one after another, on this machine"
        if ex.runs_here
        else f"{plural(len(sp.arrays), 'array')} ({limit}; parallelism {sp.parallelism or 'unlimited'})"
    )
    what = "trial" if sp.search else "variant"
    n = plural(len(sp.variants), what) + (" of the next batch" if sp.search else "")
    t = Table()
    t.add_column("trial" if sp.search else "#", no_wrap=True)
    for key in keys:  # the whole key, wrapped at its dots and underscores rather than cut
        t.add_column(key.replace(".", ".\n"), overflow="fold")
    t.add_column("ranks", no_wrap=True)
    several = len(sp.arrays) > 1
    if several:
        t.add_column("array", no_wrap=True)
    array_of = {v.index: n for n, a in enumerate(sp.arrays) for v in a.variants}

    for v, p in list(zip(sp.variants, sp.plans))[:50]:
        t.add_row(
            str(v.index),
            *[swept_value(v.config, k, bool(sp.search)) for k in keys],
            str(p.world_size),
            *([str(array_of[v.index])] if several else []),
        )
    if sp.search:
        search_lines(con, sp, ex.runs_here)
    # the title as a line of its own: rich would wrap it to the table's width, centred
    con.print(f"sweep: {n}, {shape} -- dry run, nothing submitted", highlight=False, markup=False)
    con.print(t)
    if len(sp.variants) > 50:
        con.print(f"... and {len(sp.variants) - 50} more {what}s (--json lists them all)")
    if sent := tracking.describe(sp.plans[0], sweep=True):
        con.print(f"tracking: {shown(sent)}", highlight=False, markup=False)
    if ex.runs_here:
        then = "; then the next batch is asked of the study, until all trials have run"
        con.print(
            f"local executor: the {n} run{' one after another' * (len(sp.variants) > 1)}{then * bool(sp.search)}"
            if len(sp.variants) > 1
            else f"local executor: the {what} runs here{then * bool(sp.search)}"
        )
        return
    if assumed:
        con.print(f"MaxArraySize {known}", style="dim", highlight=False)
    for i, (a, argv, line) in enumerate(zip(sp.arrays, request.commands, sp.array_lines())):
        con.print(
            f"array {i}: {plural(len(a.variants), 'task')}, {line}: {' '.join(argv)}",
            highlight=False,
        )
    if request.scripts:
        print_script(con, request.scripts[0], "sbatch script of array 0 (as it will be submitted)")


def swept_value(cfg: Any, key: str, drawn: bool) -> str:
    """A swept key's value as the dry run's table shows it, read from the variant's config (a nested key such as
    launch.env.NAME too): text and booleans as TOML writes them, a float a search drew to 4 significant digits
    (--json has it whole)."""
    v: Any = cfg.to_dict()
    for part in key.split("."):
        v = v.get(part, "-") if isinstance(v, dict) else "-"
    if isinstance(v, float) and drawn and len(repr(v)) > 8:
        return f"{v:.4g}"
    return shown(json.dumps(v) if isinstance(v, (str, bool)) or v is None else repr(v))


def search_lines(con: Any, sp: Any, runs_here: bool) -> None:
    """What a search will do: how it searches, where its study is, what the study holds already."""
    spec, ref = sp.search, sp.plans[0].trial
    con.print(
        f"search {ref.study}: {spec.strategy}, {plural(spec.trials, 'trial')} in batches of {spec.parallelism}, "
        f"{spec.direction} {spec.metric}, pruner {spec.pruner}"
        f"{f' from step {spec.pruner_warmup}' if spec.pruner_warmup else ''}"
        f"{f' once {spec.pruner_min_trials} completed trials reach a step' if spec.pruner_min_trials != 1 else ''}"
        f", seed {spec.seed}",
        highlight=False,
    )
    for d in spec.space:
        con.print(f"  {d.key}: {d.shown()}", highlight=False)
    had = f"resumes it: {plural(sp.resumed, 'trial')} asked before" if sp.resumed else "a new study"
    con.print(f"  study {ref.storage} ({had})", highlight=False)
    for line in searching.refused_lines(sp, dry=True):
        con.print(f"  {line}", highlight=False, markup=False)
    if not runs_here:
        con.print(
            "  after each batch a follow-up job (1 CPU, --dependency=afterany on the batch's arrays) tells the "
            "study how each trial ended and submits the next batch (its log: <job root>/search/follow-up.log)",
            highlight=False,
        )


def batches_line(cfg: Any) -> str:
    """How the features are batched and padded (hpcqa.rank.train.batching), in a line."""
    t, d = cfg.train, cfg.data
    size = f"{t.per_device_train_batch_size} per rank"
    if d.pad_to_max_length:
        return f"{size}, each feature padded to {t.max_seq_length} (data.pad_to_max_length, as run_qa.py)"
    grouped = "length-grouped, ranks in lockstep" if d.group_by_length else "random"
    multiple = f" to a multiple of {d.pad_to_multiple_of}" if d.pad_to_multiple_of > 1 else ""
    return f"{size}, {grouped}; padded per batch{multiple} (max {t.max_seq_length})"


def program_env(lp: Any, job: str) -> str:
    """What a user command gets besides the ranks' variables (hpcqa.rank.command sets them at the rank)."""
    jd = JobDir(Path(job))
    lines = [
        f"HPCQA_JOB_DIR={job}",
        f"HPCQA_CHECKPOINT_DIR={jd.checkpoints} (every attempt's)",
        "HPCQA_ATTEMPT=0 (1 after the first requeue ...), HPCQA_RESUMING=0|1",
        f"HPCQA_RESULTS={jd.command_results} (rank 0 may write metrics there)",
        f"TORCHELASTIC_RESTART_COUNT=HPCQA_ATTEMPT, TORCHELASTIC_MAX_RESTARTS={lp.config.cluster.max_requeues}",
        *(f"{k}={v}" for k, v in command.sweep_env(lp.variant).items()),
        "notices (SIGTERM, the requeue signal) reach the program's process group as SIGTERM",
    ]
    return "\n".join(lines)


def step_lines(cfg: Any, world: int) -> list[str]:
    """How the training step computes: attention, dropout, and what the config changes beyond run_qa.py's step."""
    tc, mc = cfg.train, cfg.model
    attn, why, _ = modelfacts.attention_prediction(
        modelcheck.model_type(cfg), mc.attention, tc.compile
    )
    masks = "bulk-drawn" if mc.dropout in ("auto", "bulk") else "bernoulli_"
    drops = [
        f"{kind} {getattr(mc, kind + '_dropout')}"
        for kind in ("attention", "hidden")
        if getattr(mc, kind + "_dropout") != "model"
    ]
    # predicted from the model's type; the rank records what ran (results: step_recipe)
    out = [
        f"attention {attn} ({why}; model.attention = {mc.attention}), {masks} dropout masks "
        f"(model.dropout = {mc.dropout})"
    ]
    if drops:
        out.append("dropout " + ", ".join(drops) + ": a different recipe from the model's")
    if tc.compile:
        out.append(
            "torch.compile with Inductor (train.compile): the first steps compile, kernels sum in another "
            "order"
        )
    if tc.ddp_compress != "none":
        out.append(
            f"gradients all-reduced in {tc.ddp_compress} (train.ddp_compress): half the bytes on the link, "
            "the sums rounded to 16 bits"
            + ("; one rank: nothing is all-reduced" if world == 1 else "")
        )
    return out


def _cell(value: Any) -> str:
    """A value from a config, a store or a path, as a panel cell shows it: control characters spelled out, rich's
    markup escaped (a `[/]` in a path or a store's summary is text, never markup)."""
    return escape(shown(str(value)))


def builtin_rows(res: Any, lp: Any) -> None:
    """The built-in trainer's rows: model and data, batching, what is staged."""
    m = lp.config.model.name_or_path
    d = lp.config.data.dataset or lp.config.data.train_file
    res.add_row("job", _cell(f"{m} on {d}"))
    res.add_row("batches", batches_line(lp.config))
    res.add_row("step", "\n".join(step_lines(lp.config, lp.world_size)))
    staged = manifest.check(lp.config)
    if staged["manifest"]:
        res.add_row(
            "staged",
            "\n".join(
                f"{k}: {state} ({_cell(detail)})" for k, (state, detail) in staged["items"].items()
            )
            + "\nchecked again by submit before queueing",
        )
    else:
        res.add_row(
            "staged",
            f"nothing: no manifest {_cell(manifest.manifest_path(lp.config))} (`hpcqa stage CONFIG` "
            "puts model, data and features in the shared caches for offline nodes)",
        )


def print_plan(ex: Any, request: Any) -> None:
    con = Console()
    lp = request.sweep.plans[0]
    con.print(
        Panel(
            plan_table(ex, request), title="hpcqa plan (dry run: nothing submitted)", expand=False
        )
    )
    for w in lp.warnings:
        print_warning(con, "warning:", w)
    for w in request.notes:
        print_warning(con, "warning (this node):", w)
    for w in api.scaling_notes([lp]):
        print_warning(con, "warning (prediction):", w)
    print_ranks(con, lp)
    if request.scripts:
        print_script(con, request.scripts[0], "sbatch script (as it will be submitted)")
        con.print("submitted with: " + " ".join(request.commands[0]), highlight=False)


def plan_table(ex: Any, request: Any) -> Any:
    """The dry run's panel: the job as a whole (config, executor, ranks, backend, folder, registry, ...)."""
    lp = request.sweep.plans[0]
    c = lp.config.cluster
    res = Table.grid(padding=(0, 2))
    res.add_column(no_wrap=True)
    res.add_column(
        overflow="fold"
    )  # paths are folded, never cut: the dry run shows what will happen
    res.add_row("config", escape(shown(lp.config.source)))  # a file name no check refuses
    res.add_row(
        "executor",
        f"{lp.executor}"
        + (f" (cluster.executor = {c.executor})" if c.executor != lp.executor else "")
        + f"; submitted by {request.via}",
    )
    dom = lp.config.launch.rank_domain
    res.add_row(
        "ranks",
        f"{lp.world_size} = {lp.nodes} node(s) x {lp.config.domains_per_node} {dom}(s) x "
        f"{lp.ranks_per_domain} rank(s) per {dom}",
    )
    res.add_row("layout", _cell(lp.layout_source))
    res.add_row(
        "per rank",
        f"{lp.cpus_per_task} CPUs allocated, {len(lp.local_ranks[0].compute)} compute "
        f"cores, {len(lp.local_ranks[0].ccl)} CCL cores",
    )
    res.add_row("ddp backend", _cell(f"{lp.backend.resolved} ({lp.backend.reason})"))
    res.add_row("python", _cell(lp.python))
    if c.setup:
        res.add_row(
            "setup",
            escape("\n".join(c.setup))
            + (
                ""
                if not ex.runs_here
                else "\n(Slurm jobs and rendered scripts only: the local "
                "executor runs in this shell's environment)"
            ),
        )
    for k, v in request.facts:
        res.add_row(k, escape(v))
    for k, v in lp.deferred_env.items():
        res.add_row(_cell(k), _cell(v))
    folder = lp.job_dir_pattern.replace(SUBMISSION, request.submission)
    res.add_row("job folder", _cell(folder) + "  (%j = job id; the rest: this submission's token)")
    reg, how = registry.chosen_by(lp.config.job.registry)
    res.add_row("registry", escape(f"{shown(reg)}  ({how})"))
    if sent := tracking.describe(lp):
        res.add_row("tracking", _cell(sent))
    if lp.command:
        res.add_row("program env", escape(program_env(lp, folder)))
    else:
        builtin_rows(res, lp)
    return res


def print_warning(con: Any, label: str, text: str) -> None:
    """A warning wrapped under its own first word (a hanging indent, as render's), its text shown as it is (never
    read as rich markup: a config value in brackets stays)."""
    if len(label) + 1 + len(text) <= con.width:
        con.print(Text.assemble((label, "yellow"), " ", text), highlight=False)
        return
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="yellow")
    grid.add_column()
    grid.add_row("warning:", Text(text))
    if label != "warning:":
        grid.add_row("", Text(label.removeprefix("warning ").rstrip(":"), style="dim"))
    con.print(grid, highlight=False)


def env_line(name: str, value: str, width: int = 46) -> str:
    """NAME=value in the ranks table; a pair wider than the column goes on with the value on its own indented
    line, so the value is folded only when it alone is wider (KMP_AFFINITY's proclist stays one token)."""
    pair = f"{name}={value}"
    return pair if len(pair) <= width else f"{name}=\n  {value}"


def print_script(con: Any, script: str, title: str) -> None:
    """A script as it will be submitted, between two rules: its lines are never wrapped or framed by hpcqa (a long
    line is the terminal's to wrap), so what is copied from the screen is the script."""
    con.rule(title, style="dim")
    con.print(script.rstrip("\n"), markup=False, highlight=False, soft_wrap=True, emoji=False)
    con.rule(style="dim")


def ranges_in(value: str) -> str:
    """Runs of 4+ comma-separated CPU numbers shown as ranges (0,1,2,...,55 -> 0-55): the human view only."""

    return re.sub(
        r"\d+(?:,\d+){3,}", lambda m: cpu_list(int(x) for x in m.group(0).split(",")), value
    )


TORCHRUN_ALIASES = ("GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME")


def print_ranks(con: Any, lp: Any) -> None:
    """Every node runs the same local ranks: one row per local rank (its global ranks follow from the node), CPU
    lists as ranges. `--json` has every rank's exact values."""

    # what follows from the row, and torchrun's aliases (GROUP_RANK = NODE_RANK ...): the note below names them
    derived = {"RANK", "NODE_RANK", *TORCHRUN_ALIASES}
    common = {k: v for k, v in lp.ranks[0].env.items() if k not in TORCHRUN_ALIASES}
    for r in lp.ranks[1:]:
        common = {k: v for k, v in common.items() if r.env.get(k) == v}
    if common:
        t = Table(title="environment shared by every rank", show_header=False)
        t.add_column("name", no_wrap=True)
        t.add_column("value", overflow="fold")
        for k, v in common.items():
            t.add_row(k, ranges_in(v))
        con.print(t)
    ppn = lp.ranks_per_node
    t = Table(
        title=f"ranks: RANK = NODE_RANK x {ppn} + LOCAL_RANK on each of {lp.nodes} nodes"
        if lp.nodes > 1
        else "ranks"
    )
    for col in ("local", "ranks", "CPUs"):
        t.add_column(col, no_wrap=True)
    t.add_column("environment of this local rank", overflow="fold")
    for r in lp.ranks[:ppn]:
        ranks = [str(r.rank + n * ppn) for n in range(lp.nodes)]
        shown = ",".join(ranks) if len(ranks) <= 4 else f"{ranks[0]},{ranks[1]},…,{ranks[-1]}"
        own = "\n".join(
            env_line(k, ranges_in(v))
            for k, v in r.env.items()
            if k not in common and k not in derived
        )
        t.add_row(str(r.local_rank), shown, cpu_list(r.cpus) if r.cpus else "unbound", Text(own))
    con.print(t)
    con.print(
        "CPU lists as ranges; torchrun's GROUP_*/ROLE_* too; --json: every rank's exact values.",
        style="dim",
        highlight=False,
    )
