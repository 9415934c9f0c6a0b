"""`[sweep]` -> validated variants -> Slurm arrays. Pure.

    [sweep]
    parallelism = 2                                   # the array's %N throttle
    train.learning_rate = [3e-5, 5e-5]                # grid axes: any config key, a list of values
    train.per_device_train_batch_size = [12, 32]

    [[sweep.variants]]                                # extra combinations a grid can't express
    train.learning_rate = 1e-4
    cluster.nodes = 2

Variants = the grid's product (in key order, last key fastest), then the explicit variants; each
is the base config with its values applied and is validated like a config before anything is
submitted; sweepcheck.py refuses variants that repeat a run, vary what every task shares (the
executor, the job root, the registry) or reach the program under one variable name. A Slurm array
has one resource request and one script, so variants are grouped by what sbatch is asked for (nodes,
time, partition, ...) and by the script's interpreter and requeue signal -- a scaling study over
cluster.nodes becomes one array per node count -- and a group larger than MaxArraySize is cut into
ceil(n / MaxArraySize) arrays. All arrays of a sweep share one sweep id in the registry; the
throttle holds across them because each array after the first starts only when the previous one
has ended (--dependency=afterany).
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from hpcqa.core import config as configmod
from hpcqa.core import plan as planmod
from hpcqa.core import search, sweepcheck
from hpcqa.core.frozen import freeze
from hpcqa.core.kinds import Requeue
from hpcqa.errors import ConfigError, HpcqaError

RESERVED = {"parallelism", "variants", *search.SETTINGS}
DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's default


@dataclass(frozen=True)
class Variant:
    index: int
    params: Mapping[str, Any]  # the swept keys -> this variant's values (read-only)
    config: configmod.Config


@dataclass(frozen=True)
class ArrayPlan:
    variants: tuple[Variant, ...]
    slurm_key: str  # what sbatch is asked for, shared by the array's tasks


def _flatten(
    d: Mapping[str, Any], where: str, source: str, prefix: str = "", out: dict | None = None
) -> dict[str, Any]:
    """Dotted keys -> values. A key given both as a quoted dotted name and as a table's key is refused (TOML holds
    both, and one would silently replace the other)."""
    out = {} if out is None else out
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and not v:
            raise ConfigError(
                f"{where}.{key}",
                "an empty table: nothing to sweep",
                "give a key its values ([value1, value2], or a range {low = ..., high = ...}), or remove it",
                source,
            )
        if isinstance(v, dict) and not search.meant_as_range(v):
            _flatten(v, where, source, key + ".", out)
        elif key in out:
            raise ConfigError(
                f"{where}.{key}",
                "is given twice: once as a quoted dotted name, once as a table's key",
                "keep one of the two",
                source,
            )
        else:
            out[key] = v
    return out


def _set(raw: dict, key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _copy(raw: Mapping[str, Any]) -> dict:
    return json.loads(json.dumps(raw))


def has_sweep(raw: Mapping[str, Any]) -> bool:
    """Does a parsed config file describe a sweep (a [sweep] with more than a parallelism)?"""
    return isinstance(raw.get("sweep"), dict) and bool(set(raw["sweep"]) - {"parallelism"})


def _parallelism(sw: Mapping[str, Any], source: str) -> int:
    par = sw.get("parallelism", 0)
    if isinstance(par, bool) or not isinstance(par, int) or par < 0:
        raise ConfigError(
            "sweep.parallelism",
            f"expected an integer >= 0, got {par!r}",
            "set sweep.parallelism to how many variants may run at once (a grid's 0: no limit; a search's "
            "batches: 1 or more)",
            source,
        )
    return par


def searched(raw: Mapping[str, Any], source: str = "") -> search.Search | None:
    """The [sweep]'s search (strategy random or tpe), checked; None for a grid (or no sweep)."""
    sw = raw.get("sweep")
    if not isinstance(sw, dict):
        return None
    keys = _flatten({k: v for k, v in sw.items() if k not in RESERVED}, "sweep", source)
    if sw.get("strategy", "grid") != "grid":
        for key in (
            keys
        ):  # a misspelt setting is not a config key: said before its value is read as a space
            _config_key(key, source)
    spec = search.parse(sw, keys, _parallelism(sw, source), source)
    if spec is not None:
        sweepcheck.check_keys(list(keys), source)
    return spec


