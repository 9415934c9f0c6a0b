"""How long a training has left: estimated once, where its steps are counted, and read the same way by everything
that shows it (`status`, its detail view, submit's progress bar).

The estimate is the recent rate, not the average since the start: a run's first steps carry its warm-up (lazy
initialisation, the first batches, a compile), and a command job's start carries the program's imports, so an
average over them stays too long for most of the run. A reading shows the estimate as written less the time since
it was written, so two views of the same file at the same moment agree.
"""

from __future__ import annotations

from collections import deque

WINDOW_S = 60.0  # the rate is taken over about the last minute of steps


class StepRate:
    """The steps of one attempt as they were first seen, (time, step); the rate over the last WINDOW_S of them."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, t: float, step: int) -> None:
        if self.samples and step == self.samples[-1][1]:
            return  # seen already: its time is when it was first seen
        if self.samples and step < self.samples[-1][1]:
            self.samples.clear()  # counted from lower down again (another attempt's steps)
        self.samples.append((t, step))
        # the oldest kept is the newest one at least window_s before the last
        while len(self.samples) > 2 and self.samples[-1][0] - self.samples[1][0] >= self.window_s:
            self.samples.popleft()

    def eta(self, now: float, total: int | None) -> float | None:
        """Seconds left to `total` steps at the recent rate, less the time since the last step was seen (a step
        seen only at a checkpoint is part way to the next); None before two steps or past the total."""
        if not total or len(self.samples) < 2:
            return None
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        if s1 <= s0 or t1 <= t0 or s1 >= total:
            return None
        return max(0.0, (total - s1) * (t1 - t0) / (s1 - s0) - max(0.0, now - t1))


def eta_at(eta_s: float | None, updated: float | None, now: float) -> float | None:
    """The ETA a progress reading gives at `now`: the estimate written (eta_s), less the time since it was written
    (updated); None without one (or once it has run out: a stale reading claims nothing)."""
    if eta_s is None or eta_s < 0:
        return None
    left = eta_s - max(0.0, now - updated) if updated is not None else eta_s
    return left if left >= 1.0 else None


def eta_text(eta_s: float | None, updated: float | None, now: float) -> str:
    """'ETA 4:05' (or 'ETA 1:02:03'), or '' without an ETA at `now`."""
    left = eta_at(eta_s, updated, now)
    return "" if left is None else f"ETA {clock(left)}"


def clock(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour."""
    s = int(seconds)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def sacct_clock(seconds: float) -> str:
    """Seconds as sacct's Elapsed says a Slurm job's: HH:MM:SS, D-HH:MM:SS from a day."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text
