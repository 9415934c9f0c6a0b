"""Batches that carry text, not padding: features grouped by length so each step pads little, every DDP rank's
batch of a step drawn from the same length group (the ranks finish their forward/backward together, none waits at
the all-reduce for a longer batch elsewhere), in an order fixed by the seed and the epoch (every rank computes the
same order; a resumed run skips into the same epoch's order).

How the Trainer's data loader hands the order out (accelerate's BatchSamplerShard, split_batches off): the index
stream is cut into batches of per_device_train_batch_size and batch i goes to rank i mod world. So a "step group" of
world x batch consecutive indices is one micro-step of every rank. The order:

    permute all features (the epoch's own generator, never the global one)
    cut into mega-groups of MEGA step groups; sort each by length (longest first)
    cut each into step groups of world x batch, dealt out like cards (rank r gets sorted positions r, r + world,
    ...: every rank's longest feature is among the group's `world` longest)
    shuffle the full step groups (so successive steps vary in length as random batches do), the longest first
    (a memory limit shows at step 1), the one short group (if any) last (it must stay at the end: a short group
    in the middle would shift every later batch to another rank)

Pure (no torch): the Trainer gets it through trainer.LockstepLengthSampler.
"""

from __future__ import annotations

import random
from typing import Sequence

MEGA = 50  # step groups sorted together: large enough to group well, small enough to stay random across the epoch


def lockstep_order(
    lengths: Sequence[int], batch: int, world: int, seed: int, epoch: int, mega: int = MEGA
) -> list[int]:
    """Every feature index once, in step groups of world x batch features of similar length."""
    n, group = len(lengths), max(batch, 1) * max(world, 1)
    rng = random.Random(f"hpcqa-lockstep:{seed}:{epoch}")
    perm = list(range(n))
    rng.shuffle(perm)
    full: list[list[int]] = []
    short: list[int] = []
    for i in range(0, n, group * mega):
        chunk = sorted(perm[i : i + group * mega], key=lambda j: (-lengths[j], j))
        for k in range(0, len(chunk), group):
            g = chunk[k : k + group]
            if len(g) == group:
                full.append(_dealt(g, batch, world))
            else:
                short = g
    rng.shuffle(full)
    if full:
        longest = max(range(len(full)), key=lambda s: lengths[full[s][0]])
        full[0], full[longest] = full[longest], full[0]
    return [i for g in full for i in g] + short


def _dealt(group: list[int], batch: int, world: int) -> list[int]:
    """A step group sorted longest first, laid out so that rank r's batch (positions r x batch ...) holds sorted
    positions r, r + world, r + 2 world, ...: every rank's longest feature is among the group's `world` longest,
    so the ranks pad to nearly the same length and finish the step together."""
    return [group[t * world + rank] for rank in range(world) for t in range(batch)]


def padded_tokens(
    lengths: Sequence[int], order: Sequence[int], batch: int, multiple: int = 1
) -> int:
    """Tokens a pass over `order` computes when each batch of `batch` is padded to its longest feature, rounded up
    to `multiple`: what the grouping saves, counted (tests and the dry run's arithmetic)."""
    total = 0
    for k in range(0, len(order), batch):
        b = [lengths[i] for i in order[k : k + batch]]
        longest = -(-max(b) // multiple) * multiple
        total += longest * len(b)
    return total


def feature_lengths(dataset, column: str = "input_ids") -> list[int]:
    """Tokens in each feature (unpadded features: the length of input_ids)."""
    return [len(x) for x in dataset[column]]