def _config_key(key: str, source: str) -> None:
    """A swept key's section must be a config section; a misspelt sweep setting (paralelism) or section (trian)
    is said with the name meant."""
    section, dot, rest = key.partition(".")
    if section in configmod.SECTIONS:
        return
    fix = "sweep keys are config keys such as train.learning_rate"
    if not dot and (close := difflib.get_close_matches(key, sorted(RESERVED), n=1, cutoff=0.75)):
        fix = f"did you mean sweep.{close[0]} (a sweep setting)? Otherwise {fix}"
    elif dot and (
        close := difflib.get_close_matches(section, list(configmod.SECTIONS), n=1, cutoff=0.6)
    ):
        fix = f"did you mean sweep.{close[0]}.{rest}? {fix[0].upper()}{fix[1:]}"
    raise ConfigError(f"sweep.{key}", f"{key!r} is not a config key", fix, source)


# Every variant is validated, planned, written and registered at submit: 10,000 take about as many seconds as a user
# waits for a dry run, and ten times Slurm's default MaxArraySize (1001).
MAX_VARIANTS = 10_000


def parse(
    raw: Mapping[str, Any], source: str = ""
) -> tuple[dict[str, list], list[dict[str, Any]], int]:
    """-> (grid axes, explicit variants, parallelism). Errors name sweep.<key>."""
    sw = raw.get("sweep")
    if sw is None:
        return {}, [], 0
    if not isinstance(sw, dict):
        raise ConfigError(
            "sweep", "expected a table [sweep]", "write it as a [sweep] section", source
        )
    par = _parallelism(sw, source)
    grid = _flatten({k: v for k, v in sw.items() if k not in RESERVED}, "sweep", source)
    if (
        search.parse(sw, grid, par, source) is not None
    ):  # a grid given a range or a search setting: refused there
        raise ConfigError(
            "sweep.strategy", "is a search, not a grid", "plan it with sweep.build", source
        )
    for key, values in grid.items():
        _config_key(key, source)  # first: a misspelt setting is said as one, not as a bad axis
        if not isinstance(values, list) or not values:
            raise ConfigError(
                f"sweep.{key}",
                f"a grid axis must be a non-empty list, got {values!r}",
                f"write sweep.{key} = [value1, value2, ...]",
                source,
            )
    explicit = sw.get("variants", [])
    if not isinstance(explicit, list) or not all(isinstance(v, dict) for v in explicit):
        raise ConfigError(
            "sweep.variants",
            "expected [[sweep.variants]] tables",
            "write each variant as a [[sweep.variants]] table of config keys",
            source,
        )
    listed = [_flatten(v, f"sweep.variants[{i}]", source) for i, v in enumerate(explicit)]
    sweepcheck.check_keys(list(dict.fromkeys([*grid, *(k for v in listed for k in v)])), source)
    size = math.prod(len(v) for v in grid.values()) if grid else 0
    if size + len(explicit) > MAX_VARIANTS:  # counted before anything is expanded
        raise ConfigError(
            "sweep",
            f"{size + len(explicit):,} variants (the grid's axes multiply: "
            f"{' x '.join(str(len(v)) for v in grid.values()) or '0'}, plus {len(explicit)} listed); "
            f"hpcqa submits at most {MAX_VARIANTS:,}",
            f"split the sweep into several configs of at most {MAX_VARIANTS:,} variants (each is "
            "validated, planned and registered, and every array task is a Slurm job)",
            source,
        )
    return grid, listed, par


