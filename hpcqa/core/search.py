"""A [sweep] that searches: its strategy, trials, metric, pruner, storage and search space, read and checked. Pure.

    [sweep]
    strategy = "tpe"            # grid (the default: a sweep of today) | random | tpe
    trials = 12                 # trials in all
    parallelism = 3             # trials per batch (left out: 1): one job array each (locally: one after another)
    metric = "f1"               # f1 | exact_match (the evaluation's, on the validation split)
    direction = "maximize"      # the default
    seed = 0                    # the sampler's seed
    pruner = "median"           # none | median | halving (needs train.eval_strategy: the trials' evaluations)
    pruner_warmup_steps = 0     # no trial is pruned before this training step (its evaluations before it: noise)
    pruner_min_trials = 1       # median: a step is judged once this many completed trials reported there
    storage = ""                # "": a journal file in the search's folder; or a database URL (sqlite:///...)
    train.learning_rate = {low = 1e-5, high = 1e-4, log = true}   # a range: floats
    train.gradient_accumulation_steps = {low = 1, high = 4}     # both bounds integers: integers
    train.num_train_epochs = [1, 2]                             # a list: one of these

Trials are proposed by Optuna (record/study.py); what is here decides nothing but what the config says, refused
naming the sweep key before anything is queued. A search is identified by its digest (strategy, metric, direction,
pruner, seed and space): the study of another search at the same storage is refused; trials and parallelism may
change between submissions (a search submitted again with more trials goes on).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from hpcqa.core import tomlfile
from hpcqa.core.tomlfile import toml_value
from hpcqa.errors import ConfigError
from hpcqa.text import CONTROL, shown

STRATEGIES = ("grid", "random", "tpe")
PRUNERS = ("none", "median", "halving")
METRICS = {
    "f1": "maximize",
    "exact_match": "maximize",
}  # the evaluation's, as the Trainer reports them
SETTINGS = (
    "strategy",
    "trials",
    "metric",
    "direction",
    "seed",
    "pruner",
    "pruner_warmup_steps",
    "pruner_min_trials",
    "storage",
)
MAX_WARMUP = 10_000_000  # steps
RANGE_KEYS = {"low", "high", "log", "step"}
# Optuna's MedianPruner n_startup_trials: the median judges a trial once this many trials have completed
MEDIAN_STARTUP = 2
MAX_TRIALS = 10_000  # as many as a grid may have variants
STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")


@dataclass(frozen=True)
class Dim:
    """One searched key: a list of choices, or a float/int range (log: sampled on a log scale; step: a grid on it)."""

    key: str
    kind: str  # choice | float | int
    choices: tuple = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None

    def to_json(self) -> dict[str, Any]:
        if self.kind == "choice":
            return {"key": self.key, "kind": "choice", "choices": list(self.choices)}
        return {
            "key": self.key,
            "kind": self.kind,
            "low": self.low,
            "high": self.high,
            "log": self.log,
            "step": self.step,
        }

    def single(self) -> bool:
        """One value only (a list of one, or low = high): every trial gets it."""
        return len(self.choices) == 1 if self.kind == "choice" else self.low == self.high

    def shown(self) -> str:
        if self.kind == "choice":
            return " | ".join(json.dumps(c) for c in self.choices)
        scale = ", log" if self.log else (f", step {self.step:g}" if self.step else "")
        return f"{self.kind} {self.low:g} .. {self.high:g}{scale}"

    def edges(self) -> list[Any]:
        """The values every trial's config must accept: each choice, or both bounds."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind == "int":
            return [int(self.low), int(self.high)]
        return [self.low, self.high]


