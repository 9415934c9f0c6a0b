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
cores and threads (measure_peak), once per node shape (the silicon, not its marketing name), then cached -- only
when it was measured on quiet cores. An MFU over 100 % is reported as an unreliable peak, never as a figure.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path
from typing import Any, Callable

import torch

from hpcqa import fsutil
from hpcqa.fsutil import atomic_write_text
from hpcqa.record import caches

PEAK_SIZE = 1024  # matmul n: big enough to be compute-bound, small enough for a 1-core node
PEAK_SECONDS = 0.6


def model_flops(model: Any, seq_len: int) -> dict:
    """Training FLOPs per sample of `seq_len` tokens, counted from the model's Linear layers and attention shape."""

    dense = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cfg = getattr(model, "config", None)
    layers = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layers", 0) or 0)
    hidden = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "dim", 0) or 0)
    forward = 2 * dense * seq_len + 4 * layers * seq_len * seq_len * hidden
    return {
        "per_sample": 3 * forward,
        "forward_per_sample": forward,
        "dense_weights": dense,
        "layers": layers,
        "hidden": hidden,
        "seq_len": seq_len,
        "method": "3 x (2 x Linear weights x S + 4 x layers x S^2 x hidden): forward + backward (2x forward)",
    }


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
    return 3 * (
        2 * flops["dense_weights"] * mean_s + 4 * flops["layers"] * mean_sq * flops["hidden"]
    )


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        first = fsutil.read_kernel(Path("/proc/cpuinfo")).split("\n\n", 1)[0]
    except OSError:
        return {}
    return {
        k.strip(): v.strip()
        for k, _, v in (line.partition(":") for line in first.splitlines())
        if k.strip()
    }


def silicon() -> str:
    """What identifies the silicon, not the marketing string (under KVM the model name can be just "AMD EPYC" for
    several generations): vendor, family, model, stepping and a digest of the feature flags (AVX-512, AMX ...),
    with the model name for the reader."""
    info = _cpuinfo()
    if not info:
        return platform.processor() or platform.machine()
    flags = hashlib.sha256(" ".join(sorted(info.get("flags", "").split())).encode()).hexdigest()[
        :12
    ]
    return (
        f"{info.get('vendor_id', '?')} family {info.get('cpu family', '?')} model {info.get('model', '?')} "
        f"stepping {info.get('stepping', '?')} flags {flags} ({info.get('model name', '?')})"
    )


def shape_key(cpus: int, threads: int, precision: str) -> str:
    """A node shape for the cache: the silicon, the rank's CPUs and threads, the precision, torch's version."""
    return f"{silicon()} | {cpus} cpus, {threads} threads | {precision} | torch {torch.__version__}"


PEAK_RUNS = (
    5  # short runs: the best is the peak, their spread and CPU share say whether it was quiet
)
QUIET_CPU_SHARE = 0.85  # of the wall time x threads: below it, something else ran on these cores
QUIET_SPREAD = (
    0.15  # (best - worst) / best of the runs: above it, the rate moved under the measurement
)


def measure_peak(precision: str, size: int = PEAK_SIZE, seconds: float = PEAK_SECONDS) -> dict:
    """Square matmuls on this process's threads and CPUs at the run's precision, in PEAK_RUNS short runs. Each run
    records its FLOP/s and the CPU time the process got (all its threads) against wall time x threads: on cores
    another process shares, the rank gets less CPU than it asked for and its runs spread. -> {"flops": the best
    run, "cpu_share", "spread", "quiet", "runs"}. Quiet: every run got QUIET_CPU_SHARE of its cores and the runs
    agree within QUIET_SPREAD; only a quiet peak is cached (peak()). The first run that was not quiet ends the
    measurement: it can no longer be quiet, and on a busy node (a shared one, a CI machine) the other runs would
    cost their wall time at every rank start for a number reported as unreliable either way. Its operands come from
    a generator of its own: measured after the seed is set, it must not move the global one (the first run on a
    node shape measures, later ones read the store -- with the global generator they trained on other dropout
    masks)."""

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    threads = max(1, torch.get_num_threads())
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=g, dtype=dtype) for _ in range(2))
    torch.matmul(a, b)  # warm-up: first call picks kernels and touches memory
    runs = []
    for _ in range(PEAK_RUNS):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            torch.matmul(a, b)
            n += 1
            wall = time.perf_counter() - t0
            if wall >= seconds / PEAK_RUNS and n >= 2:
                break
        share = (time.process_time() - c0) / (wall * threads)
        runs.append({"flops": 2 * size**3 * n / wall, "cpu_share": round(min(share, 1.0), 3)})
        if share < QUIET_CPU_SHARE:
            break  # busy cores: not quiet whatever the other runs show
    rates = [r["flops"] for r in runs]
    best, worst = max(rates), min(rates)
    share = min(r["cpu_share"] for r in runs)
    spread = (best - worst) / best
    return {
        "flops": best,
        "cpu_share": share,
        "spread": round(spread, 3),
        "threads": threads,
        "quiet": share >= QUIET_CPU_SHARE and spread <= QUIET_SPREAD,
        "runs": runs,
    }


