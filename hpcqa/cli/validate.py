"""The validate verb: configs checked, each of them (every variant of a sweep file); no rich, no torch -- it runs
wherever the config model imports."""

from __future__ import annotations

import argparse
import sys

from hpcqa import errors
from hpcqa.cli.say import tell, warn
from hpcqa.core import config, kinds, plan, sweep
from hpcqa.core.search import one_value_lines, shown_params
from hpcqa.errors import HpcqaError
from hpcqa.executors import hostprobe, tracking
from hpcqa.text import plural, shown


def cmd_validate(args: argparse.Namespace) -> int:
    found = hostprobe.extensions()  # asked once, for every config
    bad = 0
    for path in args.configs:  # every file is checked: one line each, exit 2 if any is bad
        try:
            raw = config.load_raw(path, args.overrides)
            host = plan.HostProbe(schedulers=frozenset({kinds.SlurmKind.name}))
            plans: tuple[plan.LaunchPlan, ...]
            spec = sweep.searched(raw, str(path)) if sweep.has_sweep(raw) else None
            if (
                spec is not None
            ):  # a search: every value a trial may get, validated; no study is asked
                sweep.check_space(raw, spec, str(path))
                for w in one_value_lines(spec):
                    warn(f"{shown(path)}: {w}")
                clash = sweep.clashes(raw, spec, host, str(path))
                if clash and clash[1]:
                    params, why = clash[1][0]
                    warn(
                        f"{shown(path)}: {len(clash[1])} of {plural(clash[0], 'combination')} of the searched "
                        f"lists do not go together (a trial drawing one is told FAIL), e.g. "
                        f"{shown_params(params)}: {why}"
                    )
                base = {k: v for k, v in raw.items() if k != "sweep"}
                lp = plan.build_plan(config.from_dict(base, source=str(path)), host)
                what = f"a {spec.strategy} search, {plural(spec.trials, 'trial')}, the base: "
                plans = (lp,)
            elif sweep.has_sweep(raw):
                # every variant of a [sweep] is validated as submit would, swept keys included
                sp = sweep.build(
                    raw,
                    str(path),
                    host,
                    lambda p: (sweep.DEFAULT_MAX_ARRAY_SIZE, "assumed: validate asks no scheduler"),
                )
                lp, what, plans = sp.plans[0], f"{len(sp.variants)} variants, the first: ", sp.plans
            else:
                lp, what = plan.build_plan(config.validate(raw, path, args.overrides), host), ""
                plans = (lp,)
            tracking.check(plans)  # mlflow installed here, a tracking server that answers
        except HpcqaError as e:
            print(errors.for_terminal(e.render()), file=sys.stderr)
            bad += 1
            continue
        cores = len(lp.local_ranks[0].compute)
        detail = (
            f"{what}{plural(lp.world_size, 'rank')} ({lp.nodes} x {lp.ranks_per_node}), "
            f"{plural(cores, 'compute core')} per rank"
        )
        name = shown(path)  # a file name no check refuses: its control characters spelled out
        line = f"ok  {name}: {detail}"
        # 80 columns: a long line goes on under the path, indented (the path stays whole, to copy)
        tell(line if len(line) <= 80 else f"ok  {name}:\n      {detail}")
        for w in plan.extension_warnings(lp.config, found):
            warn(w)
    if bad and len(args.configs) > 1:
        print(f"{bad} of {len(args.configs)} configs are not valid", file=sys.stderr)
    return 2 if bad else 0
