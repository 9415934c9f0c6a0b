"""What communication costs a rank, measured with the job's own process group.

- `measure_link` (job.task = "comm", run by `hpcqa tune --comm`): all-reduces of growing size among one rank per
  node (the lowest rank of each), so what is timed is the link between the nodes, with the backend the training
  uses (gloo, or ccl). The fit of those times to the ring all-reduce model gives the link's bandwidth and
  latency (hpcqa.core.scaling.fit_link).
- `exposed_allreduce` (every multi-rank training run): forward + backward of one real batch, timed with DDP's
  gradient all-reduce (normal steps) and without it (under `no_sync()`); the difference is the part of the
  all-reduce that the backward did not hide. Also what DDP all-reduces: its gradient bytes and buckets.
"""

from __future__ import annotations

import socket
import statistics
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForQuestionAnswering

from hpcqa.core import scaling
from hpcqa.rank.train import model as modelmod
from hpcqa.record.caches import Caches

# message sizes (bytes) for the link: one small (latency), then sizes where bandwidth dominates
LINK_SIZES = (8, 65536, 1 << 20, 4 << 20, 16 << 20)
LINK_SECONDS = 0.6  # per size, after one warm-up: at least 3 repetitions, more while under this


def leaders(node_of_rank: list[int]) -> list[int]:
    """The lowest global rank on each node, in node order."""
    first: dict[int, int] = {}
    for rank, node in enumerate(node_of_rank):
        first.setdefault(node, rank)
    return [first[n] for n in sorted(first)]


def _timed(fn: Callable[[], None], reps: int) -> list[float]:
    """`reps` timings of `fn`, after one warm-up (connections, buffers). A fixed count: every rank runs the same
    collectives."""
    fn()
    return [_once(fn) for _ in range(reps)]


def _timed_together(
    fn: Callable[[], None], seconds: float, group: Any, min_reps: int = 3, max_reps: int = 50
) -> list[float]:
    """_timed for a collective `fn` among `group`: every member runs it the same number of times. A count each
    member took from its own clock differed by one now and then (the ranks cross `seconds` a few microseconds
    apart), and the member that stopped first met the other's next all-reduce with its own next collective:
    gloo aborts the job ("Received data size doesn't match expected size"). Here the count comes from
    `min_reps` timed repetitions, the slowest member's median agreed by an all-reduce (MAX)."""
    out = _timed(fn, min_reps)
    per = torch.tensor([statistics.median(out)], dtype=torch.float64)
    dist.all_reduce(per, op=dist.ReduceOp.MAX, group=group)
    reps = min(max_reps, max(min_reps, int(seconds / max(float(per.item()), 1e-9))))
    return out + [_once(fn) for _ in range(reps - min_reps)]


