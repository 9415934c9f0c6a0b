"""The HF Trainer as a rank runs it: hpcqa's batches (length-grouped in lockstep across the ranks), a count of the
tokens each batch carries, EM/F1 at the evaluations during training, and the callbacks a rank adds."""

from __future__ import annotations

import time
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist
from torch.utils.data import Sampler
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, default_data_collator
from transformers.trainer_pt_utils import LengthGroupedSampler

from hpcqa.rank.train import batching, efficiency, master, tracking
from hpcqa.rank.train.callbacks import (
    FailAt,
    FinalSave,
    MarkComplete,
    ProgressCallback,
    StepTimer,
    StopOnSignal,
    tensorboard_callback,
)
from hpcqa.rank.train.evaluate import score
from hpcqa.rank.train.facts import Rank
from hpcqa.rank.train.pruning import Prune


class LockstepLengthSampler(Sampler):
    """batching.lockstep_order as a torch Sampler; set_epoch is called by accelerate's data loader at each epoch."""

    def __init__(self, lengths: Sequence[int], batch: int, world: int, seed: int) -> None:
        self.lengths, self.batch, self.world, self.seed, self.epoch = (
            list(lengths),
            batch,
            world,
            seed,
            0,
        )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        return iter(
            batching.lockstep_order(self.lengths, self.batch, self.world, self.seed, self.epoch)
        )


