"""A search's trial reports its metric at every evaluation and stops when the pruner says so.

Every rank scores each evaluation (trainer.QATrainer); rank 0 reports the plan's metric to the trial in the study
(record/study.py) and asks the pruner; its answer is broadcast so every rank stops at the same step (a DDP job whose
ranks disagree would hang). A pruned trial stops training like the end of its steps: its checkpoints and final model
are kept, the final evaluation runs, and results.json says trial.state PRUNED with the step and value. A study that
cannot be reached mid-run (a database gone) is said once and the trial trains on unpruned: losing a trial's
training to the tracker of its search would be worse than not pruning it. The last evaluation (at the trial's last
step) is reported, not judged: its training is paid for in full, and a trial stopped there would end PRUNED with
a final metric that TPE then ranks below every completed trial (benchmarks/search_replay.py measured it).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from hpcqa.core.search import TrialRef
from hpcqa.core.states import State
from hpcqa.rank.train.facts import Rank
from hpcqa.record import study


class Prune(TrainerCallback):
    def __init__(self, r: Rank, ref: TrialRef) -> None:
        self.r, self.ref = r, ref
        self.trial: Any = None
        self.broken = False
        self.reports = 0
        self.last: tuple[int, float] | None = None
        self.pruned_at: int | None = None

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        value = (metrics or {}).get(f"eval_{self.ref.metric}")
        decision: list[Any] = [False]
        if isinstance(value, (int, float)):
            self.reports += 1
            self.last = (state.global_step, float(value))
            if self.r.rank == 0:
                last = bool(state.max_steps) and state.global_step >= state.max_steps
                decision = [self._ask(state.global_step, float(value), judge=not last)]
        decision = agree(self.r, decision)
        if decision[0]:
            self.pruned_at = state.global_step
            self.r.log(
                f"trial {self.ref.number} pruned at step {state.global_step}: {self.ref.metric} {value:.2f} "
                f"({self.ref.pruner} pruner); its checkpoints and model are kept"
            )
            control.should_training_stop = True
        return control

    def _ask(self, step: int, value: float, judge: bool = True) -> bool:
        if self.broken:
            return False
        try:
            self.trial = self.trial or study.reporter(self.ref)
            self.trial.report(value, step)
            return judge and bool(self.trial.should_prune())
        except Exception as e:  # noqa: BLE001 -- the study is gone or damaged: train on, unpruned
            self.broken = True
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            self.r.log(
                f"WARNING: trial {self.ref.number} cannot report to its study ({why}): not pruned"
            )
            self.r.report["warnings"].append(f"search study unreachable: {why}")
            return False

    def outcome(self) -> dict[str, Any]:
        """results.json's trial."""
        return {
            "number": self.ref.number,
            "state": State.PRUNED if self.pruned_at is not None else State.COMPLETED,
            "metric": self.ref.metric,
            "value": self.last[1] if self.last else None,
            "step": self.pruned_at
            if self.pruned_at is not None
            else (self.last[0] if self.last else None),
            "reports": self.reports,
            "study": self.ref.study,
            "storage": self.ref.storage,
        }


def agree(r: Rank, decision: list[Any]) -> list[Any]:
    """Rank 0's decision, on every rank."""
    if r.world <= 1:
        return decision
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.broadcast_object_list(decision, src=0)
    return decision
