"""The Trainer callbacks a rank adds: progress and phase for `status`, the step timer, the stop on a notice, the
final save, the completion mark of a checkpoint, TensorBoard, and the test hook that fails a step."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.integrations import TensorBoardCallback

from hpcqa.core.eta import StepRate
from hpcqa.rank.train.facts import Rank, thread_census
from hpcqa.rank.train.resume import barrier
from hpcqa.rank.train.stop import STOP, StopNotice, attempt
from hpcqa.record.jobfiles import marks
from hpcqa.record.jobfiles import progress as progressfile
from hpcqa.record.phases import Phase


class Board(TensorBoardCallback):
    """transformers' TensorBoard callback writing into the job folder; a resumed run purges the steps it redoes, so
    the curves don't double back."""

    def __init__(self, logdir: Path, writer: type) -> None:
        super().__init__()
        self.logdir, self.writer = logdir, writer

    def on_train_begin(self, args, state, control, **kw):
        if self.tb_writer is None:
            self.tb_writer = self.writer(
                log_dir=str(self.logdir), purge_step=state.global_step or None
            )
        super().on_train_begin(args, state, control, **kw)

    def on_train_end(self, args, state, control, **kw):
        if self.tb_writer is not None:
            self.tb_writer.flush()
        super().on_train_end(args, state, control, **kw)


def tensorboard_callback(r: Rank) -> Board | None:
    """Rank 0's TensorBoard writer into the job folder. None (with a warning) when train.report_to = "none" or
    tensorboard is missing."""
    if "tensorboard" not in r.plan.config.train.report_to:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter  # tensorboard is optional at run time
    except ImportError as e:
        r.log(
            f'WARNING: no TensorBoard curves: {e} (pip install tensorboard, or train.report_to = "none")'
        )
        r.report["warnings"].append("tensorboard not installed: no training curves")
        return None
    r.save_report(tensorboard=str(r.jd.tensorboard))
    return Board(r.jd.tensorboard, SummaryWriter)


def board_efficiency(r: Rank, eff: dict, split: dict, step: int) -> None:
    """MFU, achieved FLOP/s and the step's split into the run's TensorBoard event file, next to its curves
    (rank 0); an MFU withheld (an unreliable peak: it moved, or the run beat it) is not written, the split is."""
    if "tensorboard" not in r.plan.config.train.report_to or not (eff.get("mfu") or split):
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # tensorboard is optional at run time
    except ImportError:
        return
    with SummaryWriter(log_dir=str(r.jd.tensorboard)) as board:
        if eff.get("mfu"):
            board.add_scalar("hpcqa/mfu", eff["mfu"], step)
            board.add_scalar("hpcqa/achieved_gflops", eff["achieved_flops"] / 1e9, step)
            if eff.get("mfu_all_tokens") is not None:
                board.add_scalar("hpcqa/mfu_all_tokens", eff["mfu_all_tokens"], step)
            board.add_scalar("hpcqa/peak_gflops", eff["peak_flops"] / 1e9, step)
        for part, seconds in split.items():
            if isinstance(seconds, (int, float)):
                board.add_scalar(f"hpcqa/step_s/{part}", seconds, step)


def _finite(x: Any) -> bool:
    """A loss JSON can carry: a diverged run's nan or inf would make progress.json unreadable (status: damaged)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class ProgressCallback(TrainerCallback):
    """Rank 0 writes progress.json (step, total, loss, ETA) for `submit` and `status` to read."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path, self.t0 = path, t0
        self.last_write = 0.0
        self.loss = None
        self.rate = StepRate()

    def on_train_begin(self, args, state, control, **kw):
        self._write(state, Phase.TRAINING, force=True)

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.loss = logs["loss"]
        self._write(state, Phase.TRAINING, force=True)

    def on_step_end(self, args, state, control, **kw):
        self._write(state, Phase.TRAINING)

    def on_train_end(self, args, state, control, **kw):
        self._write(state, Phase.EVALUATING, force=True)

    def _write(self, state, phase: Phase, force: bool = False) -> None:
        now = time.time()
        done = state.global_step
        total = state.max_steps or 0
        self.rate.add(now, done)
        if not force and now - self.last_write < 1.0:
            return
        self.last_write = now
        eta = self.rate.eta(now, total)
        progressfile.write(
            self.path,
            {
                "phase": phase,
                "step": done,
                "total_steps": total,
                "epoch": state.epoch,
                "loss": self.loss if _finite(self.loss) else None,
                "eta_s": eta,
                "updated": now,
                "started": self.t0,
                "attempt": attempt(),
            },
        )


class StopOnSignal(TrainerCallback):
    """After each optimizer step, all ranks agree whether a stop signal arrived anywhere; if so,
    the Trainer saves a checkpoint of this step and stops (at most the current step is lost)."""

    def __init__(self, r: Rank) -> None:
        self.r = r

    def on_train_begin(self, args, state, control, **kw):
        STOP.early_exit = False  # from here on a notice is answered with a checkpoint

    def on_step_end(self, args, state, control, **kw):
        if STOP.agreed(self.r.world):
            STOP.agreed_at = state.global_step
            self.r.phases.enter(Phase.STOPPING, f"{STOP.name} at step {state.global_step}")
            control.should_save = True
            control.should_training_stop = True

    def on_prediction_step(self, args, state, control, **kw):
        # evaluation has no step boundary for minutes: the ranks agree after each batch (they run the same
        # number: the Trainer's distributed eval batches are even) and leave the loop to save and stop
        if STOP.agreed(self.r.world):
            raise StopNotice(f"{STOP.name} during evaluation at step {state.global_step}")