@dataclass(frozen=True)
class Search:
    strategy: str  # random | tpe
    trials: int
    parallelism: int
    metric: str
    direction: str  # maximize | minimize
    seed: int
    pruner: str
    storage: str  # "": the journal file in the search's folder
    space: tuple[Dim, ...]
    pruner_warmup: int = 0  # sweep.pruner_warmup_steps: no trial is pruned before this step
    pruner_min_trials: int = 1  # sweep.pruner_min_trials: the median's n_min_trials

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "trials": self.trials,
            "parallelism": self.parallelism,
            "metric": self.metric,
            "direction": self.direction,
            "seed": self.seed,
            "pruner": self.pruner,
            "pruner_warmup_steps": self.pruner_warmup,
            "pruner_min_trials": self.pruner_min_trials,
            "storage": self.storage,
            "space": [d.to_json() for d in self.space],
            "digest": self.digest,
        }

    @property
    def digest(self) -> str:
        """What makes a study this search's: the space and how it is searched (not trials or parallelism)."""
        what = [self.strategy, self.metric, self.direction, self.seed, self.pruner]
        what.append([d.to_json() for d in self.space])
        if (
            self.pruner_warmup
        ):  # absent at 0: a search of before it keeps its digest (and its study)
            what.append(self.pruner_warmup)
        if self.pruner_min_trials != 1:  # absent at 1, as the warm-up at 0
            what.append({"pruner_min_trials": self.pruner_min_trials})
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]

    def trial_ref(self, number: int, study: str, storage: str) -> "TrialRef":
        """What trial `number` of this search's study at `storage` carries in its plan."""
        return TrialRef(
            number,
            study,
            storage,
            self.metric,
            self.direction,
            self.pruner,
            self.pruner_warmup,
            self.pruner_min_trials,
        )

    def batch_size(self, asked: int) -> int:
        """How many trials the next batch holds at most, `asked` trials being in the study already."""
        return max(0, min(self.parallelism, self.trials - asked))


@dataclass(frozen=True)
class TrialRef:
    """What a trial's ranks need of its search (in the plan): its number, where the study is, and how it prunes."""

    number: int
    study: str  # the study's name (the search's digest)
    storage: str  # a journal file's path or a database URL
    metric: str
    direction: str
    pruner: str
    warmup: int = 0  # no pruning before this step (sweep.pruner_warmup_steps)
    min_trials: int = 1  # the median judges a step once this many completed trials reported there

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        if not self.warmup:  # absent at 0: a plan of before it keeps its digest
            del d["warmup"]
        if self.min_trials == 1:  # absent at 1, likewise
            del d["min_trials"]
        return d

    @classmethod
    def from_json(cls, d: Any) -> "TrialRef | None":
        """The plan's trial back (None: no trial). Wrong types raise ValueError: a plan file is read back."""
        if not d:
            return None
        fields = set(cls.__dataclass_fields__)
        optional = {"warmup", "min_trials"}
        if not isinstance(d, Mapping) or not fields - optional <= set(d) <= fields:
            raise ValueError(
                f"a plan's trial has keys {sorted(d) if isinstance(d, Mapping) else d!r}"
            )
        n = d["number"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"a plan's trial number is {n!r}")
        texts = [d[k] for k in ("study", "storage", "metric", "direction", "pruner")]
        if not all(isinstance(t, str) and t for t in texts):
            raise ValueError(
                "a plan's trial names its study, storage, metric, direction and pruner as text"
            )
        if d["metric"] not in METRICS or d["pruner"] not in PRUNERS:
            raise ValueError(
                f"a plan's trial has metric {d['metric']!r} and pruner {d['pruner']!r}"
            )
        w = d.get("warmup", 0)
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w <= MAX_WARMUP:
            raise ValueError(f"a plan's trial has pruner warm-up {w!r}")
        m = d.get("min_trials", 1)
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_TRIALS:
            raise ValueError(f"a plan's trial has pruner min trials {m!r}")
        return cls(**d)


def shown_params(params: Mapping[str, Any]) -> str:
    """A trial's values in a line: key=value, floats to 4 significant digits."""
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={json.dumps(v)}"
        for k, v in params.items()
    )


def is_range(value: Any) -> bool:
    """A search range table {low, high[, log, step]} (and not a config table swept whole)."""
    return isinstance(value, Mapping) and {"low", "high"} <= set(value) <= RANGE_KEYS


def meant_as_range(value: Any) -> bool:
    """A table with low or high in it: a range, maybe mistyped (read as one, so its error names the key)."""
    return isinstance(value, Mapping) and bool({"low", "high"} & set(value))


