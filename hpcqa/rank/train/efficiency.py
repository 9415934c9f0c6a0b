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
when it was measured on quiet cores and a short re-measure at the end of training found it where it was
(peakcheck: a peak that moved during the job withholds the MFU). How it was taken travels with it into
results.json. An MFU over 100 % is reported as an unreliable peak, never as a figure.
"""

from __future__ import annotations

import hashlib
import json
import platform
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed as dist

from hpcqa import fsutil
from hpcqa.fsutil import atomic_write_text
from hpcqa.rank.train import peakcheck
from hpcqa.record import caches

if TYPE_CHECKING:
    from hpcqa.rank.train.facts import Rank

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


def measure_peak(
    precision: str, size: int = PEAK_SIZE, seconds: float = PEAK_SECONDS, runs: int = PEAK_RUNS
) -> dict:
    """Square matmuls on this process's threads and CPUs at the run's precision, in `runs` short runs (PEAK_RUNS
    before training; the end-of-training check takes fewer, peakcheck.END_RUNS). Each run
    records its FLOP/s and the CPU time the process got (all its threads) against wall time x threads: on cores
    another process shares, the rank gets less CPU than it asked for and its runs spread. -> {"flops": the best
    run, "cpu_share", "spread", "quiet", "runs"}. Quiet: every run got QUIET_CPU_SHARE of its cores and the runs
    agree within QUIET_SPREAD; only a quiet peak is cached (remember()). The first run that was not quiet ends the
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
    done = []
    for _ in range(runs):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            torch.matmul(a, b)
            n += 1
            wall = time.perf_counter() - t0
            if wall >= seconds / runs and n >= 2:
                break
        share = (time.process_time() - c0) / (wall * threads)
        done.append({"flops": 2 * size**3 * n / wall, "cpu_share": round(min(share, 1.0), 3)})
        if share < QUIET_CPU_SHARE:
            break  # busy cores: not quiet whatever the other runs show
    rates = [r["flops"] for r in done]
    best, worst = max(rates), min(rates)
    share = min(r["cpu_share"] for r in done)
    spread = (best - worst) / best
    return {
        "flops": best,
        "cpu_share": share,
        "spread": round(spread, 3),
        "threads": threads,
        "size": size,
        "precision": precision,
        "quiet": share >= QUIET_CPU_SHARE and spread <= QUIET_SPREAD,
        "runs": done,
    }


def peak(
    store: Path,
    cpus: int,
    threads: int,
    precision: str,
    measure: Callable[[str], dict] = measure_peak,
) -> dict:
    """This rank's peak before training and how it was taken: {"flops", "source", "quiet", "size", "precision",
    "threads", "runs", "spread", "cpu_share", "measured_at", "measured_on"}. "cached" when a quiet measurement of
    this shape is in the store (its date and host are the cache's); else measured now. Nothing is stored here: a
    quiet measurement is kept only once the end of training found it where it was (remember). An entry from
    before the quiet check (a bare number) is not trusted and is measured again."""
    key = shape_key(cpus, threads, precision)
    known = caches.read_store(store, "the peak store", "remove it; the next job measures again")
    entry = known.get(key)
    if (
        isinstance(entry, dict)
        and entry.get("quiet") is True
        and isinstance(entry.get("flops"), (int, float))
        and entry["flops"] > 0
    ):
        return {
            "size": PEAK_SIZE,
            "precision": precision,
            "threads": threads,
            "runs": PEAK_RUNS,
            **{k: entry.get(k) for k in ("size", "runs", "spread", "cpu_share", "measured_at")},
            "measured_on": entry.get("host"),
            "flops": float(entry["flops"]),
            "quiet": True,
            "source": "cached",
        }
    m = measure(precision)
    source = (
        "measured"
        if m["quiet"]
        else f"measured on busy cores (CPU share {m['cpu_share']:.2f}, spread {m['spread']:.2f}): not cached"
    )
    return {
        "size": m.get("size", PEAK_SIZE),
        "precision": precision,
        "threads": m.get("threads", threads),
        "runs": len(m.get("runs") or []),
        "spread": m["spread"],
        "cpu_share": m["cpu_share"],
        "measured_at": time.time(),
        "measured_on": platform.node(),
        "flops": m["flops"],
        "quiet": bool(m["quiet"]),
        "source": source,
    }


