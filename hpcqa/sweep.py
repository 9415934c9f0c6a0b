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
submitted. A Slurm array has one resource request, so variants are grouped by what sbatch is asked
for (nodes, time, partition, ...) -- a scaling study over cluster.nodes becomes one array per node
count -- and a group larger than MaxArraySize is cut into ceil(n / MaxArraySize) arrays. All arrays
of a sweep share one sweep id in the registry; the throttle holds across them because each array
after the first starts only when the previous one has ended (--dependency=afterany).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from hpcqa import config as configmod
from hpcqa.errors import ConfigError

RESERVED = {"parallelism", "variants"}


@dataclass(frozen=True)
class Variant:
    index: int
    params: Mapping[str, Any]      # the swept keys -> this variant's values
    config: configmod.Config


@dataclass(frozen=True)
class ArrayPlan:
    variants: tuple[Variant, ...]
    slurm_key: str                 # what sbatch is asked for, shared by the array's tasks


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
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


def parse(raw: Mapping[str, Any], source: str = "") -> tuple[dict[str, list], list[dict[str, Any]], int]:
    """-> (grid axes, explicit variants, parallelism). Errors name sweep.<key>."""
    sw = raw.get("sweep")
    if sw is None:
        return {}, [], 0
    if not isinstance(sw, dict):
        raise ConfigError("sweep", "expected a table [sweep]", "write it as a [sweep] section", source)
    par = sw.get("parallelism", 0)
    if isinstance(par, bool) or not isinstance(par, int) or par < 0:
        raise ConfigError("sweep.parallelism", f"expected an integer >= 0, got {par!r}",
                          "set sweep.parallelism to how many variants may run at once (0: no limit)", source)
    grid = _flatten({k: v for k, v in sw.items() if k not in RESERVED})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep.{key}", f"a grid axis must be a non-empty list, got {values!r}",
                              f"write sweep.{key} = [value1, value2, ...]", source)
        if key.split(".")[0] not in configmod.SECTIONS:
            raise ConfigError(f"sweep.{key}", f"{key!r} is not a config key",
                              "sweep keys are config keys such as train.learning_rate", source)
    explicit = sw.get("variants", [])
    if not isinstance(explicit, list) or not all(isinstance(v, dict) for v in explicit):
        raise ConfigError("sweep.variants", "expected [[sweep.variants]] tables",
                          "write each variant as a [[sweep.variants]] table of config keys", source)
    return grid, [_flatten(v) for v in explicit], par


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
    variants = []
    for i, params in enumerate(combos):
        r = _copy(base)
        for k, v in params.items():
            _set(r, k, v)
        try:
            cfg = configmod.from_dict(r, source=source)
        except ConfigError as e:
            where = ", ".join(f"{k}={v!r}" for k, v in params.items())
            raise ConfigError(e.key, f"in sweep variant {i} ({where}): {e.detail}", e.hint, source) from None
        variants.append(Variant(index=i, params=params, config=cfg))
    return variants, par


def slurm_key(plan) -> str:
    p = plan.slurm_parameters()
    p.pop("job_name", None)
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
            arrays.append(ArrayPlan(variants=tuple(vs[start:start + max_array_size]), slurm_key=key))
    return arrays


def n_arrays(n_variants: int, max_array_size: int) -> int:
    return math.ceil(n_variants / max_array_size)


def parse_max_array_size(scontrol_config: str) -> int | None:
    """`scontrol show config` -> MaxArraySize."""
    for line in scontrol_config.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == "MaxArraySize":
            try:
                return int(v.strip())
            except ValueError:
                return None
    return None


def swept_keys(variants: list[Variant]) -> list[str]:
    keys: list[str] = []
    for v in variants:
        for k in v.params:
            if k not in keys:
                keys.append(k)
    return keys