def _err(key: str, message: str, fix: str, source: str) -> ConfigError:
    return ConfigError(f"sweep.{key}", message, fix, source)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def dim(key: str, value: Any, source: str) -> Dim:
    """One searched key's space, checked."""
    if isinstance(value, list):
        return _choices(key, value, source)
    if meant_as_range(value) and not is_range(value):
        raise _err(
            key,
            f"a range takes low and high (both), log and step; got {', '.join(sorted(value))}",
            f"write sweep.{key} = {{low = 1e-5, high = 1e-3, log = true}}",
            source,
        )
    if not is_range(value):
        raise _err(
            key,
            f"expected a list of values or a range {{low, high, log}}, got {value!r}",
            f"write sweep.{key} = [1, 2] or sweep.{key} = {{low = 1e-5, high = 1e-3, log = true}}",
            source,
        )
    return _range(key, value, source)


def _choices(key: str, value: list, source: str) -> Dim:
    if not value:
        raise _err(key, "an empty list", f"write sweep.{key} = [value1, value2, ...]", source)
    if not all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        raise _err(
            key,
            f"a searched list holds numbers, text or booleans (a search draws one of them), got {value!r}",
            'sweep lists or tables (a whole report_to, sbatch_extra) with strategy = "grid" as [[sweep.variants]], '
            "or set the key in its table",
            source,
        )
    same = {json.dumps(float(v) if _number(v) else v) for v in value}
    if len(same) < len(value):
        raise _err(
            key,
            f"lists a value twice ({', '.join(json.dumps(v) for v in value)}): its trials would be the same",
            "list each value once",
            source,
        )
    return Dim(key, "choice", tuple(value))


def _range(key: str, value: Mapping[str, Any], source: str) -> Dim:
    low, high, log, step = value["low"], value["high"], value.get("log", False), value.get("step")
    if not (_number(low) and _number(high)):
        raise _err(
            key,
            f"low and high must be numbers, got {low!r} and {high!r}",
            "give both bounds as numbers",
            source,
        )
    if low > high:
        raise _err(
            key,
            f"low {low!r} is above high {high!r}",
            f"swap them: low = {high!r}, high = {low!r}",
            source,
        )
    if not isinstance(log, bool):
        raise _err(
            key,
            f"log must be true or false, got {log!r}",
            "write log = true or leave it out",
            source,
        )
    if log and low <= 0:
        raise _err(
            key,
            f"a log range needs low > 0, got {low!r}",
            "give a positive low (1e-6) or set log = false",
            source,
        )
    if step is not None and (not _number(step) or step <= 0 or log):
        raise _err(
            key,
            f"step must be a positive number, without log, got {step!r}",
            "drop step, or drop log"
            if log
            else "give step a positive number (a multiple of high - low), or drop it",
            source,
        )
    if step is not None and abs((high - low) / step - round((high - low) / step)) > 1e-9:
        raise _err(
            key,
            f"high - low ({high - low:g}) is not a multiple of step {step:g}",
            f"make it one (high = {low + step * max(1, int((high - low) // step)):g}), or drop step",
            source,
        )
    whole = (
        isinstance(low, int) and isinstance(high, int) and (step is None or isinstance(step, int))
    )
    kind = "int" if whole else "float"
    return Dim(key, kind, (), float(low), float(high), log, None if step is None else float(step))


def _setting(sw: Mapping[str, Any], key: str, default: Any, source: str) -> Any:
    v = sw.get(key, default)
    if key in ("trials", "seed", "pruner_warmup_steps", "pruner_min_trials"):
        low, high = {
            "trials": (1, MAX_TRIALS),
            "seed": (0, 2**32 - 1),
            "pruner_min_trials": (1, MAX_TRIALS),
        }.get(key, (0, MAX_WARMUP))
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            meant = next((m for m, _ in tomlfile.meant(v) if type(m) is int), None)
            raise _err(
                key,
                f"expected an integer from {low} to {high}, got {toml_value(v)}",
                f"set sweep.{key} = {meant} (an integer: no quotes, no decimal point)"
                if meant is not None and low <= meant <= high
                else f"set sweep.{key} = {8 if key == 'trials' else low}",
                source,
            )
        return v
    allowed = {
        "strategy": STRATEGIES,
        "pruner": PRUNERS,
        "metric": tuple(METRICS),
        "direction": ("maximize", "minimize"),
    }.get(key)
    if not isinstance(v, str):
        fix = _choice_fix(key, "", allowed) if allowed else f"set sweep.{key} as a quoted string"
        raise _err(key, f"expected text, got {toml_value(v)}", fix, source)
    if allowed and v not in allowed:
        raise _err(key, f"unknown {key} {toml_value(v)}", _choice_fix(key, v, allowed), source)
    return v


