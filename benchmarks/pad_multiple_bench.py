"""Which padding multiple suits the CPU kernels: a training step (forward + backward) of the model at every
sequence length in a range, then the cost of a length-grouped epoch of SQuAD-shaped features when each batch is
padded to its longest feature rounded up to 1, 8, 16, 32 or 64.

    python benchmarks/pad_multiple_bench.py [--model builtin:minilm] [--batch 12] [--threads 1] [--markdown]

A length that is a multiple of the kernels' vector/block width may run faster per token than its neighbours; a
coarse multiple adds padding. The table says which wins on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def step_seconds(model, batch: int, length: int, repeats: int) -> float:
    import torch
    ids = torch.randint(1000, 2000, (batch, length), generator=torch.Generator().manual_seed(length))
    mask = torch.ones_like(ids)
    pos = torch.zeros(batch, dtype=torch.long)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        out = model(input_ids=ids, attention_mask=mask, start_positions=pos, end_positions=pos)
        out.loss.backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin:minilm")
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lengths", default="96:257", help="range of sequence lengths timed, start:stop")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from hpcqa.core.config import ModelConfig
    from hpcqa.rank.train import batching, model as modelmod, synth
    from hpcqa.record.caches import Caches

    torch.set_num_threads(a.threads)
    path, kwargs = modelmod.resolve(ModelConfig(name_or_path=a.model), Caches.for_data_cache(""))
    model = AutoModelForQuestionAnswering.from_pretrained(path, **kwargs)
    tok = AutoTokenizer.from_pretrained(path, **kwargs)
    lo, hi = (int(x) for x in a.lengths.split(":"))
    cost = {n: step_seconds(model, a.batch, n, a.repeats) for n in range(lo, hi)}
    print(f"timed lengths {lo}-{hi - 1}: {cost[lo] * 1e3:.1f} .. {cost[hi - 1] * 1e3:.1f} ms per step",
          file=sys.stderr)
    ps = synth.squad_json(1200, seed=5, shape="squad")["data"][0]["paragraphs"]
    enc = tok([p["qas"][0]["question"] for p in ps], [p["context"] for p in ps], truncation="only_second",
              max_length=hi - 1, stride=64, return_overflowing_tokens=True)
    lengths = [len(x) for x in enc["input_ids"]]
    order = batching.lockstep_order(lengths, a.batch, 1, seed=1, epoch=0)
    rows = []
    for multiple in (1, 8, 16, 32, 64):
        seconds = tokens = 0.0
        for k in range(0, len(order), a.batch):
            b = [lengths[i] for i in order[k:k + a.batch]]
            n = min(-(-max(b) // multiple) * multiple, hi - 1)
            seconds += cost[max(n, lo)] * len(b) / a.batch
            tokens += n * len(b)
        rows.append((multiple, seconds, tokens))
    base = rows[0][1]
    if a.markdown:
        print(f"| pad to a multiple of ({a.model}, batch {a.batch}, {a.threads} thread(s)) | epoch s (modelled) "
              "| tokens computed | vs 1 |")
        print("|---|---|---|---|")
    for m, s, t in rows:
        cells = [str(m), f"{s:.1f}", f"{t:,.0f}", f"{s / base:.3f}x"]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
