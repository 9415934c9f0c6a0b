"""The fused attention kernel alone (hpcqa/rank/train/csrc/fused_attention.cpp), against what it replaces.

    python benchmarks/fused_bench.py [--batch 12] [--heads 12] [--seq 384] [--head-dim 32] [--reps 4] [--markdown]

One thread, thread CPU time, best of --reps, variants interleaved:
- per element of the S x S scores: the fused forward pass (scale, padding mask, softmax, dropout; writes the
  probabilities and the dropped ones) and backward pass, against torch's softmax alone and a plain copy (the memory
  floor of one read and one write);
- one attention layer forward + backward at the shape (MiniLM: 12 heads of 32, DistilBERT: 12 of 64): hpcqa's
  unfused attention (the fallback) against the fused one, with dropout 0.1 and a padding mask.
Run it with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776 (glibc-heap, as a rank's launch.malloc): else each
fresh S x S output is page-faulted in, and that, not the kernel, is what is timed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from hpcqa.rank.train import attention, fused  # noqa: E402
from hpcqa.rank.train.facts import cpu_flags  # noqa: E402


def best(f, reps: int) -> float:
    out = float("inf")
    for _ in range(reps):
        t = time.thread_time()
        f()
        out = min(out, time.thread_time() - t)
    return out


def machine() -> str:
    flags = cpu_flags()
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    isa = "AMX" if "amx_bf16" in flags else "no AMX"
    return f"{model}, {isa}, {'avx512_bf16' if 'avx512_bf16' in flags else 'no avx512_bf16'}"


def passes(b: int, h: int, s: int, d: int, reps: int) -> list[tuple]:
    n = b * h * s * s
    mask = (torch.arange(s)[None, :] < torch.randint(s // 2, s + 1, (b,))[:, None])[
        :, None, None, :
    ].expand(b, 1, s, s)
    rows = []
    for dt in (torch.float32, torch.bfloat16):
        s0 = torch.randn(b, h, s, s, dtype=dt)
        sc, g = s0.clone(), s0.clone()
        ops = torch.ops.hpcqa_fused
        fwd = best(lambda: ops.softmax_dropout_fwd(sc, mask, d**-0.5, 0.1, 7), reps)
        bwd = best(lambda: ops.softmax_dropout_bwd(g, sc, d**-0.5, 0.1, 7), reps)
        soft = best(lambda: torch.softmax(s0, -1), reps)
        copy = best(lambda: sc.copy_(s0), reps)
        rows.append((str(dt).split(".")[1], *(x / n * 1e9 for x in (fwd, bwd, soft, copy))))
    return rows


def layer(b: int, h: int, s: int, d: int, reps: int) -> list[tuple]:
    class Training(nn.Module):
        training = True

    m = Training()
    mask = (torch.arange(s)[None, :] < torch.randint(s // 2, s + 1, (b,))[:, None])[
        :, None, None, :
    ].expand(b, 1, s, s)

    def unfused(q, k, v):
        return attention.attention_forward(m, q, k, v, mask, dropout=0.1)[0]

    def fuse(q, k, v):
        return fused.fused_attention(q, k, v, mask, d**-0.5, 0.1).transpose(1, 2).contiguous()

    rows = []
    for dt in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(b, h, s, d, dtype=dt, requires_grad=True) for _ in range(3))
        g = torch.randn(b, s, h, d, dtype=dt)
        times: dict[str, list[float]] = {"unfused": [], "fused": []}
        for _ in range(reps):  # interleaved A B A B
            for name, f in (("unfused", unfused), ("fused", fuse)):
                t = time.thread_time()
                f(q, k, v).backward(g)
                times[name].append(time.thread_time() - t)
        a, c = min(times["unfused"]), min(times["fused"])
        rows.append((str(dt).split(".")[1], a * 1e3, c * 1e3, a / c))
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=384)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    loaded, what = fused.load(cpu_flags())
    if not loaded:
        print(f"fused kernel not loaded: {what}", file=sys.stderr)
        return 1
    shape = (a.batch, a.heads, a.seq, a.head_dim)
    print(
        f"{machine()}; {what}; batch {a.batch}, {a.heads} heads of {a.head_dim}, seq {a.seq}, 1 thread"
    )
    print(
        "| dtype | fused forward ns/el | fused backward ns/el | torch softmax ns/el | copy ns/el |"
    )
    print("|---|---|---|---|---|")
    for r in passes(*shape, a.reps):
        print("| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |".format(*r))
    print()
    print("| dtype | unfused layer fwd+bwd ms | fused ms | ratio |")
    print("|---|---|---|---|")
    for r in layer(*shape, a.reps):
        print("| {} | {:.1f} | {:.1f} | {:.2f}x |".format(*r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
