"""What the throughput benchmarks share: a real `hpcqa submit` on the local executor, read back from the
results.json rank 0 wrote, and the markdown table for BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def submit(config: str, overrides: list[str], env: dict[str, str] | None = None) -> dict:
    """-> the job's results.json, or {"error": [last line]} when the submission failed."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [sys.executable, "-m", "hpcqa", "submit", config]
        for o in overrides + [f"job.output_dir={json.dumps(tmp)}"]:
            args += ["--set", o]
        r = subprocess.run(
            args, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})}
        )
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout).strip().splitlines()[-1:]}
        (res,) = Path(tmp).glob("*/*/results.json")
        out = json.loads(res.read_text())
        # each rank's own usage (peak RSS, CPU seconds), which results.json does not carry
        out["rank_usage"] = [
            json.loads(p.read_text()).get("usage")
            for p in sorted(res.parent.glob("ranks/rank-*.json"))
            if not p.name.endswith(".phase.json")
        ]
        return out


def recipe_shape(seq: int) -> list[str]:
    """Overrides of configs/quickstart.toml for a sequence length: at 128 none; longer, the recipe's shape (SQuAD-
    shaped questions, doc stride 128, batch 12 per rank) with fewer examples, so that a run stays minutes."""
    out = [f"train.max_seq_length={seq}"]
    if seq > 128:
        out += [
            "data.synthetic_train_examples=300",
            "data.synthetic_eval_examples=60",
            "train.doc_stride=128",
            "train.per_device_train_batch_size=12",
            "data.synthetic_shape=squad",
        ]
    return out


def markdown(title: str, metric: str, rows: list[tuple[str, str, float | None, object]]) -> None:
    """rows: (layout, precision, samples/s or None, error)."""
    print(f"\n| {title} | precision | {metric} |")
    print("|---|---|---|")
    for name, prec, sps, _ in rows:
        print(f"| {name} | {prec} | {sps:.2f} |" if sps else f"| {name} | {prec} | failed |")
