"""A training rank's main thread, bound by OpenMP to one core, given its whole CPU pool back -- first thing in the
rank, before the trainer's libraries (transformers, datasets, tokenizers) are imported and start threads or
processes that would inherit the one core (test_layout_e2e's thread census caught a DataLoader worker on it).
And what the rank's cores gave it: the time its threads waited for them while other processes had them."""

from __future__ import annotations

import os
from pathlib import Path

from hpcqa import fsutil
from hpcqa.core import topology

WIDENED: str | None = None  # what widen_main_thread did, once per process


def widen_main_thread() -> str:
    """OpenMP (OMP_PLACES + OMP_PROC_BIND, or KMP_AFFINITY) binds the thread that starts it to the
    first place, and every thread or process started later inherits that one core: gloo's threads,
    the TCP store, DataLoader workers. Start OpenMP now, then give this thread the rank's whole pool
    back: the OpenMP workers stay one per core, everything started from here on gets the pool."""

    global WIDENED
    if WIDENED is not None:
        return WIDENED
    bound = os.environ.get("HPCQA_BOUND_CPUS", "")
    if not bound:
        return "not bound"
    if (
        os.environ.get("HPCQA_KEEP_OPENMP_BINDING") == "1"
    ):  # benchmarks/layout_bench.py: the old behaviour
        return "left as OpenMP bound it (HPCQA_KEEP_OPENMP_BINDING=1)"
    import torch  # the first import of torch in a training rank: before transformers, datasets and their threads

    torch.ones(1 << 20).sum()  # a parallel region: OpenMP binds its threads now
    torch.ones(64, 64) @ torch.ones(64, 64)
    before = topology.cpu_list(os.sched_getaffinity(0))
    pool = topology.parse_cpu_list(bound)
    os.sched_setaffinity(0, pool)
    WIDENED = f"OpenMP had it on {before}; widened to the rank's pool {topology.cpu_list(pool)}"
    return WIDENED


def run_delay_s() -> float | None:
    """Seconds this process's threads were ready to run but waited for a CPU (the kernel's schedstat: time on a
    run queue), summed over its live threads. High against wall x CPUs: other processes had the rank's cores."""
    total, seen = 0, False
    for stat in Path("/proc/self/task").glob("*/schedstat"):
        try:
            total += int(fsutil.read_kernel(stat).split()[1])
            seen = True
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9 if seen else None
