"""Which padding multiple suits the CPU kernels: the same length-grouped batches of SQuAD-shaped features, each
padded to its longest feature rounded up to 1, 8, 16, 32 or 64, timed through a training step (forward +
backward) of the model, the multiples interleaved batch by batch (a drifting machine affects them alike).

    python benchmarks/pad_multiple_bench.py [--model builtin:minilm] [--batch 12] [--threads 1] [--batches 24]

A length that is a multiple of the kernels' vector/block width may run faster per token than its neighbours; a
coarse multiple adds padding. The table says which wins on this machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def step_seconds(model, ids, mask) -> float:
    import torch

    pos = torch.zeros(ids.shape[0], dtype=torch.long)
    t0 = time.perf_counter()
    out = model(input_ids=ids, attention_mask=mask, start_positions=pos, end_positions=pos)
    out.loss.backward()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="builtin:minilm")
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, default=24)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from hpcqa.core.config import ModelConfig
    from hpcqa.rank.train import batching, synth
    from hpcqa.rank.train import model as modelmod
    from hpcqa.record.caches import Caches

    torch.set_num_threads(a.threads)
    path, kwargs = modelmod.resolve(ModelConfig(name_or_path=a.model), Caches.for_data_cache(""))
    model = AutoModelForQuestionAnswering.from_pretrained(path, **kwargs)
    tok = AutoTokenizer.from_pretrained(path, **kwargs)
    ps = synth.squad_json(1200, seed=5, shape="squad")["data"][0]["paragraphs"]
    enc = tok(
        [p["qas"][0]["question"] for p in ps],
        [p["context"] for p in ps],
        truncation="only_second",
        max_length=384,
        stride=128,
        return_overflowing_tokens=True,
    )
    feats = enc["input_ids"]
    lengths = [len(x) for x in feats]
    order = batching.lockstep_order(lengths, a.batch, 1, seed=1, epoch=0)
    multiples = (1, 8, 16, 32, 64)
    seconds = {m: 0.0 for m in multiples}
    tokens = {m: 0 for m in multiples}
    for k in range(1, a.batches + 1):  # batch 0 is the longest: the warm-up
        idx = order[k * a.batch : (k + 1) * a.batch]
        for m in multiples:
            n = min(-(-max(lengths[i] for i in idx) // m) * m, 512)
            ids = torch.zeros(len(idx), n, dtype=torch.long)
            mask = torch.zeros(len(idx), n, dtype=torch.long)
            for row, i in enumerate(idx):
                ids[row, : lengths[i]] = torch.tensor(feats[i])
                mask[row, : lengths[i]] = 1
            seconds[m] += step_seconds(model, ids, mask)
            tokens[m] += n * len(idx)
    text = sum(
        lengths[i] for k in range(1, a.batches + 1) for i in order[k * a.batch : (k + 1) * a.batch]
    )
    base = seconds[1]
    if a.markdown:
        print(
            f"| pad to a multiple of ({a.model}, batch {a.batch}, {a.threads} thread(s), {a.batches} batches) "
            "| s | tokens computed (text: {:,}) | vs 1 |".format(text)
        )
        print("|---|---|---|---|")
    for m in multiples:
        cells = [str(m), f"{seconds[m]:.1f}", f"{tokens[m]:,}", f"{seconds[m] / base:.3f}x"]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
