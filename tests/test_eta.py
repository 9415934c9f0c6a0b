"""The ETA: estimated where the steps are counted, from the recent rate, and shown the same by status, its detail
view and submit's progress bar at the same moment."""

import math

import pytest

from hpcqa.cli import report, statusview
from hpcqa.core import eta
from hpcqa.core.eta import StepRate
from hpcqa.record import status
from hpcqa.record.jobfiles import progress
from hpcqa.record.jobfiles.fields import Damaged
from tests.conftest import typed_view


def steady_after_warmup() -> StepRate:
    """10 steps in the first 30 s (start-up, first batches), then one step a second up to step 130 at t = 150."""
    r = StepRate()
    r.add(0.0, 0)
    for step in range(1, 11):
        r.add(3.0 * step, step)
    for step in range(11, 131):
        r.add(30.0 + (step - 10), step)
    return r


def test_the_rate_is_the_last_minutes_not_the_average_since_the_start():
    r = steady_after_warmup()
    left = r.eta(150.0, 400)
    assert left == pytest.approx(270.0, rel=0.02)  # 270 steps at 1 s
    assert 150.0 / 130 * 270 > 1.1 * left  # what the average since the start said: 311 s


def test_steps_seen_only_at_checkpoints_count_down_between_sightings():
    """A command job reads the program's steps from its checkpoints: step 10, 20, ... every 10 s, looked at every
    5 s. Between two sightings the ETA falls with the clock instead of standing still."""
    r = StepRate()
    r.add(0.0, 0)
    for t in range(5, 65, 5):
        r.add(float(t), (t // 10) * 10)
    at_60 = r.eta(60.0, 100)
    assert at_60 == pytest.approx(40.0)
    r.add(65.0, 60)  # seen again: no new step
    assert r.eta(65.0, 100) == pytest.approx(35.0)


def test_another_attempts_lower_steps_start_the_count_again():
    r = steady_after_warmup()
    r.add(200.0, 40)  # a requeued attempt resumed from step 40
    assert r.eta(200.0, 400) is None  # one step seen: no rate yet
    r.add(210.0, 60)
    assert r.eta(210.0, 400) == pytest.approx(170.0)


@pytest.mark.parametrize(
    "reading, now, want",
    [
        ({"eta_s": 300.0, "updated": 1000.0}, 1000.0, 300.0),
        ({"eta_s": 300.0, "updated": 1000.0}, 1100.0, 200.0),  # a reading 100 s old
        ({"eta_s": 300.0, "updated": 1000.0}, 1400.0, None),  # ran out: claims nothing
        ({"eta_s": 300.0}, 5.0, 300.0),
        ({"eta_s": math.nan, "updated": 1000.0}, 1000.0, None),
        ({"eta_s": True, "updated": 1000.0}, 1000.0, None),
        ({"eta_s": -3.0}, 0.0, None),
        ({"eta_s": "soon"}, 0.0, None),
        ({}, 0.0, None),
    ],
)
def test_a_reading_is_the_estimate_less_its_age(reading, now, want):
    got = progress.parse(
        reading
    )  # as the job folder's reader gives it: text or a bool is a damaged file
    if isinstance(got, Damaged):
        assert want is None, reading
        return
    assert eta.eta_at(got.eta_s, got.updated, now) == want


def test_status_its_detail_and_the_bar_show_one_eta_at_one_moment():
    """One progress.json reading, 40 s old: every view says the same 'ETA 5:20' (the rank's 6:00 less 40 s)."""
    reading = {"phase": "training", "step": 120, "total_steps": 400, "loss": 1.2, "eta_s": 360.0}
    reading["updated"] = 10_000.0
    now = 10_040.0
    reading = progress.parse(reading)
    v = typed_view(
        id="7",
        name="qa",
        executor="local",
        state="RUNNING",
        nodes=1,
        world_size=2,
        progress=reading,
    )
    listed = status.progress_text(v, now=now)
    detail = dict(statusview._progress_rows(v, now))["progress"]
    bar = report.bar_fields("qa", reading, now)["eta"]
    assert bar == "ETA 5:20" and bar in listed and bar in detail, (listed, detail, bar)


def test_no_eta_once_the_job_is_not_running():
    reading = progress.parse({"step": 120, "total_steps": 400, "eta_s": 360.0, "updated": 10_000.0})
    v = typed_view(
        id="7",
        name="qa",
        executor="local",
        state="PENDING",
        nodes=1,
        world_size=2,
        progress=reading,
    )
    assert "ETA" not in status.progress_text(v, now=10_000.0)
