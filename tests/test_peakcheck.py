"""Whether the peak an MFU divides by held during the job (hpcqa.rank.train.peakcheck), with the ranks' measurements
given: not moved, moved down (a neighbour took the cores), moved up, a cached peak against the job's own measurement,
what is cached and what the user reads. Pure: no torch, no process (the real measurements are in test_peak.py)."""

import pytest

from hpcqa.rank.train import peakcheck
from hpcqa.rank.train.peakcheck import PEAK_MOVED
from hpcqa.record.jobfiles import results

pytestmark = pytest.mark.quick

G = 1e9


def rank(flops: float, end: float | None, **over) -> dict:
    """One rank's provenance as efficiency.rank_peak and run_efficiency build it."""
    p = {
        "rank": 0,
        "host": "node1",
        "cpus": [0],
        "threads": 1,
        "precision": "fp32",
        "size": 1024,
        "runs": 5,
        "spread": 0.09,
        "cpu_share": 0.96,
        "measured_at": 1.7e9,
        "measured_on": "node1",
        "flops": flops,
        "quiet": True,
        "source": "measured",
    }
    if end is not None:
        p["end"] = {"flops": end, "quiet": True, "cpu_share": 0.95, "spread": 0.05, "runs": 3}
    return {**p, **over}


def efficiency(mfu: float = 0.4) -> dict:
    return {"mfu": mfu, "mfu_all_tokens": mfu * 1.1, "peak_flops": 60 * G}


def test_the_threshold_sits_between_quiet_jitter_and_one_neighbour():
    # quiet runs here ranged 56-67 GFLOP/s; one busy loop on the same core halved the peak (28-31)
    assert not peakcheck.moved(67 * G, 56 * G) and not peakcheck.moved(56 * G, 67 * G)
    assert peakcheck.moved(60 * G, 30 * G) and peakcheck.moved(275 * G, 1049 * G)
    assert not peakcheck.moved(100 * G, (1 - PEAK_MOVED) * 100 * G + 1)
    assert peakcheck.moved(100 * G, (1 - PEAK_MOVED) * 100 * G - 1e6)
    assert peakcheck.moved(100 * G, 0)  # an end that measured nothing is no evidence it held


def test_a_peak_that_held_keeps_its_mfu_and_says_how_it_was_taken():
    out = peakcheck.flag(efficiency(), [rank(60 * G, 55 * G)])
    assert out["mfu"] == 0.4 and "peak_moved" not in out and "mfu_unreliable" not in out
    said = out["peak_taken"]
    for part in (
        "1024x1024 fp32 matmuls",
        "1 thread(s)",
        "CPUs 0",
        "best of 5 run(s)",
        "spread 9 %",
        "CPU share 0.96",
        "measured this job on node1",
        "quiet",
        "55.0 GFLOP/s (held, within 25 %)",
    ):
        assert part in said, (part, said)
    assert out["peak_provenance"][0]["end"]["runs"] == 3
    assert peakcheck.keepable(out["peak_provenance"][0], out["peak_provenance"][0]["end"])


def test_a_peak_that_moved_down_withholds_the_mfu_names_the_rank_and_is_not_cached():
    ranks = [rank(60 * G, 58 * G), rank(1049 * G, 275 * G, rank=1, host="node2")]
    out = peakcheck.flag(efficiency(), ranks)
    moved = out["peak_moved"]
    assert (moved["start"], moved["end"], moved["rank"], moved["host"]) == (
        1049 * G,
        275 * G,
        1,
        "node2",
    )
    assert (
        moved["ratio"] == pytest.approx(275 / 1049, abs=1e-3) and moved["threshold"] == PEAK_MOVED
    )
    assert out["mfu"] is None and out["mfu_all_tokens"] is None
    bad = out["mfu_unreliable"]
    assert bad["mfu"] == 0.4  # the figure is kept, under unreliable
    assert "moved from 1,049.0 to 275.0 GFLOP/s during the job" in bad["why"]
    assert "neighbours' load" in bad["why"] and "unreliable" in bad["why"]
    assert not peakcheck.keepable(ranks[1], ranks[1]["end"]) and peakcheck.keepable(
        ranks[0], ranks[0]["end"]
    )
    assert "(rank 0 of 2)" in out["peak_taken"]


def test_a_peak_that_moved_up_is_flagged_too():
    # measured while a neighbour ran, quiet at the end: the MFU would be too high
    out = peakcheck.flag(efficiency(), [rank(275 * G, 1049 * G, quiet=False)])
    assert out["peak_moved"]["ratio"] > 1 and out["mfu"] is None
    assert "moved from 275.0 to 1,049.0" in out["mfu_unreliable"]["why"]


def test_a_cached_peak_is_checked_against_the_jobs_own_measurement():
    cached = rank(60 * G, 29 * G, source="cached", measured_at=1.7e9, measured_on="node9")
    out = peakcheck.flag(efficiency(), [cached])
    assert out["peak_moved"]["start_source"] == "cached" and out["peak_moved"]["cached_at"] == 1.7e9
    assert out["mfu_unreliable"]["why"].startswith("the cached peak moved from 60.0 to 29.0")
    assert "cached from 20" in out["peak_taken"] and "on node9" in out["peak_taken"]
    assert not peakcheck.keepable(cached, cached["end"])  # a cached peak is never written again
    held = peakcheck.flag(efficiency(), [rank(60 * G, 57 * G, source="cached")])
    assert held["mfu"] == 0.4 and "peak_moved" not in held


def test_only_a_quiet_measurement_of_this_job_that_held_is_cached():
    assert peakcheck.keepable(rank(60 * G, 58 * G), {"flops": 58 * G})
    assert not peakcheck.keepable(rank(60 * G, None, quiet=False), {"flops": 60 * G})
    assert not peakcheck.keepable(
        rank(60 * G, None), None
    )  # no end measurement: not known to have held
    assert not peakcheck.keepable(rank(60 * G, None), {"flops": 30 * G})


def test_a_rank_that_did_not_re_measure_is_not_flagged():
    out = peakcheck.flag(efficiency(), [rank(60 * G, None)])
    assert "peak_moved" not in out and "re-measured" not in out["peak_taken"]


def test_what_status_and_submit_show_of_a_moved_peak():
    from hpcqa.cli.report import mfu_lines

    out = peakcheck.flag(efficiency(), [rank(1049 * G, 275 * G)])
    out.update(precision="fp32", achieved_flops=20 * G, peak_source="measured")
    eff = results.parse({"efficiency": out}).efficiency
    assert eff.peak_moved.start == 1049 * G and eff.peak_moved.rank == 0
    said = mfu_lines(eff)
    text = " ".join(" ".join(said).split())
    assert said[0].startswith("MFU not given: the peak moved from 1,049.0 to 275.0 GFLOP/s")
    # submit's summary: the why and the fix in two lines (the state and EM/F1 stay on a small screen); both whole,
    # and how the peak was taken, are status's
    assert "fix: " in text and len(said) == 2
    assert all(len("  " + ln) <= 80 for ln in said), said
    assert "moved, more than 25 % away" in eff.peak_taken
    held = results.parse(
        {"efficiency": {**efficiency(), "achieved_flops": 24 * G, "precision": "fp32"}}
    )
    assert not any(ln.startswith("peak:") for ln in mfu_lines(held.efficiency))


def test_a_peak_cached_without_its_provenance_says_so_not_none():
    said = peakcheck.taken([{"flops": 5e10, "precision": "fp32", "source": "cached"}])
    assert "None" not in said and "not recorded" in said, said
