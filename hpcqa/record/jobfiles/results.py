"""results.json: what a finished job measured -- EM/F1 (SQuAD v2's splits), throughput, times, the step's split
and efficiency, the all-reduce, the link a `tune --comm` job measured, a user command's metrics, the requeues and
the checkpoints. Rank 0 writes it once, at the end; status, results, the scaling model and the API read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpcqa.core.states import State
from hpcqa.record.jobfiles import reader
from hpcqa.record.jobfiles.fields import JSON, Amount, Count, Record, Score
from hpcqa.record.jobfiles.parts import Code, Comm, Notice, Recipe, Weights, Work


@dataclass(frozen=True)
class MeasuredLink(Record):
    """A `tune --comm` job's measured link."""

    bandwidth_Bps: Amount | None = None
    latency_s: Amount | None = None
    nodes: Count | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Unreliable(Record):
    why: str = ""
    fix: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tokens(Record):
    padding_share: Amount
    text_per_sample: Amount
    all_per_sample: Amount
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PeakMoved(Record):
    """A rank whose peak, measured again at the end of training, was more than `threshold` away from the one its MFU
    divided by (hpcqa.rank.train.peakcheck): the MFU is withheld as unreliable."""

    start: Amount
    end: Amount
    ratio: Amount
    rank: Count = 0
    host: str | None = None
    start_source: str | None = None
    cached_at: Amount | None = None
    threshold: Amount | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Efficiency(Record):
    """MFU on text tokens and on all tokens, and what it was computed from: the peak, how and when it was taken
    (peak_taken; every rank's in peak_provenance, kept in extra) and whether it moved during the job."""

    mfu: Amount | None = None
    mfu_all_tokens: Amount | None = None
    mfu_unreliable: Unreliable | None = None
    tokens: Tokens | None = None
    achieved_flops: Amount | None = None
    peak_flops: Amount | None = None
    peak_flops_per_rank: tuple[Amount, ...] = ()
    peak_source: str | None = None
    peak_taken: str | None = None
    peak_moved: PeakMoved | None = None
    precision: str | None = None
    model_flops_per_sample: Amount | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Baseline(Record):
    """The untrained model's scores on the same questions (train.baseline)."""

    name: str = ""
    exact_match: float | None = None
    f1: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Predict(Record):
    """The test set's predictions (data.test_file)."""

    files: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialEnd(Record):
    """A search's trial: its number, how it ended (COMPLETED, or PRUNED by the pruner at `step`), the metric it was
    judged by and its value then (the last evaluation's), and how many evaluations it reported."""

    number: Count
    state: str
    metric: str = ""
    value: float | None = None
    step: Count | None = None
    reports: Count = 0
    study: str = ""  # the study's name and storage (a journal file or a database URL)
    storage: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# the numbers a sweep's table and CSV carry, by name (sweep.metric may name any of results.json's numbers)
SCORES = ("exact_match", "f1", "train_samples_per_second", "wall_time_s", "train_runtime_s")
V2_SPLITS = ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh")


@dataclass(frozen=True)
class Results(Record):
    status: str | None = None
    task: str | None = None
    exit_code: int | None = None
    exact_match: Score | None = None
    f1: Score | None = None
    HasAns_exact: Score | None = None
    HasAns_f1: Score | None = None
    HasAns_total: Count | None = None
    NoAns_exact: Score | None = None
    NoAns_f1: Score | None = None
    NoAns_total: Count | None = None
    best_f1: Score | None = None
    best_f1_thresh: float | None = None
    best_metric: float | None = None
    train_samples_per_second: float | None = None
    eval_samples_per_second: float | None = None
    steady_samples_per_second: float | None = None
    wall_time_s: float | None = None
    train_runtime_s: float | None = None
    step_time_s: float | None = None
    nodes: Count | None = None
    world_size: Count | None = None
    threads_per_rank: Count | None = None
    eval_examples: Count | None = None
    bf16: bool | None = None
    baseline: Baseline | None = None
    files: dict[str, str] = field(default_factory=dict)
    predict: Predict | None = None
    tensorboard: str | None = None
    backend: str | None = None
    allocator: str | None = None
    attempt: Count | None = None
    requeues: Count | None = None
    resumed_from_step: Count | None = None
    notices: tuple[Notice, ...] = ()
    best_checkpoint: str | int | None = None
    model_dir: str | None = None
    code: Code | None = None
    command: tuple[str, ...] | None = None
    work: Work | None = None
    metrics: dict[str, JSON] | None = None
    metrics_error: str | None = None
    link: MeasuredLink | None = None
    comm: Comm | None = None
    step_recipe: Recipe | None = None
    bf16_weights: Weights | None = None
    step_split_s: dict[str, float | None] = field(default_factory=dict)
    efficiency: Efficiency | None = None
    trial: TrialEnd | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def scores(self) -> tuple[float, float] | None:
        """(EM, F1) when both are there."""
        if self.exact_match is None or self.f1 is None:
            return None
        return self.exact_match, self.f1

    def number(self, name: str) -> float | None:
        """The number results.json holds under `name` (a field, or one of its other keys), else None: what a
        sweep's metric, CSV and plot read."""
        v = getattr(self, name, None) if name in _FIELDS else self.extra.get(name)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def finished(self) -> bool:
        """The job's work is done: a training run COMPLETED, or a user command that exited 0."""
        return self.status == State.COMPLETED or (self.task == "command" and self.exit_code == 0)


_FIELDS = set(Results.__dataclass_fields__) - {"extra"}


FILE = reader.JobFile(Results, "results file")
parse, read, write = FILE.parse, FILE.read, FILE.write
