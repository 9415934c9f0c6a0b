"""A program shaped like transformers' examples/pytorch/question-answering/run_qa.py, as its users run it: from
its own folder, with its neighbour (utils_qa.py) imported by name, flat SQuAD JSON read with
load_dataset("json", field="data"), a relative --output_dir, the last checkpoint there resumed, and the Trainer's
own files written there (trainer_state.json, train_results.json, all_results.json). Not run_qa.py's code: the
tests submit it the way run_qa.py's README launches run_qa.py."""

import argparse
import os

from datasets import load_dataset
from transformers import (
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    Trainer,
    TrainingArguments,
    default_data_collator,
)
from transformers.trainer_utils import get_last_checkpoint
from utils_qa import prepare_train_features


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("--model_name_or_path", "--train_file", "--output_dir"):
        p.add_argument(name, required=True)
    p.add_argument("--do_train", action="store_true")
    p.add_argument("--do_eval", action="store_true")
    p.add_argument("--per_device_train_batch_size", type=int, default=12)
    p.add_argument("--learning_rate", type=float, default=3e-5)
    p.add_argument("--max_steps", type=int, default=-1)
    p.add_argument("--save_steps", type=int, default=500)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--doc_stride", type=int, default=32)
    p.add_argument("--max_train_samples", type=int)
    a = p.parse_args()
    raw = load_dataset("json", data_files={"train": a.train_file}, field="data")["train"]
    if a.max_train_samples:
        raw = raw.select(range(a.max_train_samples))
    tokenizer = AutoTokenizer.from_pretrained(a.model_name_or_path)
    features = raw.map(
        lambda b: prepare_train_features(b, tokenizer, a.max_seq_length, a.doc_stride),
        batched=True,
        remove_columns=raw.column_names,
    )
    last = get_last_checkpoint(a.output_dir) if os.path.isdir(a.output_dir) else None
    if last:
        print(f"Resuming training from checkpoint {last}", flush=True)
    args = TrainingArguments(
        output_dir=a.output_dir,
        use_cpu=True,
        per_device_train_batch_size=a.per_device_train_batch_size,
        learning_rate=a.learning_rate,
        max_steps=a.max_steps,
        save_steps=a.save_steps,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        seed=42,
    )
    model = AutoModelForQuestionAnswering.from_pretrained(a.model_name_or_path)
    trainer = Trainer(
        model=model, args=args, train_dataset=features, data_collator=default_data_collator
    )
    result = trainer.train(resume_from_checkpoint=last)
    trainer.save_metrics("train", {**result.metrics, "train_samples": len(features)})
    trainer.save_state()
    if (
        a.do_eval
    ):  # on the training features' spans (the test data has no other): run_qa.py's metric names
        out = trainer.predict(features)
        start, end = out.predictions[0].argmax(-1), out.predictions[1].argmax(-1)
        gold_s, gold_e = out.label_ids
        exact = float(((start == gold_s) & (end == gold_e)).mean() * 100)
        trainer.save_metrics(
            "eval", {"eval_exact_match": exact, "eval_f1": span_f1(start, end, gold_s, gold_e)}
        )


def span_f1(start, end, gold_s, gold_e) -> float:
    """Token-overlap F1 of the predicted spans with the gold ones, in percent."""
    scores = []
    for s, e, gs, ge in zip(start, end, gold_s, gold_e):
        common = max(0, min(e, ge) - max(s, gs) + 1)
        if common == 0 or e < s:
            scores.append(0.0)
            continue
        precision, recall = common / (e - s + 1), common / (ge - gs + 1)
        scores.append(2 * precision * recall / (precision + recall))
    return 100 * sum(scores) / max(len(scores), 1)


if __name__ == "__main__":
    main()
