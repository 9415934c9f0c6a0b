"""The QA evaluation of a rank: predict on every rank (DDP gathers), post-process the logits into answers
(postprocess), score them by the official SQuAD rules of the data's version (metrics), write run_qa.py's files."""

from __future__ import annotations

import time
from typing import Any

from transformers import Trainer

from hpcqa.rank.train import metrics, postprocess
from hpcqa.rank.train.facts import Rank
from hpcqa.record.jobdir import write_json
from hpcqa.record.phases import Phase


def _split_index(data: dict, split: str) -> dict:
    """What post-processing and scoring read of a split (examples, feature offsets, golds), taken from the
    datasets once per split, not at every evaluation during training."""
    key = f"{split}_index"
    if key not in data:
        raw, features = data[f"{split}_raw"], data[f"{split}_features"]
        data[key] = {
            "examples": [{"id": i, "context": c} for i, c in zip(raw["id"], raw["context"])],
            "features": [
                {"example_id": e, "offset_mapping": o}
                for e, o in zip(features["example_id"], features["offset_mapping"])
            ],
            "golds": {i: a["text"] for i, a in zip(raw["id"], raw["answers"])},
            "first_facts": dict(zip(raw["id"], raw["first_fact"]))
            if "first_fact" in raw.column_names
            else {},
        }
    return data[key]


def score(
    r: Rank, data: dict, split: str, predictions: Any, with_golds: bool = True
) -> tuple[dict[str, Any], postprocess.Predictions]:
    """Logits of a split ("eval" or "test") -> (scores by the official rules of the data's version,
    postprocess.Predictions)."""
    cfg = r.plan.config
    v2 = cfg.data.version_2_with_negative
    index = _split_index(data, split)
    start_logits, end_logits = predictions[:2]
    out = postprocess.postprocess(
        index["examples"],
        index["features"],
        start_logits,
        end_logits,
        n_best_size=cfg.train.n_best_size,
        max_answer_length=cfg.train.max_answer_length,
        version_2_with_negative=v2,
        null_score_diff_threshold=cfg.train.null_score_diff_threshold,
    )
    if not with_golds:
        return {}, out
    golds = index["golds"]
    # v2: the official script fed our null odds and our threshold (--na-prob-file, --na-prob-thresh)
    result: dict[str, Any] = dict(
        metrics.squad_scores(
            golds,
            out.answers,
            v2,
            out.null_odds if v2 else None,
            cfg.train.null_score_diff_threshold,
        )
    )
    if any(index["first_facts"].values()):
        base = metrics.squad_scores(golds, index["first_facts"], v2)
        result["baseline"] = {
            "name": "first_fact (answer with the context's first fact)",
            "exact_match": base["exact_match"],
            "f1": base["f1"],
        }
    return result, out


def _write_predictions(r: Rank, stage: str, out: postprocess.Predictions) -> dict:
    files = {"predictions": out.answers, "nbest_predictions": out.nbest}
    if r.plan.config.data.version_2_with_negative:
        files["null_odds"] = out.null_odds
    paths = {}
    for kind, content in files.items():
        path = r.jd.predictions(stage, kind)
        write_json(path, content)
        paths[kind] = str(path)
    return paths


def evaluate(r: Rank, trainer: Trainer, data: dict) -> dict:
    """Predict on every rank (DDP gathers); rank 0 post-processes, scores and writes run_qa's files."""
    r.phases.enter(Phase.EVALUATING)
    t0 = time.time()
    pred = trainer.predict(data["eval_features"])
    eval_time = time.time() - t0
    if r.rank != 0:
        return {}
    result, out = score(r, data, "eval", pred.predictions)
    result["files"] = _write_predictions(r, "eval", out)
    result.update(
        eval_runtime_s=eval_time,
        eval_samples_per_second=len(data["eval_features"]) / eval_time,
        eval_examples=len(data["eval_raw"]),
        eval_features=len(data["eval_features"]),
    )
    return result


def predict(r: Rank, trainer: Trainer, data: dict) -> dict:
    """The test split (train.do_predict): answers without scores, in predict_*.json."""
    r.phases.enter(Phase.PREDICTING)
    t0 = time.time()
    pred = trainer.predict(data["test_features"])
    if r.rank != 0:
        return {}
    _, out = score(r, data, "test", pred.predictions, with_golds=False)
    return {
        "files": _write_predictions(r, "predict", out),
        "examples": len(data["test_raw"]),
        "features": len(data["test_features"]),
        "runtime_s": time.time() - t0,
    }