def expand(raw: Mapping[str, Any], source: str = "") -> tuple[list[Variant], int]:
    """Every variant of the sweep, validated. A config without [sweep] is one variant."""
    grid, explicit, par = parse(raw, source)
    base = {k: v for k, v in raw.items() if k != "sweep"}
    combos: list[dict[str, Any]] = []
    if grid:
        keys = list(grid)
        combos += [dict(zip(keys, vals)) for vals in itertools.product(*(grid[k] for k in keys))]
    combos += explicit
    if not combos:
        combos = [{}]
    variants = _variants(base, list(enumerate(combos)), source)
    keys = swept_keys(variants)
    sweepcheck.check_variables(keys, source)
    sweepcheck.check_shared(variants, keys, source)
    sweepcheck.check_repeats(variants, grid, keys, source)
    return variants, par


def _variants(
    base: Mapping[str, Any],
    combos: list[tuple[int, dict[str, Any]]],
    source: str,
    what: str = "sweep variant {i}",
) -> list[Variant]:
    """The base config with each (index, params) applied, each validated like a config (errors name the variant:
    `what` with its index)."""
    variants = []
    for i, params in combos:
        r = _copy(base)
        for k, v in params.items():
            configmod.check_text(k, v, source)  # before any message quotes the value
            _set(r, k, v)
        try:
            cfg = configmod.from_dict(r, source=source)
        except ConfigError as e:
            where = ", ".join(f"{k}={v!r}" for k, v in params.items())
            raise ConfigError(
                e.key, f"in {what.format(i=i)} ({where}): {e.detail}", e.hint, source
            ) from None
        variants.append(Variant(index=i, params=freeze(params), config=cfg))
    return variants


def slurm_key(plan) -> str:
    """What an array's tasks share: what sbatch is asked for, the interpreter the array's command line names and
    the signal its --signal sends (the rank waits for its own)."""
    p = plan.slurm_parameters()
    p.pop("job_name", None)
    p.update(python=plan.python, requeue_signal=plan.config.launch.requeue_signal)
    return json.dumps(p, sort_keys=True, default=str)


def group(variants_with_plans: list[tuple[Variant, Any]], max_array_size: int) -> list[ArrayPlan]:
    """Group by sbatch request (first appearance order), then cut into arrays of <= max_array_size."""
    if max_array_size < 1:
        raise ValueError("max_array_size must be >= 1")
    groups: dict[str, list[Variant]] = {}
    for v, plan in variants_with_plans:
        groups.setdefault(slurm_key(plan), []).append(v)
    arrays = []
    for key, vs in groups.items():
        for start in range(0, len(vs), max_array_size):
            arrays.append(
                ArrayPlan(variants=tuple(vs[start : start + max_array_size]), slurm_key=key)
            )
    return arrays


def swept_keys(variants: list[Variant]) -> list[str]:
    keys: list[str] = []
    for v in variants:
        for k in v.params:
            if k not in keys:
                keys.append(k)
    return keys