def end_peak(precision: str, measure: Callable[..., dict] = measure_peak) -> dict:
    """The short re-measure at the end of training (peakcheck.END_RUNS runs in END_SECONDS) -> {"flops", "quiet",
    "cpu_share", "spread", "runs", "seconds"}."""
    t0 = time.perf_counter()
    m = measure(precision, runs=peakcheck.END_RUNS, seconds=peakcheck.END_SECONDS)
    return {
        "flops": m["flops"],
        "quiet": bool(m["quiet"]),
        "cpu_share": m["cpu_share"],
        "spread": m["spread"],
        "runs": len(m.get("runs") or []),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def remember(store: Path, cpus: int, start: dict, end: dict | None) -> bool:
    """Cache this rank's start peak for its node shape (written whole, so concurrent ranks never read half a file)
    when peakcheck.keepable: measured this job on quiet cores and still there at the end of training -- a peak
    taken on busy cores, or one that moved, would make every later MFU of the shape wrong. -> whether it was."""
    if not peakcheck.keepable(start, end):
        return False
    key = shape_key(cpus, start["threads"], start["precision"])
    known = caches.read_store(store, "the peak store", "remove it; the next job measures again")
    entry = {
        k: start[k]
        for k in ("flops", "quiet", "cpu_share", "spread", "measured_at", "size", "runs")
    }
    store.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        store,
        json.dumps(
            {**known, key: {**entry, "host": start.get("measured_on")}}, indent=1, sort_keys=True
        ),
    )
    return True


PEAK_METHOD = f"measured: {PEAK_SIZE}x{PEAK_SIZE} matmuls at the run's precision on each rank's cores and threads"


def summary(
    flops: dict,
    samples_per_second: float | None,
    peaks: list[float],
    precision: str,
    peak_source: str,
    counts: dict | None = None,
    store: str = "",
    provenance: list[dict] | None = None,
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
    return peakcheck.flag(out, provenance) if provenance else out


def rank_peak(r: Rank, bf16: bool) -> dict:
    """This rank's matmul peak at the run's precision on its own cores before training, and how it was taken
    (peak: cached per node shape, or measured now), with the rank, its host and its CPUs."""
    store = caches.Caches.for_data_cache(r.plan.config.data.cache_dir).peak_store()
    cpus = list(r.report.get("cpus") or [])
    start = peak(store, len(cpus) or 1, torch.get_num_threads(), "bf16" if bf16 else "fp32")
    start.update(rank=r.rank, host=socket.gethostname(), cpus=cpus)
    r.save_report(peak_flops=start["flops"], peak_source=start["source"], peak=start)
    return start


def run_efficiency(
    r: Rank,
    model: torch.nn.Module,
    data: dict,
    timing: dict,
    start: dict,
    bf16: bool,
    counts: dict | None = None,
) -> dict:
    """The peak measured again, short, at the end of training on each rank (and the start one cached if it held);
    every rank's peaks and token counts (gathered); the model's FLOPs per sample, the run's achieved FLOP/s and MFU
    on text tokens and on all tokens -- withheld when a rank's peak moved during the job (peakcheck)."""
    store = caches.Caches.for_data_cache(r.plan.config.data.cache_dir).peak_store()
    start = {**start, "end": end_peak(start["precision"])}
    r.log(
        f"peak {start['flops'] / 1e9:.1f} GFLOP/s ({start['source']}), at the end of training "
        f"{start['end']['flops'] / 1e9:.1f} ({'moved' if peakcheck.moved(start['flops'], start['end']['flops']) else 'held'})"
    )
    mine = (start, counts or new_counts())
    gathered: list = [mine]
    if dist.is_available() and dist.is_initialized():
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
    provenance = [p for p, _ in gathered]
    inner = model.module if hasattr(model, "module") else model
    rate = timing.get("steady_samples_per_second") or timing.get("train_samples_per_second")
    sources = {p["source"] for p in provenance}
    out = summary(
        model_flops(inner, data["max_seq_length"]),
        rate,
        [p["flops"] for p in provenance],
        start["precision"],
        sources.pop() if len(sources) == 1 else "mixed",
        add_counts([c for _, c in gathered]),
        store=str(store),
        provenance=provenance,
    )
    r.save_report(peak_end=start["end"], peak_cached=keep(store, start, out))
    return out


def keep(store: Path, start: dict, out: dict) -> bool:
    """Cache this rank's start peak (remember) unless the job's efficiency says no MFU could be given against it: a
    peak the run beat is wrong however quiet its runs looked (a neighbour on the core through both measurements
    that left during training; a CI run measured 36 GFLOP/s at start and end and trained faster). -> whether kept."""
    if "mfu_unreliable" in out:
        return False
    return remember(store, len(start.get("cpus") or []) or 1, start, start.get("end"))
