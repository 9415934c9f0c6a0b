"""How close a run is to what its cores can do: model FLOPs per sample from the model's shapes, each rank's peak
from a short matmul benchmark at the run's precision (measured once per node shape, then cached), and the
run's model FLOP/s utilisation (MFU).

Model FLOPs, counted from the model itself (not from its name), per training sample of S tokens (the features
are padded to S = max_seq_length):
- dense layers: every nn.Linear's weight, 2 FLOPs (multiply, add) per weight per token: 2 x N_dense x S (the
  QKV/output projections, the feed-forward layers, the QA head; embedding lookups and layer norms are not
  matmuls and are left out, as in the usual 6N count);
- attention: per layer, QK^T and the weighted sum of V, each 2 x S x S x H FLOPs per sample: 4 x L x S^2 x H;
- training = forward + backward, the backward twice the forward: 3 x (the two above).
MFU = model FLOPs per sample x samples per second (all ranks) / the sum of the ranks' measured peaks. It counts
the work the model needs, not what the run executed (padding, recomputation, emulated bf16 are not "useful").
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

from hpcqa.fsutil import atomic_write_text

PEAK_SIZE = 1024          # matmul n: big enough to be compute-bound, small enough for a 1-core node
PEAK_SECONDS = 0.6


def model_flops(model: Any, seq_len: int) -> dict:
    """Training FLOPs per sample of `seq_len` tokens, counted from the model's Linear layers and attention shape."""
    import torch

    dense = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cfg = getattr(model, "config", None)
    layers = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layers", 0) or 0)
    hidden = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "dim", 0) or 0)
    forward = 2 * dense * seq_len + 4 * layers * seq_len * seq_len * hidden
    return {"per_sample": 3 * forward, "forward_per_sample": forward, "dense_weights": dense, "layers": layers,
            "hidden": hidden, "seq_len": seq_len,
            "method": "3 x (2 x Linear weights x S + 4 x layers x S^2 x hidden): forward + backward (2x forward)"}


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
    import torch
    return f"{_cpu_model()} | {cpus} cpus, {threads} threads | {precision} | torch {torch.__version__}"


def measure_peak(precision: str, size: int = PEAK_SIZE, seconds: float = PEAK_SECONDS) -> float:
    """FLOP/s of square matmuls on this process's threads and CPUs, at the run's precision. Its operands come from a
    generator of its own: measured after the seed is set, it must not move the global one (the first run on a node
    shape measures, later ones read the store -- with the global generator they trained on other dropout masks)."""
    import torch

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


def summary(flops: dict, samples_per_second: float | None, peaks: list[float], precision: str,
            peak_source: str) -> dict:
    """results.json's "efficiency": achieved model FLOP/s and MFU against the ranks' summed peaks."""
    achieved = flops["per_sample"] * samples_per_second if samples_per_second else None
    total = sum(peaks)
    return {"model_flops_per_sample": flops["per_sample"], "achieved_flops": achieved, "peak_flops": total,
            "peak_flops_per_rank": peaks, "mfu": achieved / total if achieved and total else None,
            "precision": precision, "peak_source": peak_source, "flops_method": flops["method"],
            "dense_weights": flops["dense_weights"], "layers": flops["layers"], "hidden": flops["hidden"],
            "seq_len": flops["seq_len"]}
