"""The CI run's time, printed at its end: each phase, the tests counted, the 20 slowest tests, and a budget.

    python scripts/citime.py --phase install=212 --phase "pass 1 (Slurm 22.05)=2950:/tmp/p1.xml" ... [--budget-s N]

A phase is NAME=SECONDS, or NAME=SECONDS:JUNIT_XML for a pytest pass (its --junitxml file: the tests counted and
each test's time). --beside NAME: that phase ran beside the others (the Slurm 24.11 pass beside the first), so its
time is shown but not added to the run's. Exit 1, with one line saying so, when the test passes together took longer than the budget
(--budget-s, default $HPCQA_CI_BUDGET_S, else DEFAULT_BUDGET_S): growth is seen the day it happens, long before the run reaches
CI's hard limit. The install phase is not counted against the budget (it is the mirror's speed, not the suite's).
A missing or damaged XML file is one line, and that pass's tests are left out.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

# the test passes took 1,750-1,900 s in the CI runs of 2026-11-27/28 (3 workers, 2 cores), 2,696 s on 2026-12-02
# (1,609 tests, with the users' models of issue 70, on a slower machine), and 3,352 s later that day (1,914 tests:
# issue 74's searches run for real on the local executor and on Slurm, MLflow against a real server, the fused
# kernel's rebuild tests, master weights' cold compile in the alone pass). Raised on purpose to 3,900 s: a sixth of
# headroom, the whole run (install included) ~65 minutes, under CI's 90. Making the slowest tests faster is owed.
DEFAULT_BUDGET_S = 3900


@dataclass
class Phase:
    name: str
    seconds: float
    xml: str = ""
    tests: list[tuple[float, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    note: str = ""
    beside: bool = False


def parse_phase(text: str) -> Phase:
    name, _, rest = text.rpartition("=")
    if not name:
        raise ValueError(f"--phase {text!r}: expected NAME=SECONDS[:JUNIT_XML]")
    seconds, _, xml = rest.partition(":")
    return Phase(name, float(seconds), xml)


def read_junit(phase: Phase) -> None:
    """The pass's tests and outcomes from pytest's junit XML (time per test: setup + call + teardown, less the
    shared fixtures tests/shared_setup.py names, which are listed apart)."""
    try:
        root = ET.parse(phase.xml).getroot()
    except (OSError, ET.ParseError) as e:
        phase.note = f"no test times ({phase.xml}: {e})"
        return
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in root.iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[outcome] += 1
        try:
            t = float(case.get("time") or 0)
        except ValueError:
            t = 0.0
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        shared_s, shared = _shared(case)
        phase.tests.append((max(t - shared_s, 0.0), name))
        if shared_s:  # a module's cluster, set up in its first test: a line of its own
            phase.tests.append((shared_s, f"{'; '.join(shared)} (in {name})"))
    phase.counts = counts


def _shared(case: ET.Element) -> tuple[float, list[str]]:
    """What tests/shared_setup.py put on a test: the seconds of the shared fixtures its setup or teardown ran (a
    Slurm cluster of the module), and which. A damaged value counts as none."""
    seconds, what = 0.0, []
    for prop in case.iter("property"):
        if prop.get("name") == "shared_s":
            try:
                seconds += max(float(prop.get("value") or 0), 0.0)
            except ValueError:
                continue
        elif prop.get("name") == "shared":
            what.append(prop.get("value") or "")
    return seconds, what


def report(phases: list[Phase], budget_s: float, slowest: int = 20) -> tuple[list[str], bool]:
    """-> (lines to print, within budget?)"""
    lines = ["=== CI time ==="]
    for p in phases:
        tests = (
            f"; {p.counts['passed']} passed, {p.counts['failed']} failed, {p.counts['skipped']} skipped"
            if p.counts
            else ""
        )
        notes = [n for n in ("ran beside the others" if p.beside else "", p.note) if n]
        lines.append(
            f"  {p.name}: {p.seconds:.0f} s{tests}" + (f" ({'; '.join(notes)})" if notes else "")
        )
    suite = sum(p.seconds for p in phases if p.xml and not p.beside)
    total = sum(p.seconds for p in phases if not p.beside)
    lines.append(
        f"  total {total:.0f} s; the test passes {suite:.0f} s of a {budget_s:.0f} s budget"
    )
    every = sorted(((t, f"{p.name}: {n}") for p in phases for t, n in p.tests), reverse=True)[
        :slowest
    ]
    if every:
        lines.append(
            f"  the {len(every)} slowest tests (a shared fixture's set-up and teardown on a line of its own):"
        )
        lines += [f"    {t:7.1f} s  {n}" for t, n in every]
    ok = suite <= budget_s
    if not ok:
        lines.append(
            f"hpcqa: the test passes took {suite:.0f} s, over the CI budget of {budget_s:.0f} s "
            "(HPCQA_CI_BUDGET_S): make the slowest tests above faster, or raise the budget on purpose"
        )
    if any(p.counts for p in phases):  # the plain closing line, over every pass
        n = {k: sum(p.counts.get(k, 0) for p in phases) for k in ("passed", "failed", "skipped")}
        lines.append(f"total: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped")
    return lines, ok


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--phase", action="append", default=[], help="NAME=SECONDS[:JUNIT_XML], in order"
    )
    ap.add_argument(
        "--beside", action="append", default=[], help="a phase (by NAME) that ran beside the others"
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=float(os.environ.get("HPCQA_CI_BUDGET_S") or DEFAULT_BUDGET_S),
    )
    ap.add_argument("--slowest", type=int, default=20)
    a = ap.parse_args(argv)
    try:
        phases = [parse_phase(t) for t in a.phase]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for p in phases:
        p.beside = p.name in a.beside
        if p.xml:
            read_junit(p)
    lines, ok = report(phases, a.budget_s, a.slowest)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