class StepTimer(TrainerCallback):
    """Times optimizer steps only (not start-up, evaluation or checkpoint saving, which happen
    outside on_step_begin..on_step_end); records the rank's threads once, mid-run. Splits each step by the
    Trainer's own callbacks: forward + backward (with DDP's gradient all-reduce, which overlaps the backward)
    up to on_pre_optimizer_step, the optimizer to on_optimizer_step, the rest (scheduler, zero_grad) to
    on_step_end; and the wait for the next batch, from one step's end to the next one's begin (steps after
    which the Trainer logged, saved or evaluated are left out of that)."""

    def __init__(self, warmup: int, r: Rank) -> None:
        self.warmup, self.r = warmup, r
        self.durations: list[float] = []
        self.parts: dict[str, list[float]] = {
            "forward_backward": [],
            "optimizer": [],
            "other": [],
            "data_wait": [],
        }
        self.t0 = self.t_pre = self.t_opt = 0.0
        self.t_end: float | None = None
        self.busy = False  # the Trainer logged, saved or evaluated since the last step ended

    def on_train_begin(self, args, state, control, **kw):
        self.r.phases.enter(Phase.TRAINING)

    def on_step_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()
        if self.t_end is not None and not self.busy:
            self.parts["data_wait"].append(self.t0 - self.t_end)
        self.t_pre = self.t_opt = 0.0

    def on_pre_optimizer_step(self, args, state, control, **kw):
        self.t_pre = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kw):
        self.t_opt = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        now = time.perf_counter()
        self.durations.append(now - self.t0)
        if self.t_pre and self.t_opt:
            self.parts["forward_backward"].append(self.t_pre - self.t0)
            self.parts["optimizer"].append(self.t_opt - self.t_pre)
            self.parts["other"].append(now - self.t_opt)
        self.t_end, self.busy = (
            now,
            bool(control.should_log or control.should_save or control.should_evaluate),
        )
        if len(self.durations) == min(2, state.max_steps or 2):
            self.r.save_report(threads=thread_census())
        self.r.phases.step(
            state.global_step, state.max_steps
        )  # where every rank is, for status (throttled)

    def split(self) -> dict:
        """Mean seconds per step of each part, after the warm-up steps."""
        out = {}
        for name, values in self.parts.items():
            steady = values[self.warmup :] if len(values) > self.warmup else values
            out[name] = sum(steady) / len(steady) if steady else None
        return out

    def summary(self, samples_per_step: int) -> dict:
        d, steady = self.durations, self.durations[self.warmup :]
        step = sum(steady) / len(steady) if steady else None
        first = d[: self.warmup] if len(d) > self.warmup else []
        return {
            "train_samples_per_second": samples_per_step * len(d) / sum(d) if d else None,
            "steady_samples_per_second": samples_per_step * len(steady) / sum(steady)
            if steady
            else None,
            "timed_steps": len(d),
            "timing_warmup_steps": self.warmup,
            "step_time_s": step,
            "step_split_s": self.split(),
            # what the warm-up steps took beyond steady steps: torch.compile's compile time when it is on
            "warmup_excess_s": max(0.0, sum(first) - step * len(first)) if first and step else None,
        }


class FinalSave(TrainerCallback):
    """The Trainer saves a full checkpoint at the last step even when save_steps doesn't fall
    there; unless train.save_final_checkpoint, skip that one (the run is over)."""

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted

    def on_step_end(self, args, state, control, **kw):
        last = state.max_steps and state.global_step >= state.max_steps
        if last and not self.wanted and state.global_step % args.save_steps:
            control.should_save = False


class MarkComplete(TrainerCallback):
    """After a checkpoint is saved, every rank has written its part (model, optimizer, its RNG state) once all
    pass the barrier: then rank 0 marks the folder complete. A folder without the mark is not resumed from."""

    def __init__(self, r: Rank) -> None:
        self.r = r

    def on_save(self, args, state, control, **kw):
        r = self.r
        barrier(r)
        if r.rank == 0:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if path.is_dir():
                marks.write_mark(
                    r.jd.checkpoint_marker(path),
                    {
                        "step": state.global_step,
                        "time": time.time(),
                        "world_size": r.world,
                        "attempt": attempt(),
                        "files": r.jd.checkpoint_files(path),
                    },
                )


class FailAt(TrainerCallback):
    """Testing aid (train.fail_at_step): the last rank raises at `step`."""

    def __init__(self, step: int, this_rank: bool) -> None:
        self.step, self.this_rank = step, this_rank

    def on_step_end(self, args, state, control, **kw):
        if self.this_rank and state.global_step >= self.step:
            raise RuntimeError(f"train.fail_at_step = {self.step}: failing on purpose (test aid)")
