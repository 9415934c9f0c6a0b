"""bf16 training step: fp32 weights under autocast against bf16 weights with fp32 master weights (issue 73, item 3).

    python benchmarks/master_bench.py [--model minilm|distilbert] [--steps 6] [--loss-steps 30]
        [--loss-seeds 42,43,44] [--attn fused|hpcqa|sdpa] [--batch 12] [--seq 384]

One thread, batch 12 x 384 (the last quarter of every second sequence padding), the default step recipe
(attention_bench.py's build: fused attention, bulk dropout masks), forward + backward + gradient clipping at 1.0 (the
Trainer's max_grad_norm) + fused AdamW, as a rank runs it:

- autocast: the fp32 model under torch.autocast(bf16) (train.bf16_weights = "autocast"): every step casts the
  weights to bf16, LayerNorm returns fp32 and every Linear casts its input again, the gradients come back in fp32;
- master: the model in bf16 (hpcqa.rank.train.master.to_bf16: the QA logits upcast), MasterAdamW over fp32
  masters (train.bf16_weights = "master").

Each variant is its own copy of the same initial weights; their steps are interleaved A B A B and timed in thread
CPU time (a shared VM's wall time moves). --loss-steps trains a fresh copy of each per seed on the same batches:
the losses agree within noise (dropout draws and bf16 rounding differ), parity is within 1 %. The markdown row
names the machine (lscpu's model name) and whether it has AMX / avx512_bf16: without either, bf16 is emulated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from attention_bench import batches, build  # noqa: E402

from hpcqa.rank.train import master  # noqa: E402
from hpcqa.rank.train.facts import cpu_flags  # noqa: E402

MODES = ("autocast", "master")


class Runner:
    def __init__(self, model: torch.nn.Module, mode: str) -> None:
        self.mode = mode
        self.model = model
        opt = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=True)
        self.opt = master.MasterAdamW.wrap(opt) if mode == "master" else opt
        if mode == "master":  # after the masters are taken from the fp32 weights, as the rank does
            master.to_bf16(model)

    def step(self, batch: dict) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.mode == "autocast"):
            loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss.detach())


def machine() -> str:
    """lscpu's model name and the bf16 hardware it has (none: bf16 is emulated)."""
    name = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        name = next(
            (ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")),
            name,
        )
    except OSError:
        pass
    hw = sorted(cpu_flags() & {"amx_bf16", "avx512_bf16"})
    return f"{name}, " + (" ".join(hw) if hw else "no AMX, no avx512_bf16 (bf16 emulated)")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", choices=["minilm", "distilbert"], default="minilm")
    ap.add_argument("--attn", choices=["fused", "hpcqa", "sdpa"], default="fused")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per mode, interleaved")
    ap.add_argument("--loss-steps", type=int, default=0)
    ap.add_argument("--loss-seeds", default="42,43")
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=384)
    ap.add_argument(
        "--loss-shape", default="", help="BATCHxSEQ of the loss runs (default: the timed shape)"
    )
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    runners = {m: Runner(build(a.model, a.attn, True), m) for m in MODES}
    vocab = runners["autocast"].model.config.vocab_size
    data = batches(a.steps + 1, a.batch, a.seq, vocab)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for r in runners.values():
        r.step(data[0])  # warm-up
    for i in range(a.steps):
        for m, r in runners.items():
            t = time.thread_time()
            r.step(data[1 + i])
            times[m].append(time.thread_time() - t)
            print(f"  {m}: {times[m][-1]:.3f} s", file=sys.stderr, flush=True)
    losses: dict[str, list[float]] = {m: [] for m in MODES}
    lb, ls = map(int, a.loss_shape.split("x")) if a.loss_shape else (a.batch, a.seq)
    data = batches(a.loss_steps, lb, ls, vocab, seed=2) if a.loss_steps else []
    for seed in [int(x) for x in a.loss_seeds.split(",")] if a.loss_steps else []:
        for m in MODES:
            r = Runner(build(a.model, a.attn, True, seed=seed), m)
            torch.manual_seed(seed)
            for b in data:
                loss = r.step(b)
            losses[m].append(loss)
            print(f"  loss, {m}, seed {seed}: {loss:.4f}", file=sys.stderr, flush=True)
    base = statistics.median(times["autocast"])
    print(f"{machine()}; {a.model}, {a.attn} attention, batch {a.batch} x {a.seq}, 1 thread")
    cols = ["mode", "step s (median)", "vs autocast"]
    cols += (
        [f"loss after {a.loss_steps} steps at {lb} x {ls} (mean; each seed)", "vs autocast"]
        if a.loss_steps
        else []
    )
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for m in MODES:
        med = statistics.median(times[m])
        cells = [m, f"{med:.3f}", f"{base / med:.2f}x"]
        if a.loss_steps:
            mean, ref = statistics.mean(losses[m]), statistics.mean(losses["autocast"])
            each = ", ".join(f"{x:.4f}" for x in losses[m])
            cells += [f"{mean:.4f} ({each})", f"{(mean - ref) / ref:+.2%}"]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