class CountingTrainer(Trainer):
    """The Trainer with hpcqa's batches: length-grouped in lockstep across the ranks (hpcqa.rank.train.batching)
    unless data.pad_to_max_length or not data.group_by_length; and a count of the tokens each batch carries
    (text and all), for the MFU on each."""

    def __init__(self, *args: Any, hpcqa_rank: Rank, timer: StepTimer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hpcqa_rank = hpcqa_rank
        self.hpcqa_timer = timer
        self.hpcqa_counts = efficiency.new_counts()
        self.hpcqa_prune: Prune | None = None  # a search's trial: its pruning callback

    def _get_train_sampler(self, train_dataset=None):
        dc = self.hpcqa_rank.plan.config.data
        ds = train_dataset if train_dataset is not None else self.train_dataset
        if dc.pad_to_max_length or not dc.group_by_length or ds is None:
            return super()._get_train_sampler(train_dataset)
        if (
            dc.length_sampler == "stock"
        ):  # transformers' own, as run_qa.py --group_by_length runs it
            return LengthGroupedSampler(
                self.args.train_batch_size * self.args.gradient_accumulation_steps,
                lengths=batching.feature_lengths(ds),
            )
        return LockstepLengthSampler(
            batching.feature_lengths(ds),
            self.args.per_device_train_batch_size,
            self.hpcqa_rank.world,
            self.args.seed,
        )

    def create_optimizer(self, model=None):
        """The Trainer's optimizer (its weight-decay groups, fused or not); with bf16 weights (train.bf16_weights
        = "master") the same over fp32 master copies (master.MasterAdamW), taken from the fp32 weights before
        the model is cast to bf16 (here: before DDP wraps it)."""
        opt = super().create_optimizer(model)
        weights = self.hpcqa_rank.report.get("bf16_weights") or {}
        if weights.get("mode") == "master" and master.master_of(opt) is None:
            self.optimizer = opt = master.MasterAdamW.wrap(opt)
            weights["logits"] = master.to_bf16(self.model if model is None else model)
        return opt

    def training_step(self, model, inputs, *args, **kwargs):
        if "input_ids" in inputs:
            efficiency.count_batch(
                self.hpcqa_counts, inputs["input_ids"], inputs.get("attention_mask")
            )
        return super().training_step(model, inputs, *args, **kwargs)


class QATrainer(CountingTrainer):
    """Evaluation during training scores EM/F1 (post-processing the logits as the final evaluation does),
    so eval_f1 can choose the best checkpoint. Every rank scores: all must agree on the best one."""

    def __init__(self, *args: Any, qa_data: dict, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.qa_data = qa_data

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        t0 = time.time()
        loop = self.evaluation_loop(
            self.get_eval_dataloader(self.qa_data["eval_features"]),
            description="Evaluation",
            prediction_loss_only=False,
            ignore_keys=ignore_keys,
            metric_key_prefix=metric_key_prefix,
        )
        scores, _ = score(self.hpcqa_rank, self.qa_data, "eval", loop.predictions)
        metrics = {
            f"{metric_key_prefix}_{k}": v
            for k, v in scores.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        metrics[f"{metric_key_prefix}_runtime"] = time.time() - t0
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(
            self.args, self.state, self.control, metrics
        )
        return metrics


def build_trainer(
    r: Rank, args: TrainingArguments, model: Any, data: dict, optimizers: tuple
) -> CountingTrainer:
    tc = r.plan.config.train
    timer = StepTimer(tc.timing_warmup_steps, r)
    callbacks = [timer, FinalSave(tc.save_final_checkpoint), StopOnSignal(r), MarkComplete(r)]
    if r.rank == 0:
        callbacks.append(ProgressCallback(r.jd.progress, r.t_start))
        callbacks += [c for c in (tensorboard_callback(r), tracking.tracker(r)) if c is not None]
    if tc.fail_at_step:
        callbacks.append(FailAt(tc.fail_at_step, r.rank == r.world - 1))
    dc = r.plan.config.data
    collator = (
        default_data_collator
        if dc.pad_to_max_length
        else DataCollatorWithPadding(
            data["tokenizer"],
            pad_to_multiple_of=dc.pad_to_multiple_of if dc.pad_to_multiple_of > 1 else None,
        )
    )
    evaluates = tc.eval_strategy != "no"
    extra = {"qa_data": data} if evaluates else {}
    trainer = (QATrainer if evaluates else CountingTrainer)(
        model=model,
        args=args,
        train_dataset=data["train_features"],
        processing_class=data["tokenizer"],
        eval_dataset=data["eval_features"] if evaluates else None,
        data_collator=collator,
        callbacks=callbacks,
        optimizers=optimizers,
        hpcqa_rank=r,
        timer=timer,
        **extra,
    )
    trainer.hpcqa_prune = None
    if (
        r.plan.trial is not None and evaluates
    ):  # a search's trial: report each evaluation, stop when pruned
        trainer.hpcqa_prune = Prune(r, r.plan.trial)
        trainer.add_callback(trainer.hpcqa_prune)
    if getattr(trainer.accelerator, "ddp_handler", None) is not None:
        ddp_hooks(r, trainer.accelerator.ddp_handler)
    return trainer


def ddp_hooks(r: Rank, handler: Any) -> None:
    """DDP's settings the Trainer passes no argument for: gradients as bucket views, train.ddp_compress's hook.
    With bf16 weights (train.bf16_weights = "master") the gradients are bf16: DDP sends them as they are (half of
    fp32's bytes) and no compression hook is registered (fp16 would narrow their range for no fewer bytes)."""
    tc = r.plan.config.train
    # the Trainer passes no gradient_as_bucket_view to accelerate; DDP is built from this handler at train()
    handler.gradient_as_bucket_view = tc.ddp_bucket_view
    if (r.report.get("bf16_weights") or {}).get("mode") == "master":
        if tc.ddp_compress != "none":
            note = f"train.ddp_compress = {tc.ddp_compress} not applied: with bf16 weights the gradients are bf16"
            r.report["warnings"].append(note + " already, all-reduced as they are")
        return
    if (
        tc.ddp_compress == "fp16"
    ):  # nor a comm hook: accelerate registers this one when it wraps the model
        from accelerate.utils import DDPCommunicationHookType

        handler.comm_hook = DDPCommunicationHookType(tc.ddp_compress)
    elif tc.ddp_compress == "bf16":
        register_own_hook(handler, cpu_bf16_hook)


def cpu_bf16_hook(process_group, bucket):  # noqa: ANN001 -- DDP refuses a hook annotated otherwise
    """DDP's bf16 compression for any backend: the bucket cast to bf16 (divided by the world size first, as the
    stock hook does), all-reduced, cast back into the bucket. torch's own bf16_compress_hook is refused by name on
    a build without CUDA/NCCL or XPU ("BF16 all reduce communication hook required CUDA 11+ ..."), gloo included:
    DDP checks the hook's *name* (bf16_compress_hook), so this one must be called otherwise."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(group.size())

    def decompress(fut: Any) -> Any:
        buffer.copy_(fut.value()[0])
        return buffer

    return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)


def register_own_hook(handler: Any, hook: Any) -> None:
    """Have accelerate register `hook` on the DDP model when it wraps it (where it registers its own). The handler
    becomes an instance of a subclass: accelerate reads its fields back (to_kwargs), so no attribute is added."""
    stock = type(handler)

    class OwnHook(stock):  # type: ignore[misc, valid-type]
        def register_comm_hook(self, model: Any) -> None:
            super().register_comm_hook(model)
            model.register_comm_hook(state=None, hook=hook)

    handler.__class__ = OwnHook
