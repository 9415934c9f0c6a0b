"""How close a run is to what its cores can do: model FLOPs per sample from the model's shapes, each rank's peak
from a short matmul benchmark at the run's precision (measured once per node shape, then cached), and the
run's model FLOP/s utilisation (MFU).

Model FLOPs, counted from the model itself (not from its name), per training sample of S tokens:
- dense layers: every nn.Linear's weight, 2 FLOPs (multiply, add) per weight per token: 2 x N_dense x S (the
  QKV/output projections, the feed-forward layers, the QA head; embedding lookups and layer norms are not
  matmuls and are left out, as in the usual 6N count);
- attention: per layer, QK^T and the weighted sum of V, each 2 x S x S x H FLOPs per sample: 4 x L x S^2 x H;
- training = forward + backward, the backward twice the forward: 3 x (the two above).
The ranks count the tokens of every batch they train on (count_batch): the tokens that carry text (the attention
mask) and all tokens (padding included). Two MFUs follow, each = model FLOPs per sample x samples per second (all
ranks) / the sum of the ranks' peaks:
- on text tokens (`mfu`): the work the model needs -- padding, recomputation, emulated bf16 are not "useful";
- on all tokens (`mfu_all_tokens`): the work the cores did, padding included (padding to max_seq_length makes
  this one high and the first one low).
The peak is measured, not the CPU's specification: square matmuls at the run's precision on each rank's own
cores and threads (measure_peak), once per node shape, then cached.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from hpcqa.fsutil import atomic_write_text

PEAK_SIZE = 1024          # matmul n: big enough to be compute-bound, small enough for a 1-core node
PEAK_SECONDS = 0.6


def model_flops(model: Any, seq_len: int) -> dict:
    """Training FLOPs per sample of `seq_len` tokens, counted from the model's Linear layers and attention shape."""

    dense = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cfg = getattr(model, "config", None)
    layers = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layers", 0) or 0)
    hidden = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "dim", 0) or 0)
    forward = 2 * dense * seq_len + 4 * layers * seq_len * seq_len * hidden
    return {"per_sample": 3 * forward, "forward_per_sample": forward, "dense_weights": dense, "layers": layers,
            "hidden": hidden, "seq_len": seq_len,
            "method": "3 x (2 x Linear weights x S + 4 x layers x S^2 x hidden): forward + backward (2x forward)"}


def new_counts() -> dict:
    """Token counts of the batches a rank trained on: samples, sum of S and of S^2, for text and for all tokens."""
    return {"samples": 0, "text": 0, "text_sq": 0, "all": 0, "all_sq": 0}


def count_batch(counts: dict, input_ids, attention_mask=None) -> None:
    """Add one batch (tensors [batch, S]) to `counts`."""
    b, s = (int(x) for x in input_ids.shape[:2])
    counts["samples"] += b
    counts["all"] += b * s
    counts["all_sq"] += b * s * s
    if attention_mask is None:
        counts["text"] += b * s
        counts["text_sq"] += b * s * s
        return
    text = attention_mask.sum(dim=1).long()
    counts["text"] += int(text.sum())
    counts["text_sq"] += int((text * text).sum())


def add_counts(parts: list[dict]) -> dict:
    total = new_counts()
    for c in parts:
        for k in total:
            total[k] += int((c or {}).get(k) or 0)
    return total


def per_sample(flops: dict, counts: dict | None, which: str) -> float:
    """Training FLOPs per sample averaged over the batches counted ("text" or "all" tokens); without counts, a
    sample of flops["seq_len"] tokens."""
    if not counts or not counts.get("samples"):
        return float(flops["per_sample"])
    n = counts["samples"]
    mean_s, mean_sq = counts[which] / n, counts[f"{which}_sq"] / n
    return 3 * (2 * flops["dense_weights"] * mean_s + 4 * flops["layers"] * mean_sq * flops["hidden"])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def shape_key(cpus: int, threads: int, precision: str) -> str:
    """A node shape for the cache: the CPU model, the rank's CPUs and threads, the precision, torch's version."""
    return f"{_cpu_model()} | {cpus} cpus, {threads} threads | {precision} | torch {torch.__version__}"


def measure_peak(precision: str, size: int = PEAK_SIZE, seconds: float = PEAK_SECONDS) -> float:
    """FLOP/s of square matmuls on this process's threads and CPUs, at the run's precision. Its operands come from a
    generator of its own: measured after the seed is set, it must not move the global one (the first run on a node
    shape measures, later ones read the store -- with the global generator they trained on other dropout masks)."""

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=g, dtype=dtype) for _ in range(2))
    torch.matmul(a, b)  # warm-up: first call picks kernels and touches memory
    n, t0 = 0, time.perf_counter()
    while True:
        torch.matmul(a, b)
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and n >= 2:
            return 2 * size ** 3 * n / elapsed


def peak(store: Path, cpus: int, threads: int, precision: str) -> tuple[float, str]:
    """(FLOP/s, "cached" or "measured"): from the store when this shape was measured before, else measured now
    and stored (written whole, so concurrent ranks never read half a file)."""
    key = shape_key(cpus, threads, precision)
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known.get(key), (int, float)):
        return float(known[key]), "cached"
    value = measure_peak(precision)
    store.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(store, json.dumps({**known, key: value}, indent=1, sort_keys=True))
    return value, "measured"


PEAK_METHOD = f"measured: {PEAK_SIZE}x{PEAK_SIZE} matmuls at the run's precision on each rank's cores and threads"


def summary(flops: dict, samples_per_second: float | None, peaks: list[float], precision: str,
            peak_source: str, counts: dict | None = None) -> dict:
    """results.json's "efficiency": achieved model FLOP/s and MFU against the ranks' summed measured peaks, on the
    tokens that carry text and on all tokens (padding included)."""
    total = sum(peaks)
    out = {"peak_flops": total, "peak_flops_per_rank": peaks, "precision": precision, "peak_source": peak_source,
           "peak_method": PEAK_METHOD, "flops_method": flops["method"], "dense_weights": flops["dense_weights"],
           "layers": flops["layers"], "hidden": flops["hidden"], "seq_len": flops["seq_len"]}
    for which, suffix in (("text", ""), ("all", "_all_tokens")):
        f = per_sample(flops, counts, which)
        achieved = f * samples_per_second if samples_per_second else None
        out[f"model_flops_per_sample{suffix}"] = f
        out[f"achieved_flops{suffix}"] = achieved
        out[f"mfu{suffix}"] = achieved / total if achieved and total else None
    if counts and counts.get("samples"):
        out["tokens"] = {"samples": counts["samples"], "text_per_sample": counts["text"] / counts["samples"],
                         "all_per_sample": counts["all"] / counts["samples"],
                         "padding_share": 1 - counts["text"] / counts["all"] if counts["all"] else 0.0}
    return out
