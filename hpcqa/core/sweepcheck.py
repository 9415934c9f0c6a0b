"""What a sweep's variants may not do, each refused naming its sweep key before anything is queued: vary what every
task of a sweep shares, repeat a run, or reach the program under one variable name. Pure.

- Shared: one executor submits a sweep, into one job root and one registry (SHARED, with why). An axis over such a
  key is refused outright; a table swept whole, or a key derived from a swept one (job.name from job.command), is
  refused when the variants' values differ.
- Repeated: two variants whose values are equal as the validated config holds them (3e-5 and 0.00003, 2 and 2.0)
  are one run queued twice. Refused, not merged: task indices and array sizes stay what the sweep lists.
- Variables: each swept key reaches a user command as HPCQA_SWEEP_<KEY> (command.sweep_variable); two keys that
  make one name (launch.env.x and launch.env.X) would leave the program one of the two values.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from hpcqa.core import command
from hpcqa.errors import ConfigError

ROOT = "the tasks share one job root (<job.output_dir>/<job.name>), where submit writes their plans, logs and code"
# Keys every task of a sweep has in common: submit takes them from the first variant (the executor and its table
# entry, the job root, the registry rows of every array, the copy of the program's folder), whatever the others say.
SHARED: Mapping[str, str] = {
    "cluster.executor": "one executor submits the whole sweep (the first variant's)",
    "launch.launcher": "it chooses the executor, and one executor submits the whole sweep (the first variant's)",
    "job.name": ROOT,
    "job.output_dir": ROOT,
    "job.registry": "a sweep is recorded in one registry (hpcqa status SWEEP reads one)",
    "job.group_readable": "the job root and the registry are made once, for the whole sweep",
    "job.workdir": "the program's folder is copied once, at submit, for every variant",
}


# What decides a search trial's metric besides its searched keys: a search resumed with one of these changed would
# compare trials that trained or were scored on different things (the pruner's medians, the sampler's model, the
# best), so it is refused naming the key (executors/searching.py). Paths compare as written, not by content; where
# the job runs (nodes, ranks, threads) is left out: a search may move between machines.
SETUP = tuple(
    """
    model.name_or_path model.dropout model.attention_dropout model.hidden_dropout
    data.dataset data.dataset_config_name data.train_file data.validation_file data.question_column
    data.context_column data.answer_column data.version_2_with_negative data.synthetic_train_examples
    data.synthetic_eval_examples data.synthetic_shape data.max_train_samples data.max_eval_samples
    train.learning_rate train.num_train_epochs train.max_steps train.per_device_train_batch_size
    train.gradient_accumulation_steps train.weight_decay train.warmup_ratio train.max_seq_length train.doc_stride
    train.max_answer_length train.n_best_size train.null_score_diff_threshold train.seed train.optim
    train.eval_strategy train.eval_steps
    """.split()
)


def setup(cfg: Any, searched: Sequence[str]) -> dict[str, Any]:
    """A validated config's SETUP values, but for the searched keys (each trial's own)."""
    return {k: held(cfg, k) for k in SETUP if k not in searched}


def setup_change(was: Any, now: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """(key, the study's value, this config's) of the first SETUP key that differs from the study's record; None
    when none does, or there is no record (a study of before it: adopted at its next claim)."""
    if not isinstance(was, Mapping):
        return None
    for key, value in now.items():
        if key in was and canonical(was[key]) != canonical(value):
            return key, was[key], value
    return None


def canonical(value: Any) -> Any:
    """A value as comparable data: numbers as numbers (3e-05 and 0.00003, 2 and 2.0 are one; true is not 1)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, bool) or value is None:
        return ("flag", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((str(k), canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(canonical(v) for v in value))
    return ("text", value)


def held(cfg: Any, key: str) -> Any:
    """The value a validated config holds at a dotted key (None where it holds none)."""
    node = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
    return node


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_shown(v)}" for k, v in params.items()) or "nothing (the base config)"


def check_keys(keys: Sequence[str], source: str = "") -> None:
    """Before anything is expanded: no swept key (of the grid or of a listed variant) is one that every task shares,
    or inside one."""
    for key in keys:
        shared = next((s for s in SHARED if key == s or key.startswith(s + ".")), None)
        if shared:
            raise ConfigError(
                f"sweep.{key}",
                f"{shared} cannot vary in a sweep: {SHARED[shared]}",
                f"set {shared} outside [sweep]; for several values, a sweep (a config, or --set "
                f"{shared}=...) per value",
                source,
            )


def check_variables(keys: Sequence[str], source: str = "") -> None:
    """No two swept keys reach a user command under one variable name."""
    by_name: dict[str, str] = {}
    for key in keys:
        name = command.sweep_variable(key)
        if name in by_name:
            raise ConfigError(
                f"sweep.{key}",
                f"sweep.{by_name[name]} and sweep.{key} would both reach the program as {name} (a sweep "
                "variable is its key upper-cased, every character but a letter or a digit made '_')",
                "rename one of the two, or sweep only one of them",
                source,
            )
        by_name[name] = key


def check_shared(variants: Sequence[Any], keys: Sequence[str], source: str = "") -> None:
    """What every task shares is the same in every variant (a table swept whole, a name derived from the command)."""
    for shared, why in SHARED.items():
        first = canonical(held(variants[0].config, shared))
        other = next((v for v in variants[1:] if canonical(held(v.config, shared)) != first), None)
        if other is None:
            continue
        a, b = held(variants[0].config, shared), held(other.config, shared)
        swept = next((k for k in keys if shared.startswith(k + ".")), None)
        if swept is None:  # derived from what is swept
            swept = next(
                (k for k in keys if other.params.get(k) != variants[0].params.get(k)), keys[0]
            )
        raise ConfigError(
            f"sweep.{swept}",
            f"variants 0 and {other.index} would differ in {shared} ({_shown(a)}, {_shown(b)}): {why}",
            f"give {shared} one value for every variant (set it outside [sweep])",
            source,
        )


def check_repeats(
    variants: Sequence[Any], grid: Mapping[str, list], keys: Sequence[str], source: str = ""
) -> None:
    """No two variants are one run: equal at every swept key as the validated config holds it (the rest is the
    base config, the same in both)."""
    seen: dict[Any, Any] = {}
    for v in variants:
        mark = tuple(canonical(held(v.config, k)) for k in keys)
        if mark in seen:
            raise _repeated(seen[mark], v, grid, source)
        seen[mark] = v


def _positions(index: int, grid: Mapping[str, list]) -> dict[str, int]:
    """A grid variant's entry on each axis (the product's order: the last axis fastest)."""
    out = {}
    for key in reversed(list(grid)):
        index, out[key] = divmod(index, len(grid[key]))
    return out


def _repeated(first: Any, again: Any, grid: Mapping[str, list], source: str) -> ConfigError:
    size = math.prod(len(v) for v in grid.values()) if grid else 0  # the grid's variants come first
    if again.index < size:  # both of the grid: an axis lists one value twice
        p, q = _positions(first.index, grid), _positions(again.index, grid)
        axis = next(k for k in grid if p[k] != q[k])
        return ConfigError(
            f"sweep.{axis}",
            f"lists one value twice: {_shown(grid[axis][p[axis]])} (entry {p[axis]}) and "
            f"{_shown(grid[axis][q[axis]])} (entry {q[axis]}) are equal as {axis}, so variants {first.index} "
            f"and {again.index} would be one run queued twice",
            f"remove the duplicate from sweep.{axis}",
            source,
        )
    entry = again.index - size
    what = (
        f"[[sweep.variants]] entry {first.index - size}"
        if first.index >= size
        else f"the grid's variant {first.index}"
    ) + (f" ({_where(first.params)})" if first.params else "")
    return ConfigError(
        f"sweep.variants[{entry}]",
        f"sets {_where(again.params)}: the same run as {what}, it would be queued twice",
        f"remove the duplicate [[sweep.variants]] entry {entry}, or change one of its values",
        source,
    )