def _once(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_link(
    node_rank: int, sizes: tuple[int, ...] = LINK_SIZES, seconds: float = LINK_SECONDS
) -> dict:
    """Every rank calls this (the process group is up). -> {"points": [[bytes, median s], ...], "fit": ...} on
    every rank; only the node leaders communicate, the others wait at the closing barrier."""

    world = dist.get_world_size()
    seen: list[Any] = [None] * world
    dist.all_gather_object(seen, (node_rank, socket.gethostname()))
    group_ranks = leaders([n for n, _ in seen])
    if len(group_ranks) < 2:
        dist.barrier()
        return {
            "error": "one node: no link between nodes to measure (set cluster.nodes = 2 or more)"
        }
    group = dist.new_group(ranks=group_ranks)
    points: list[list[float]] = []
    if dist.get_rank() in group_ranks:
        for size in sizes:
            buf = torch.ones(max(size // 4, 1), dtype=torch.float32)
            times = _timed_together(lambda: dist.all_reduce(buf, group=group), seconds, group)
            # the slowest leader's median
            med = torch.tensor([statistics.median(times)], dtype=torch.float64)
            dist.all_reduce(med, op=dist.ReduceOp.MAX, group=group)
            points.append([buf.numel() * 4, float(med.item())])
    shared: list[Any] = [points]
    dist.broadcast_object_list(shared, src=group_ranks[0])
    dist.barrier()
    points = shared[0]
    fit = scaling.fit_link(points, len(group_ranks))
    return {
        "points": points,
        "nodes": len(group_ranks),
        "leaders": group_ranks,
        "hosts": [seen[r][1] for r in group_ranks],
        **fit,
    }


def ddp_buckets(ddp_model: Any) -> dict:
    """What DDP all-reduces per step: gradient bytes, its buckets (as DDP built them) and its bucket cap."""
    data = ddp_model._get_ddp_logging_data() if hasattr(ddp_model, "_get_ddp_logging_data") else {}
    sizes = [int(s) for s in str(data.get("bucket_sizes") or "").split(",") if s.strip().isdigit()]
    grad_bytes = sum(
        p.numel() * p.element_size() for p in ddp_model.parameters() if p.requires_grad
    )
    return {
        "grad_bytes": grad_bytes,
        "bucket_bytes": sizes or [grad_bytes],
        "bucket_cap_bytes": int(data.get("bucket_cap_bytes") or 0) or None,
        "gradient_as_bucket_view": bool(data.get("gradient_as_bucket_view")),
    }


def exposed_allreduce(trainer: Any, steps: int, compress: str = "none") -> dict:
    """Forward + backward of the first training batch, `steps` times with the all-reduce and `steps` times under
    no_sync() (after one warm-up each), on every rank together; gradients are cleared after, no weight moves.
    -> {"synced_s", "nosync_s", "exposed_s", ...} (medians over the steps)."""
    model = trainer.model_wrapped
    if not hasattr(model, "no_sync") or steps <= 0:
        return {}
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))

    def step() -> None:
        trainer.training_step(model, batch)

    def nosync() -> None:
        with model.no_sync():
            trainer.training_step(model, batch)

    quiet = _timed(nosync, steps)
    model.zero_grad(set_to_none=True)
    synced = _timed(step, steps)
    model.zero_grad(set_to_none=True)
    s, q = statistics.median(synced), statistics.median(quiet)
    buckets = ddp_buckets(model)
    return {
        "synced_s": s,
        "nosync_s": q,
        "exposed_s": max(s - q, 0.0),
        "probe_steps": steps,
        "allreduce_s": allreduce_alone(buckets["bucket_bytes"], steps, compress),
        **buckets,
        **wire(buckets["bucket_bytes"], compress),
    }


def wire(bucket_bytes: list[int], compress: str) -> dict:
    """What train.ddp_compress puts on the link per step: each bucket in 16 bits when it is fp16/bf16."""
    return {
        "compress": compress,
        "wire_bucket_bytes": list(scaling.on_the_wire(bucket_bytes, compress)),
    }


WIRE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def allreduce_alone(bucket_bytes: list[int], steps: int, compress: str = "none") -> float:
    """Seconds to all-reduce one step's buckets with nothing to hide behind (median of `steps`, after a warm-up),
    in the dtype DDP sends them in (train.ddp_compress): with exposed_s, how much of the all-reduce the backward hid
    (the overlap the scaling model uses)."""

    dtype = WIRE_DTYPES.get(compress, torch.float32)
    bufs = [torch.zeros(max(b // 4, 1), dtype=dtype) for b in bucket_bytes]

    def once() -> None:
        for buf in bufs:
            dist.all_reduce(buf)

    return statistics.median(_timed(once, steps))


def planned_buckets(model: Any, cap_bytes: int = 25 << 20, first_bytes: int = 1 << 20) -> dict:
    """For a single rank (no DDP to ask): the buckets DDP would build, by its rule: parameters in reverse order,
    a bucket closed when it reaches the cap (the first one at 1 MiB)."""
    sizes, current, cap = [], 0, first_bytes
    for p in reversed([p for p in model.parameters() if p.requires_grad]):
        current += p.numel() * p.element_size()
        if current >= cap:
            sizes.append(current)
            current, cap = 0, cap_bytes
    if current:
        sizes.append(current)
    return {
        "grad_bytes": sum(sizes),
        "bucket_bytes": sizes,
        "bucket_cap_bytes": cap_bytes,
        "gradient_as_bucket_view": False,
        "planned": True,
    }


def model_buckets(cfg: Any) -> dict:
    """planned_buckets of the config's model, built from its config.json alone on torch's meta device: no weights
    read, no memory (for `hpcqa scaling --predict CONFIG`). OSError when the model's config is not at hand."""

    path, kwargs = modelmod.resolve(cfg.model, Caches.for_data_cache(cfg.data.cache_dir))
    conf = AutoConfig.from_pretrained(path, **kwargs)
    with torch.device("meta"):
        model = AutoModelForQuestionAnswering.from_config(conf)
    out = planned_buckets(model, cap_bytes=int(cfg.train.ddp_bucket_cap_mb * (1 << 20)))
    return {
        **out,
        "parameters": sum(p.numel() for p in model.parameters()),
        "model_type": conf.model_type,
    }
