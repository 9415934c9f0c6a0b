"""The published Sapphire Rapids figure, predicted as it was run.

    python benchmarks/published_spr_predict.py [--markdown]

Source: Hugging Face's blog "Accelerating PyTorch Transformers with Intel Sapphire Rapids, part 1" (Julien Simon,
January 2023; the huggingface/blog repository's intel-sapphire-rapids.md). r7iz.metal-16xl instances (Sapphire
Rapids, 32 physical cores each, AMX; AWS rates them 25 Gbit/s), transformers 4.24's run_qa.py, DistilBERT on
SQuAD v1.1 (max_seq_length 384, doc_stride 128), bf16:
- one node: ONE process, per-device batch 32, IPEX: "1 epoch takes about 26 minutes" (estimated from a minute of
  training);
- four nodes: 8 processes, 2 per node (`mpirun -n 8 -ppn 2`, OMP_NUM_THREADS=24 each, CCL_WORKER_COUNT=2, no
  IPEX), per-device batch 32 over ccl: "7 minutes and 30 seconds" per epoch (3.47x).
The reference and the prediction have different layouts, so the model takes the node's compute rate from the
reference (32 samples per 26 min / 88,729 features' steps) and gives each of the 4-node layout's ranks its share
of it (scaling.Model.predict_layout): an assumption -- the node computes as fast under both layouts (IPEX on one,
not on the other; 48 OpenMP threads on 32 cores on the other) -- that the table cannot check. DistilBERT's
gradients: transformers' DistilBertConfig defaults on torch's meta device (66.4 M parameters, 265 MB of fp32
gradients in DDP's 25 MB buckets). Printed: the 4-node epoch at each link speed (no overlap, and 30 % of the
all-reduce hidden), and the link at which the model gives the published 7 min 30 s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PUBLISHED = {
    "one_node_s": 26 * 60,
    "four_nodes_s": 7 * 60 + 30,
    "batch": 32,
    "one_node_ranks": 1,
    "nodes": 4,
    "ranks_per_node": 2,
}
FEATURES = 88729  # SQuAD v1.1 training features at 384/128 (the Hugging Face course's count, BERT WordPiece)
LATENCY_US = 20
RATES = {"10gbit": 10e9, "25gbit": 25e9, "50gbit": 50e9, "100gbit": 100e9}


def gradient_buckets() -> dict:
    import torch
    from transformers import AutoModelForQuestionAnswering, DistilBertConfig

    from hpcqa.rank.train import commbench

    with torch.device("meta"):
        model = AutoModelForQuestionAnswering.from_config(DistilBertConfig())
    out = commbench.planned_buckets(model, cap_bytes=25 << 20)
    return {**out, "parameters": sum(p.numel() for p in model.parameters())}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    from hpcqa.core import scaling

    buckets = gradient_buckets()
    ref = scaling.profile_from_reference(
        PUBLISHED["one_node_ranks"],
        PUBLISHED["batch"],
        FEATURES,
        PUBLISHED["one_node_s"],
        buckets["bucket_bytes"],
    )
    n, r, b = PUBLISHED["nodes"], PUBLISHED["ranks_per_node"], PUBLISHED["batch"]
    steps4 = -(-FEATURES // (n * r * b))
    published_step = PUBLISHED["four_nodes_s"] / steps4
    print(
        f"gradients: {buckets['parameters'] / 1e6:.1f} M parameters, {sum(buckets['bucket_bytes']) / 1e6:.0f} MB "
        f"in {len(buckets['bucket_bytes'])} buckets; reference: {ref.step_time_s:.3f} s per step of "
        f"{b} on one node ({scaling.Model(ref, scaling.Link(1, 0)).node_rate():.1f} samples/s); "
        f"published 4-node step {published_step:.3f} s ({steps4} steps)",
        file=sys.stderr,
    )
    if a.markdown:
        print(
            "| link (latency 20 us) | overlap | 4 nodes x 2 ranks: epoch | speedup | vs published 7 min 30 s |"
        )
        print("|---|---|---|---|---|")
    for overlap in (0.0, 0.3):
        for name, bits in RATES.items():
            model = scaling.Model(ref, scaling.Link(bits / 8, LATENCY_US * 1e-6), overlap)
            pred = model.predict_layout(n, r, b)
            cells = [
                name,
                f"{100 * overlap:.0f} %",
                f"{pred.time_to_train_s / 60:.1f} min",
                f"{pred.speedup:.2f}x",
                f"{pred.time_to_train_s / PUBLISHED['four_nodes_s']:.2f}",
            ]
            print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    print()
    for overlap in (0.0, 0.3):
        model = scaling.Model(ref, scaling.Link(1, LATENCY_US * 1e-6), overlap)
        need = model.bandwidth_for_step(n, r, b, published_step)
        print(
            f"overlap {100 * overlap:.0f} %: the published 7 min 30 s is what the model gives on a link of "
            f"{need * 8 / 1e9:.1f} Gbit/s"
            if need
            else f"overlap {100 * overlap:.0f} %: no link is enough"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
