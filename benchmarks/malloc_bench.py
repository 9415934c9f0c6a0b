"""The ranks' allocator (launch.malloc), end to end: the quickstart (2 pinned ranks, MiniLM) per allocator,
interleaved, with train samples/s and each rank's peak RSS.

    python benchmarks/malloc_bench.py [--variants glibc-heap,default,tcmalloc] [--repeat 2] [--seq 128] [--markdown]

glibc as the process gets it maps every block over its mmap threshold (at most 32 MiB) afresh and gives it back on
free, so each big tensor of a step (attention's batch x heads x S x S, in fp32 85 MB at 12 x 12 x 384^2) is
page-faulted in again at every allocation; glibc-heap keeps them on the heap (hpcqa.core.plan.GLIBC_HEAP_ENV).
--seq 384 runs the recipe's sequence length (fewer examples, so that a run stays a few minutes).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _submit import recipe_shape, submit


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--variants", default="glibc-heap,default,tcmalloc")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    chosen = a.variants.split(",")
    common = ["train.bf16=auto"] + recipe_shape(a.seq)
    runs: dict[str, list[dict]] = {v: [] for v in chosen}
    for _ in range(a.repeat):
        for v in chosen:
            res = submit("configs/quickstart.toml", common + [f"launch.malloc={v}"])
            runs[v].append(res)
            rss = [u.get("max_rss_bytes", 0) / 2**30 for u in res.get("rank_usage") or [] if u]
            print(
                f"{v}: {res.get('steady_samples_per_second')} samples/s, peak RSS {rss} GiB, "
                f"{res.get('error', '')}",
                file=sys.stderr,
            )
    base = statistics.mean(
        r["steady_samples_per_second"]
        for r in runs[chosen[0]]
        if r.get("steady_samples_per_second")
    )
    cols = [
        "launch.malloc",
        "steady samples/s (each run)",
        f"vs {chosen[0]}",
        "peak RSS per rank, GiB (max)",
        "F1",
    ]
    if a.markdown:
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for v in chosen:
        got = [r.get("steady_samples_per_second") or 0 for r in runs[v]]
        rss = max(
            (u.get("max_rss_bytes", 0) for r in runs[v] for u in r.get("rank_usage") or [] if u),
            default=0,
        )
        mean = statistics.mean(got)
        cells = [
            v,
            f"{mean:.2f} ({', '.join(f'{g:.2f}' for g in got)})",
            f"{mean / base:.2f}x",
            f"{rss / 2**30:.2f}",
            f"{runs[v][-1].get('f1', float('nan')):.2f}",
        ]
        print("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