def peak(
    store: Path,
    cpus: int,
    threads: int,
    precision: str,
    measure: Callable[[str], dict] = measure_peak,
) -> tuple[float, str]:
    """(FLOP/s, where it came from): "cached" when a quiet measurement of this shape is in the store; else measured
    now -- and stored (written whole, so concurrent ranks never read half a file) only when it was quiet: a peak
    taken on busy cores would make every later MFU of the shape too high. An entry from before the quiet check (a
    bare number) is not trusted and is measured again."""
    key = shape_key(cpus, threads, precision)
    known = caches.read_store(store, "the peak store", "remove it; the next job measures again")
    entry = known.get(key)
    if (
        isinstance(entry, dict)
        and entry.get("quiet") is True
        and isinstance(entry.get("flops"), (int, float))
        and entry["flops"] > 0
    ):
        return float(entry["flops"]), "cached"
    m = measure(precision)
    if not m["quiet"]:
        return m["flops"], (
            f"measured on busy cores (CPU share {m['cpu_share']:.2f}, spread {m['spread']:.2f}): "
            "not cached"
        )
    store.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        store,
        json.dumps(
            {
                **known,
                key: {
                    "flops": m["flops"],
                    "quiet": True,
                    "cpu_share": m["cpu_share"],
                    "spread": m["spread"],
                    "measured_at": time.time(),
                },
            },
            indent=1,
            sort_keys=True,
        ),
    )
    return m["flops"], "measured"


PEAK_METHOD = f"measured: {PEAK_SIZE}x{PEAK_SIZE} matmuls at the run's precision on each rank's cores and threads"


def summary(
    flops: dict,
    samples_per_second: float | None,
    peaks: list[float],
    precision: str,
    peak_source: str,
    counts: dict | None = None,
    store: str = "",
) -> dict:
    """results.json's "efficiency": achieved model FLOP/s and MFU against the ranks' summed measured peaks, on the
    tokens that carry text and on all tokens (padding included). An MFU over 100 % says the peak is wrong (measured
    on busy cores, or another machine's), not that the run beat the cores: it is not given as a figure but under
    "mfu_unreliable", with why and how to measure again."""
    total = sum(peaks)
    out = {
        "peak_flops": total,
        "peak_flops_per_rank": peaks,
        "precision": precision,
        "peak_source": peak_source,
        "peak_method": PEAK_METHOD,
        "flops_method": flops["method"],
        "dense_weights": flops["dense_weights"],
        "layers": flops["layers"],
        "hidden": flops["hidden"],
        "seq_len": flops["seq_len"],
    }
    for which, suffix in (("text", ""), ("all", "_all_tokens")):
        f = per_sample(flops, counts, which)
        achieved = f * samples_per_second if samples_per_second else None
        out[f"model_flops_per_sample{suffix}"] = f
        out[f"achieved_flops{suffix}"] = achieved
        out[f"mfu{suffix}"] = achieved / total if achieved and total else None
    over = [out[k] for k in ("mfu", "mfu_all_tokens") if out[k] is not None and out[k] > 1.0]
    if over:
        out["mfu_unreliable"] = {
            "mfu": out["mfu"],
            "mfu_all_tokens": out["mfu_all_tokens"],
            "why": f"the run achieved more than the measured peak ({total / 1e9:.1f} GFLOP/s, {peak_source}): the "
            "peak is wrong -- measured while the cores were busy, or on other silicon",
            "fix": f"delete {store or 'peaks.json in the data cache (<cache>/hpcqa/peaks.json)'} (or its entry "
            "for this shape) and run again on quiet cores: the peak is measured again",
        }
        out["mfu"] = out["mfu_all_tokens"] = None
    if counts and counts.get("samples"):
        out["tokens"] = {
            "samples": counts["samples"],
            "text_per_sample": counts["text"] / counts["samples"],
            "all_per_sample": counts["all"] / counts["samples"],
            "padding_share": 1 - counts["text"] / counts["all"] if counts["all"] else 0.0,
        }
    return out