def _choice_fix(key: str, given: str, options: tuple[str, ...]) -> str:
    """The fix for a setting that takes one of `options`: the one meant when one is clear (the only option that
    starts with what was given, or the closest spelling), and every option, quoted as TOML writes them."""
    text = given.strip().lower()
    starts = [a for a in options if text and a.startswith(text)]
    meant = starts if len(starts) == 1 else difflib.get_close_matches(text, list(options), n=1)
    listed = ", ".join(toml_value(a) for a in options)
    if meant:
        return f"set sweep.{key} = {toml_value(meant[0])} (one of {listed})"
    return f"set sweep.{key} to one of {listed}"


def redacted(url: str) -> str:
    """A URL as messages show it: a password in it (user:password@, ?password=) replaced by ***."""
    out = re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", url)
    return re.sub(r"(?i)([?&](?:password|passwd|pwd)=)[^&]*", r"\1***", out)


def storage_problem(url: str) -> str | None:
    """Why a sweep.storage value is not a study storage hpcqa opens (None: it may be)."""
    if not url:
        return None
    if CONTROL.search(url):
        return f"{shown(redacted(url))} holds a control character (a line break, an escape)"
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if "://" not in url or scheme not in STORAGE_SCHEMES:
        return f"{redacted(url)!r} is not a database URL ({', '.join(s + '://' for s in STORAGE_SCHEMES)})"
    if scheme == "sqlite":
        rest = url.split("://", 1)[
            1
        ]  # sqlite:////abs/path.db: "//abs/path.db"; sqlite:///rel.db: "/rel.db"
        if not rest.startswith("//") or ":memory:" in rest:
            return (
                f"{redacted(url)!r}: an SQLite study must be a file at an absolute path (sqlite:////abs/path.db: "
                "four slashes), the same from every node and every folder you submit from"
            )
        path = rest[1:].split("?", 1)[0]
        if path.endswith("/") or any(len(part.encode()) > 255 for part in path.split("/")):
            return f"{redacted(url)!r}: an SQLite study's path must end in a file name of at most 255 bytes"
    if re.search(r"://[^/@]*:[^/@]*@", url) or re.search(r"(?i)[?&](password|passwd|pwd)=", url):
        return "a password in the URL would be written to the plans and the registry"
    if re.search(r"(?i)[?&](mode=ro|(immutable|readonly)=(1|true|on|yes))(&|$)", url):
        return f"{redacted(url)!r} opens the database read-only: every trial and the follow-up write to the study"
    return None


def _storage_setting(sw: Mapping[str, Any], source: str) -> str:
    storage = _setting(sw, "storage", "", source)
    bad = storage_problem(storage)
    if bad:
        fix = "leave sweep.storage out (a journal file in the job root), or give sqlite:////abs/path.db"
        if "password" in bad:
            fix = "a server's password goes in ~/.pgpass or the driver's environment, never in the config"
        elif "read-only" in bad:
            fix = "drop the read-only option from the URL (a search's study is written to)"
        raise _err("storage", bad, fix, source)
    return storage


def _search_shape(
    sw: Mapping[str, Any], space: Mapping[str, Any], strategy: str, parallelism: int, source: str
) -> None:
    """What a search needs that a grid does not: keys to search, trials; no variants list, no parallelism 0."""
    if "variants" in sw:
        raise _err(
            "variants",
            f"lists variants, which a {strategy} search does not run",
            'drop [[sweep.variants]], or use strategy = "grid"',
            source,
        )
    if not space:
        raise _err(
            "strategy",
            "a search with no key to search",
            "add a key: sweep.train.learning_rate = {low = 1e-5, high = 1e-4, log = true}",
            source,
        )
    if "trials" not in sw:
        raise _err(
            "trials", "is missing: how many trials the search runs", "set sweep.trials = 12", source
        )
    if "parallelism" in sw and parallelism == 0:
        raise _err(
            "parallelism",
            "0 (no limit) is for a grid; a search asks the study for each batch once the one before has ended",
            "set sweep.parallelism to how many trials a batch runs at once (1 or more; left out: 1)",
            source,
        )