@dataclass(frozen=True)
class SweepPlan:
    """What one `hpcqa submit` submits: the variants, their launch plans and how they are grouped
    into Slurm arrays. A plain job is a sweep of one variant (one array of one: a plain sbatch job),
    so single jobs and sweeps share one submission path."""

    variants: tuple[Variant, ...]
    plans: tuple[planmod.LaunchPlan, ...]
    arrays: tuple[ArrayPlan, ...]
    parallelism: int
    max_array_size: int
    executor: str  # the plans' executor kind (local, slurm, k8s)
    is_sweep: bool = True
    max_array_size_known: str = (
        ""  # how max_array_size is known: "scontrol show config", or "assumed: <why>"
    )
    search: search.Search | None = None  # a search's settings (its variants: this batch's trials)
    search_config: str = ""  # a search's config as read, JSON: its next batches are planned from it
    source: str = ""  # ... and where it was read from
    resumed: int = 0  # a search's trials in its study before this batch
    refused: tuple = ()  # a search's trials asked with this batch and not run: (number, params, why)
    repeats: tuple = ()  # ... asked with the values of a trial that ended: (number, params, that trial's number)

    def with_requeue(self, requeue: Requeue) -> "SweepPlan":
        """Every plan as the executor that submits them hands them to the ranks."""
        return replace(self, plans=tuple(p.with_requeue(requeue) for p in self.plans))

    def plans_of(self, array: ArrayPlan) -> list[planmod.LaunchPlan]:
        by_index = {p.variant_index: p for p in self.plans}
        return [by_index[v.index] for v in array.variants]

    def throttle(self, array: ArrayPlan) -> int:
        return min(self.parallelism or len(array.variants), len(array.variants))

    def array_lines(self) -> list[str]:
        return [
            f"--array=0-{len(a.variants) - 1}%{self.throttle(a)}"
            if len(a.variants) > 1
            else "(a single job)"
            for a in self.arrays
        ]

    def to_json(self) -> dict[str, Any]:
        out = self._json()
        if self.search is not None:
            out["search"] = self.search.to_json()
            out["search"]["refused"] = [
                {"trial": n, "params": dict(p), "why": why} for n, p, why in self.refused
            ]
            out["search"]["repeats"] = [
                {"trial": n, "params": dict(p), "repeats": of} for n, p, of in self.repeats
            ]
        return out

    def _json(self) -> dict[str, Any]:
        return {
            "executor": self.executor,
            "parallelism": self.parallelism,
            "max_array_size": self.max_array_size,
            "max_array_size_known": self.max_array_size_known,
            "variants": [
                {
                    "index": v.index,
                    "params": dict(v.params),
                    "world_size": p.world_size,
                    "plan_digest": p.digest,
                }
                for v, p in zip(self.variants, self.plans)
            ],
            "arrays": [
                {
                    "size": len(a.variants),
                    "variants": [v.index for v in a.variants],
                    "sbatch_array": line,
                    "after_previous": i > 0,
                }
                for i, (a, line) in enumerate(zip(self.arrays, self.array_lines()))
            ],
        }


def single(plan: planmod.LaunchPlan) -> SweepPlan:
    v = Variant(index=0, params=freeze({}), config=plan.config)
    return SweepPlan(
        (v,),
        (plan,),
        (ArrayPlan((v,), slurm_key(plan)),),
        0,
        DEFAULT_MAX_ARRAY_SIZE,
        plan.executor,
        is_sweep=False,
    )


def _edges(raw: Mapping[str, Any], spec: search.Search, source: str) -> list[Variant]:
    base = {k: v for k, v in raw.items() if k != "sweep"}
    edges = [(0, {d.key: v}) for d in spec.space for v in d.edges()]
    return _variants(base, edges, source, "the searched value")


def edge_configs(
    raw: Mapping[str, Any], spec: search.Search, source: str = ""
) -> list[configmod.Config]:
    """The base config with each value a trial may get applied alone (each choice, both ends of each range): what
    is checked before queueing for every trial of every batch (a model or data file only a later batch names)."""
    return [v.config for v in _edges(raw, spec, source)]


def check_space(raw: Mapping[str, Any], spec: search.Search, source: str = "") -> None:
    """Every value a trial may be given is valid: each choice and both ends of each range, applied alone to the
    base config and validated like a config (a trial never fails on its config after the wait in the queue); and a
    pruner has evaluations to judge."""
    base = configmod.from_dict({k: v for k, v in raw.items() if k != "sweep"}, source=source)
    _check_kinds(
        base, spec, source
    )  # before the edges: a float bound over an integer key said as written
    try:
        checked = _edges(raw, spec, source)
    except ConfigError as e:
        listed = [
            d.key for d in spec.space if isinstance(sweepcheck.held(base, d.key), (list, tuple))
        ]
        if e.key not in listed:
            raise
        raise ConfigError(
            f"sweep.{e.key}",
            f"{e.detail} -- {e.key} takes a list, and a search draws one value for it",
            f'set {e.key} in its table, or sweep whole lists with strategy = "grid" ([[sweep.variants]])',
            source,
        ) from None
    keys = [d.key for d in spec.space]
    sweepcheck.check_variables(keys, source)
    sweepcheck.check_shared(checked, keys, source)
    _check_judged(checked, spec, source)


