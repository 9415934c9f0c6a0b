"""What OpenMP's spin-waiting costs when two ranks share their cores, as the ranks of two emulated nodes of the test
clusters do (tests/slurm_cluster.py: SHARED_CORES_ENV), and what waiting passively (OMP_WAIT_POLICY=PASSIVE) saves.

    python benchmarks/spin_bench.py [--runs 2] [--steps 20] [--markdown]

Two processes, both pinned to the same two cores (taskset), each with 2 OpenMP threads bound one per core (as a
rank planned on a 2-core node is), train a tiny BERT for question answering with DDP over gloo. Each prints the
CPU time (all its threads) and the wall time of a step. The two variants run in turn (A B A B ...), so a drift of
a shared machine's speed touches both alike; the medians and their ratio are printed with the machine's name.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import statistics
import subprocess
import sys

RANK = r"""
import os, sys, time
import torch, torch.distributed as dist
from transformers import BertConfig, BertForQuestionAnswering
rank, steps, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(BertForQuestionAnswering(cfg))
opt = torch.optim.AdamW(model.parameters(), 1e-4)
ids, pos = torch.randint(0, 1000, (4, 256)), torch.zeros(4, dtype=torch.long)
def step():
    model(input_ids=ids, start_positions=pos, end_positions=pos).loss.backward(); opt.step(); opt.zero_grad()
for _ in range(3):
    step()
dist.barrier()
cpu, wall = time.process_time(), time.perf_counter()
for _ in range(steps):
    step()
dist.barrier()
print(f"step {(time.process_time() - cpu) / steps:.4f} {(time.perf_counter() - wall) / steps:.4f}")
dist.destroy_process_group()
"""

VARIANTS = {
    "spinning (libgomp's default)": {},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(extra: dict, steps: int) -> tuple[float, float]:
    """(CPU s, wall s) of a step, averaged over the two ranks."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "2",
        "OMP_PROC_BIND": "close",
        "OMP_PLACES": "{0},{1}",
        **extra,
    }
    if not extra:
        env.pop("OMP_WAIT_POLICY", None)
    port = str(free_port())
    procs = [
        subprocess.Popen(
            ["taskset", "-c", "0,1", sys.executable, "-c", RANK, str(r), str(steps), port],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed: {outs}")
    pairs = [tuple(map(float, re.search(r"step (\S+) (\S+)", o).groups())) for o in outs]
    return statistics.mean(c for c, _ in pairs), statistics.mean(w for _, w in pairs)


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?"
            )
    except OSError:
        name = platform.processor() or "?"
    return f"{name}, {os.cpu_count()} CPUs"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    got: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    for _ in range(args.runs):
        for name, extra in VARIANTS.items():
            got[name].append(one_run(extra, args.steps))
    spin, passive = (statistics.median(c for c, _ in got[v]) for v in VARIANTS)
    if args.markdown:
        print(
            "| ranks sharing 2 cores, 2 threads each | CPU per step per rank | wall per step | machine |"
        )
        print("|---|---|---|---|")
    for name in VARIANTS:
        cpu = statistics.median(c for c, _ in got[name])
        wall = statistics.median(w for _, w in got[name])
        row = [name, f"{1000 * cpu:.0f} ms", f"{1000 * wall:.0f} ms", machine()]
        print("| " + " | ".join(row) + " |" if args.markdown else "  ".join(row))
    print(f"passive / spinning, CPU per step: {passive / spin:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
