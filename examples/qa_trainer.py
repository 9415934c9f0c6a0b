"""Extractive QA fine-tuning with the Hugging Face Trainer, in the spirit of transformers' run_qa.py (what Intel's
published multi-node recipe launches under mpirun): SQuAD-format JSON files, features made as run_qa.py makes them
(question + context, truncated on the context with a stride), DDP through the Trainer. Under hpcqa:

    python examples/qa_data.py /tmp/qa-data
    hpcqa submit configs/quickstart.toml -- python examples/qa_trainer.py --model_name_or_path /tmp/qa-data/model \
        --train_file /tmp/qa-data/train.json --validation_file /tmp/qa-data/dev.json --learning_rate '{train.learning_rate}'

It runs as well under torchrun. Checkpoints go to HPCQA_CHECKPOINT_DIR (else --output_dir); on SIGTERM (a preemption
notice, forwarded by hpcqa) the ranks agree after the current step, save a checkpoint and exit 0; a requeued job
resumes from the last checkpoint there. Rank 0 writes its metrics to HPCQA_RESULTS.
"""

import argparse
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
from datasets import Dataset
from transformers import (
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)
from transformers.trainer_utils import get_last_checkpoint

NOTICE = {"seen": False}


def squad_rows(path):
    """SQuAD's nested JSON (data[].paragraphs[].qas[]) as flat columns."""
    with open(path) as f:
        data = json.load(f)["data"]
    rows = {"id": [], "question": [], "context": [], "answer_start": [], "answer_text": []}
    for article in data:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                if not qa.get("answers"):
                    continue
                rows["id"].append(qa["id"])
                rows["question"].append(qa["question"].lstrip())
                rows["context"].append(para["context"])
                rows["answer_start"].append(qa["answers"][0]["answer_start"])
                rows["answer_text"].append(qa["answers"][0]["text"])
    return Dataset.from_dict(rows)


def features(tok, max_len, stride):
    """run_qa.py's prepare_train_features: each window of the context labelled with the answer's token span, or
    with the CLS token when the answer is not inside it."""

    def prepare(ex):
        enc = tok(
            ex["question"],
            ex["context"],
            truncation="only_second",
            max_length=max_len,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding="max_length",
        )
        starts, ends = [], []
        for i, offsets in enumerate(enc["offset_mapping"]):
            k = enc["overflow_to_sample_mapping"][i]
            a0 = ex["answer_start"][k]
            a1 = a0 + len(ex["answer_text"][k])
            seq = enc.sequence_ids(i)
            ctx = [j for j, s in enumerate(seq) if s == 1]
            if not ctx or offsets[ctx[0]][0] > a0 or offsets[ctx[-1]][1] < a1:
                starts.append(0)
                ends.append(0)
                continue
            starts.append(next(j for j in ctx if offsets[j][1] > a0))
            ends.append(next(j for j in reversed(ctx) if offsets[j][0] < a1))
        enc["start_positions"], enc["end_positions"] = starts, ends
        enc.pop("offset_mapping")
        enc.pop("overflow_to_sample_mapping")
        return enc

    return prepare


class StopOnNotice(TrainerCallback):
    """After each step the ranks agree whether any got SIGTERM; then save and stop, all at the same step."""

    def on_step_end(self, args, state, control, **kw):
        flag = torch.tensor([int(NOTICE["seen"])])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            control.should_save = True
            control.should_training_stop = True
            state.stopped_on_notice = True
        return control


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model_name_or_path", required=True)
    p.add_argument("--train_file", required=True)
    p.add_argument("--validation_file")
    p.add_argument("--output_dir", default="qa-output")
    p.add_argument("--learning_rate", type=float, default=3e-5)
    p.add_argument("--max_steps", type=int, default=-1)
    p.add_argument("--num_train_epochs", type=float, default=1.0)
    p.add_argument("--per_device_train_batch_size", type=int, default=12)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--doc_stride", type=int, default=32)
    p.add_argument("--save_steps", type=int, default=500)
    p.add_argument("--max_train_samples", type=int)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: NOTICE.update(seen=True))
    out = os.environ.get("HPCQA_CHECKPOINT_DIR") or args.output_dir
    tok = AutoTokenizer.from_pretrained(args.model_name_or_path)
    model = AutoModelForQuestionAnswering.from_pretrained(args.model_name_or_path)
    train = squad_rows(args.train_file)
    if args.max_train_samples:
        train = train.select(range(min(args.max_train_samples, len(train))))
    prep = features(tok, args.max_seq_length, args.doc_stride)
    train = train.map(prep, batched=True, remove_columns=train.column_names)
    dev = None
    if args.validation_file:
        dev = squad_rows(args.validation_file)
        dev = dev.map(prep, batched=True, remove_columns=dev.column_names)
    targs = TrainingArguments(
        output_dir=out,
        learning_rate=args.learning_rate,
        max_steps=args.max_steps,
        num_train_epochs=args.num_train_epochs,
        save_steps=args.save_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        logging_steps=5,
        report_to=[],
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None,
        use_cpu=True,
        seed=42,
        save_total_limit=2,
    )
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=train,
        eval_dataset=dev,
        data_collator=default_data_collator,
        callbacks=[StopOnNotice()],
    )
    last = get_last_checkpoint(out) if os.path.isdir(out) else None
    result = trainer.train(resume_from_checkpoint=last)
    if getattr(trainer.state, "stopped_on_notice", False):
        print(
            f"notice received: checkpoint of step {trainer.state.global_step} saved in {out}",
            flush=True,
        )
        return 0
    metrics = {
        "train_loss": result.training_loss,
        "steps": trainer.state.global_step,
        "train_samples_per_second": result.metrics.get("train_samples_per_second"),
        "resumed_from": last or "",
    }
    if dev is not None:
        metrics["eval_loss"] = trainer.evaluate()["eval_loss"]
    if trainer.is_world_process_zero() and os.environ.get("HPCQA_RESULTS"):
        with open(os.environ["HPCQA_RESULTS"], "w") as f:
            json.dump(metrics, f)
    return 0


if __name__ == "__main__":
    code = main()
    # Done and saved: leave without the interpreter's teardown. gloo's worker threads can still hold tensors then,
    # and destroying them aborts the process ("terminate called without an active exception", SIGABRT) -- seen on
    # the test cluster after the last step was written, which turned a finished run into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