def _check_judged(checked: list[Variant], spec: search.Search, source: str) -> None:
    """Every trial has what the study judges it by: hpcqa's own training, a final evaluation on validation data,
    and (for a pruner) evaluations on the way."""
    if checked[0].config.job.command:
        raise ConfigError(
            "sweep.strategy",
            "a search judges its trials by hpcqa's evaluations (EM/F1), and job.command runs a program of your own",
            'sweep your program with strategy = "grid" (its metrics: hpcqa results --metric)',
            source,
        )
    if any(v.config.job.task != "train" for v in checked):
        raise ConfigError(
            "job.task",
            'a search judges its trials by their evaluations, and job.task = "comm" measures the link only',
            'leave job.task = "train" (and out of the searched keys); hpcqa tune --comm measures the link',
            source,
        )
    blind = [v.config for v in checked if not v.config.train.do_eval]
    unseen = [
        c for c in (v.config for v in checked) if not (c.data.dataset or c.data.validation_file)
    ]
    if blind or unseen:
        raise ConfigError(
            "train.do_eval" if blind else "data.validation_file",
            f"a search judges each trial by its final evaluation's {spec.metric}, and "
            + ("train.do_eval is false" if blind else "there is no validation data")
            + ": no trial would have one (each would be told FAIL)",
            "set train.do_eval = true (and leave it out of the searched keys)"
            if blind
            else "set data.validation_file (questions kept apart from the training data)",
            source,
        )
    if spec.pruner != "none" and checked[0].config.train.eval_strategy == "no":
        raise ConfigError(
            "sweep.pruner",
            f'{spec.pruner!r} stops trials by their evaluations, and train.eval_strategy is "no"',
            'set train.eval_strategy = "steps" with train.eval_steps, or sweep.pruner = "none"',
            source,
        )


def _check_kinds(cfg: configmod.Config, spec: search.Search, source: str) -> None:
    """A range of integer bounds over a float key would give its trials whole numbers only (learning_rate 0 or 1),
    and a range with a fraction over an integer key values it cannot take: refused, naming the bounds to write."""
    for d in spec.space:
        if d.kind == "int" and isinstance(sweepcheck.held(cfg, d.key), float):
            raise ConfigError(
                f"sweep.{d.key}",
                f"both bounds are whole numbers ({d.low:g} .. {d.high:g}), so its trials would get whole numbers, "
                f"and {d.key} is a number with a fraction",
                f"write the bounds as floats: {{low = {d.low:.1f}, high = {d.high:.1f}}}",
                source,
            )
        now = sweepcheck.held(cfg, d.key)
        if d.kind == "float" and isinstance(now, int) and not isinstance(now, bool):
            step = f", step {d.step:g}" if d.step else ""
            raise ConfigError(
                f"sweep.{d.key}",
                f"{d.key} is a whole number, and this range is of numbers with a fraction "
                f"({d.low:g} .. {d.high:g}{step}: a bound or the step written with a decimal point)",
                f"write the bounds{' and step' * bool(d.step)} as whole numbers: "
                f"{{low = {int(d.low)}, high = {max(int(d.low), int(d.high))}}}",
                source,
            )