def parse(
    sw: Mapping[str, Any], space: Mapping[str, Any], parallelism: int, source: str = ""
) -> Search | None:
    """The [sweep] table's search settings and its (flattened) keys -> a Search, or None for a grid. A grid given
    a search setting or a range is refused naming the key."""
    strategy = _setting(sw, "strategy", "grid", source)
    if strategy == "grid":
        given = [k for k in SETTINGS if k in sw and k != "strategy"]
        ranged = [k for k, v in space.items() if is_range(v)]
        if given or ranged:
            key = (given or ranged)[0]
            raise _err(
                key,
                "is for a search; this sweep's strategy is grid (every combination of the lists)",
                'set sweep.strategy = "random" or "tpe" to search (Optuna proposes the trials)',
                source,
            )
        return None
    _search_shape(sw, space, strategy, parallelism, source)
    metric = _setting(sw, "metric", "f1", source)
    storage = _storage_setting(sw, source)
    spec = Search(
        strategy,
        _setting(sw, "trials", 0, source),
        parallelism or 1,
        metric,
        _setting(sw, "direction", METRICS[metric], source),
        _setting(sw, "seed", 0, source),
        _setting(sw, "pruner", "median", source),
        storage,
        tuple(dim(k, v, source) for k, v in space.items()),
        _setting(sw, "pruner_warmup_steps", 0, source),
        _setting(sw, "pruner_min_trials", 1, source),
    )
    if spec.pruner_warmup and spec.pruner == "none":
        raise _err(
            "pruner_warmup_steps",
            'is a pruner\'s, and sweep.pruner is "none"',
            'set sweep.pruner = "median" (or "halving"), or leave pruner_warmup_steps out',
            source,
        )
    if spec.pruner_min_trials != 1 and spec.pruner != "median":
        raise _err(
            "pruner_min_trials",
            f"is the median pruner's, and sweep.pruner is {spec.pruner!r}",
            'set sweep.pruner = "median", or leave pruner_min_trials out',
            source,
        )
    _spread(spec, source)
    return spec


def _spread(spec: Search, source: str) -> None:
    """A space of one point with more than one trial is refused: every trial would be the same run."""
    if spec.trials > 1 and all(d.single() for d in spec.space):
        raise _err(
            "trials",
            f"{spec.trials} trials of a space of one point (every searched key has one value): they would all "
            "be the same run",
            "give a key two values or a range {low, high}, or set sweep.trials = 1",
            source,
        )


def one_value_lines(spec: Search) -> list[str]:
    """A warning per searched key of one value (a list of one, low = high): it is not searched; and one for a
    median that could never judge (pruner_min_trials completed trials, and the one judged, need more than `trials`)."""
    lines = [
        f"sweep.{d.key} has one value ({d.shown()}): every trial gets it -- widen it, or set it in "
        f"[{d.key.rsplit('.', 1)[0]}] instead"
        for d in spec.space
        if d.single()
    ]
    need = max(MEDIAN_STARTUP, spec.pruner_min_trials)
    if spec.pruner == "median" and spec.trials <= need:
        fix = (
            f"lower sweep.pruner_min_trials below {spec.trials}"
            if spec.trials > MEDIAN_STARTUP
            else f'raise sweep.trials to {need + 1} or more, or set sweep.pruner = "none"'
        )
        lines.append(
            f'sweep.pruner = "median" with {spec.trials} trials: no trial can be pruned (the median judges a '
            f"trial once {MEDIAN_STARTUP} trials have completed, at a step {spec.pruner_min_trials} completed "
            f"trial(s) reported at, sweep.pruner_min_trials) -- {fix}"
        )
    return lines
