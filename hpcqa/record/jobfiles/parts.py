"""The objects that appear in more than one job file: the code that ran, a user command's folder, a stop on a
notice, the all-reduce's measurements, the step's recipe, its weights' precision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpcqa.record.jobfiles.fields import Amount, Count, Record, Seconds


@dataclass(frozen=True)
class Code(Record):
    """Which hpcqa ran: its version, its git description, the snapshot it ran from (verified at the rank)."""

    version: str | None = None
    describe: str | None = None
    digest: str | None = None
    snapshot: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Work(Record):
    """A user command's folder: the copy it ran in (snapshot) or the folder it was told (run_in)."""

    dir: str | None = None
    snapshot: str | None = None
    run_in: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Notice(Record):
    """A stop on a notice (SIGTERM, the requeue signal): which signal, at which step, the checkpoint it saved."""

    signal: str | None = None
    step: Count | None = None
    attempt: Count | None = None
    checkpoint: str | None = None
    exit_code: int | None = None
    time: Seconds | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Comm(Record):
    """What DDP all-reduced per step, and how much of it the backward hid."""

    grad_bytes: Amount | None = None
    bucket_bytes: tuple[Amount, ...] = ()
    wire_bucket_bytes: tuple[Amount, ...] = ()
    compress: str | None = None
    planned: bool | None = None
    allreduce_s: Amount | None = None
    exposed_s: Amount | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe(Record):
    """The attention and dropout the step ran with."""

    attention: str | None = None
    attention_type: str | None = None
    attention_reason: str | None = None
    attention_switched: str | None = None
    attention_kernel: str | None = None
    attention_fallback: str | None = None
    dropout_masks: str | None = None
    attention_dropout: float | None = None
    hidden_dropout: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Weights(Record):
    """The weights' precision with bf16 on or off (train.bf16_weights): fp32, autocast or master, why, the logits'
    dtype and what the saved model is."""

    mode: str | None = None
    reason: str | None = None
    logits: str | None = None
    saved: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