def trial_problem(
    raw: Mapping[str, Any], source: str, host: planmod.HostProbe, params: Mapping[str, Any]
) -> str | None:
    """Why one trial's values cannot run, or None: each value is valid alone (check_space), but two may not be
    together (train.max_seq_length 64 with train.doc_stride 100). Its config validated and its plan built."""
    r = _copy({k: v for k, v in raw.items() if k != "sweep"})
    try:
        for k, v in params.items():
            configmod.check_text(k, v, source)
            _set(r, k, v)
        planmod.build_plan(configmod.from_dict(r, source=source), host, via_submitit=True)
    except ConfigError as e:
        return f"{e.key}: {e.detail}"
    except HpcqaError as e:
        return e.message
    return None


def clashes(
    raw: Mapping[str, Any],
    spec: search.Search,
    host: planmod.HostProbe,
    source: str = "",
    limit: int = 1000,
) -> tuple[int, list[tuple[dict[str, Any], str]]] | None:
    """A space of lists only (at most `limit` combinations): (the combinations, those whose values do not go
    together, with why: a trial drawing one is told FAIL). Every combination clashing is a ConfigError naming one.
    None: a range in the space, or too many combinations to try (submit finds them as trials are asked)."""
    if any(d.kind != "choice" for d in spec.space):
        return None
    keys = [d.key for d in spec.space]
    combos = list(itertools.islice(itertools.product(*[d.choices for d in spec.space]), limit + 1))
    if len(combos) > limit:
        return None
    bad = []
    for values in combos:
        params = dict(zip(keys, values))
        if why := trial_problem(raw, source, host, params):
            bad.append((params, why))
    if bad and len(bad) == len(combos):
        raise ConfigError(
            "sweep",
            f"no combination of the searched lists goes together: {search.shown_params(bad[0][0])}: {bad[0][1]}",
            "change the lists so that some combination runs",
            source,
        )
    return len(combos), bad


def build_search(
    raw: Mapping[str, Any],
    source: str,
    host: planmod.HostProbe,
    spec: search.Search,
    batch: list[tuple[int, dict[str, Any]]],
    trial: Callable[[int], search.TrialRef],
    max_array_size: Callable[[planmod.LaunchPlan], tuple[int, str]] | None = None,
) -> SweepPlan:
    """One batch of a search's trials -> validated plans (each carrying its trial), as one sweep: (number, params)
    as the study gave them; trial(number) says where the study is. The caller has checked the space (check_space)
    before asking the study."""
    base = {k: v for k, v in raw.items() if k != "sweep"}
    variants = _variants(base, batch, source, "trial {i}")
    plans = [
        planmod.build_plan(v.config, host, via_submitit=True)
        .with_variant(v.index, v.params)
        .with_trial(trial(v.index))
        for v in variants
    ]
    mas, known = (
        max_array_size(plans[0])
        if max_array_size
        else (DEFAULT_MAX_ARRAY_SIZE, "assumed: not asked")
    )
    return SweepPlan(
        tuple(variants),
        tuple(plans),
        tuple(group(list(zip(variants, plans)), mas)),
        spec.parallelism,
        mas,
        plans[0].executor,
        max_array_size_known=known,
        search=spec,
    )


def build(
    raw: Mapping[str, Any],
    source: str,
    host: planmod.HostProbe,
    max_array_size: Callable[[planmod.LaunchPlan], tuple[int, str]] | None = None,
) -> SweepPlan:
    """Variants -> validated plans -> arrays. `max_array_size(first plan)`: how large an array may be where the
    plans run, and how that is known (asked once; the executors' table answers: Slurm's MaxArraySize)."""
    variants, par = expand(raw, source)
    plans = [
        planmod.build_plan(v.config, host, via_submitit=True).with_variant(v.index, v.params)
        for v in variants
    ]
    mas, known = (
        max_array_size(plans[0])
        if max_array_size
        else (DEFAULT_MAX_ARRAY_SIZE, "assumed: not asked")
    )
    arrays = group(list(zip(variants, plans)), mas)
    return SweepPlan(
        tuple(variants),
        tuple(plans),
        tuple(arrays),
        par,
        mas,
        plans[0].executor,
        max_array_size_known=known,
    )
