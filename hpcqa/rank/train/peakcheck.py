"""Whether the peak an MFU divides by can be trusted (pure: no torch, the ranks' measurements are given).

The peak moves with the neighbours' load: in one VM it measured 275-1,049 GFLOP/s as other guests came and went. So
each rank says how its peak was taken (matmul n, precision, threads, its own CPUs, best of k runs with their spread
and CPU share; measured this job or cached from date X on host Y; quiet or not) and measures a short peak again at
the end of training. When the end peak and the one divided by are more than PEAK_MOVED apart on any rank, the run is
flagged (results.json efficiency.peak_moved) and its MFU is not given as a figure: it says the peak moved from A to
B GFLOP/s during the job. A peak that moved is not cached (keepable).
"""

from __future__ import annotations

import datetime

# The start and end peaks, as the lower over the higher, must not be more than this apart. On one core of the 2-core
# test VM: alone 92.5 GFLOP/s fp32 and the short end re-measure 93.3 (1 % apart; QUIET_SPREAD allows 15 % within
# one measurement, and the end one is shorter, so noisier); while other users' tests ran 45-67 (CPU share
# 0.65-0.95); one busy loop on the same core 35 (share 0.5, x0.38); the VM moved 3.8x (275-1,049). 25 % sits
# above the jitter of a quiet core and well below what one neighbour on it takes.
PEAK_MOVED = 0.25
END_RUNS = 3  # the end re-measure: 3 runs ...
END_SECONDS = (
    0.3  # ... in about 0.3 s (one run, ~0.1 s, when the first is busy): cheap at every job's end
)


def ratio(start: float, end: float) -> float:
    """end / start (0 when either is not a positive number)."""
    return end / start if start > 0 and end > 0 else 0.0


def moved(start: float, end: float) -> bool:
    """Whether two peaks are more than PEAK_MOVED apart (the lower under 1 - PEAK_MOVED of the higher)."""
    if start <= 0 or end <= 0:
        return True
    return min(start, end) / max(start, end) < 1 - PEAK_MOVED


def worst(per_rank: list[dict]) -> dict | None:
    """results.json's efficiency.peak_moved: the rank whose end peak is furthest from the peak its MFU divided by,
    when that is beyond PEAK_MOVED; None when every rank's peak held (or no rank re-measured)."""
    found = None
    for p in per_rank:
        end = (p.get("end") or {}).get("flops")
        if not end or not p.get("flops") or not moved(p["flops"], end):
            continue
        r = ratio(p["flops"], end)
        off = max(r, 1 / r) if r else float("inf")
        if found is None or off > found[0]:
            found = (off, p, end, r)
    if found is None:
        return None
    _, p, end, r = found
    return {
        "start": p["flops"],
        "end": end,
        "ratio": round(r, 3),
        "rank": p.get("rank", 0),
        "host": p.get("host"),
        "start_source": "cached" if p.get("source") == "cached" else "measured",
        "cached_at": p.get("measured_at") if p.get("source") == "cached" else None,
        "threshold": PEAK_MOVED,
    }


def keepable(start: dict, end: dict | None) -> bool:
    """Whether a rank's start peak may be cached for its node shape: measured this job on quiet cores, and the end
    re-measure found it where it was (a peak that moved during the job is not a quiet one, whatever its runs
    said)."""
    if start.get("source") != "measured" or start.get("quiet") is not True or not end:
        return False
    return bool(end.get("flops")) and not moved(start["flops"], end["flops"])


def _gflops(flops: float) -> str:
    return f"{flops / 1e9:,.1f}"


def _when(p: dict) -> str:
    at = p.get("measured_at")
    date = (
        datetime.datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M")
        if isinstance(at, (int, float))
        else "an unknown date"
    )
    if p.get("source") == "cached":
        return f"cached from {date} on {p.get('measured_on') or 'an unknown host'}"
    return f"measured this job on {p.get('host') or 'this host'}"


def taken(per_rank: list[dict]) -> str:
    """How the peak was taken, in one sentence (rank 0's; every rank's is in efficiency.peak_provenance)."""
    if not per_rank:
        return ""
    p = per_rank[0]
    cpus = p.get("cpus") or []
    if (
        p.get("size") is None or p.get("runs") is None
    ):  # a peak cached before its provenance was recorded
        how = f"{p.get('precision') or '?'} matmuls (how: not recorded with this cached peak), {_when(p)}"
    else:
        how = (
            f"{p.get('size')}x{p.get('size')} {p.get('precision')} matmuls, {p.get('threads')} thread(s) on "
            f"the rank's own CPUs {','.join(str(c) for c in cpus) or '?'}, best of {p.get('runs')} run(s) "
            f"(spread {100 * (p.get('spread') or 0):.0f} %, CPU share {p.get('cpu_share') or 0:.2f}), "
            f"{_when(p)}, {'quiet' if p.get('quiet') else 'not quiet'}"
        )
    end = p.get("end") or {}
    if end.get("flops"):
        verdict = (
            f"moved, more than {100 * PEAK_MOVED:.0f} % away"
            if moved(p["flops"], end["flops"])
            else f"held, within {100 * PEAK_MOVED:.0f} %"
        )
        how += f"; re-measured at the end of training: {_gflops(end['flops'])} GFLOP/s ({verdict})"
    if len(per_rank) > 1:
        how += f" (rank 0 of {len(per_rank)})"
    return how


def flag(out: dict, per_rank: list[dict]) -> dict:
    """results.json's efficiency with the peak's provenance (peak_taken, peak_provenance) and, when the peak moved
    during the job, peak_moved and the MFU withheld as unreliable (its figures kept under mfu_unreliable)."""
    out["peak_taken"] = taken(per_rank)
    out["peak_provenance"] = per_rank
    gone = worst(per_rank)
    if gone is None:
        return out
    out["peak_moved"] = gone
    bad = out.get("mfu_unreliable") or {
        "mfu": out.get("mfu"),
        "mfu_all_tokens": out.get("mfu_all_tokens"),
    }
    was = "the cached peak" if gone["start_source"] == "cached" else "the peak"
    bad["why"] = (
        f"{was} moved from {_gflops(gone['start'])} to {_gflops(gone['end'])} GFLOP/s during the job (rank "
        f"{gone['rank']}, x{gone['ratio']:.2f}, more than {100 * PEAK_MOVED:.0f} %): neighbours' load on its cores, "
        "so the MFU against it is unreliable"
    )
    bad["fix"] = (
        "run again on cores nothing else uses (a node of its own, launch.on_busy_cores); the peak "
        "is measured again"
        + (
            "; if the end peak was the higher, delete the cached entry (peaks.json)"
            if gone["start_source"] == "cached"
            else ""
        )
    )
    out["mfu_unreliable"] = bad
    out["mfu"] = out["mfu_all_tokens"] = None
    return out
