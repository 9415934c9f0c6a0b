"""scripts/citime.py: the CI run's time at its end -- phases, counts, the slowest tests, the budget."""

import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import citime  # noqa: E402

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_fast" time="0.5"/>
<testcase classname="tests.test_a" name="test_slow" time="95.25"/>
<testcase classname="tests.test_b" name="test_broken" time="3.0"><failure message="x"/></testcase>
<testcase classname="tests.test_b" name="test_skipped" time="0.0"><skipped message="y"/></testcase>
</testsuite></testsuites>"""


def test_phases_counts_and_the_slowest_tests(tmp_path):
    xml = tmp_path / "p1.xml"
    xml.write_text(JUNIT)
    phases = [
        citime.parse_phase("install=212"),
        citime.parse_phase(f"pass 1 (Slurm 22.05)=1500:{xml}"),
    ]
    for p in phases:
        if p.xml:
            citime.read_junit(p)
    lines, ok = citime.report(phases, budget_s=2000, slowest=2)
    text = "\n".join(lines)
    assert (
        ok
        and "install: 212 s" in text
        and "pass 1 (Slurm 22.05): 1500 s; 2 passed, 1 failed, 1 skipped" in text
    )
    assert "the test passes 1500 s of a 2000 s budget" in text and "total 1712 s" in text
    slow = [line for line in lines if line.startswith("    ")]
    assert (
        len(slow) == 2
        and "95.2 s" in slow[0]
        and "test_slow" in slow[0]
        and "test_broken" in slow[1]
    )
    assert lines[-1] == "total: 2 passed, 1 failed, 1 skipped"


def test_over_budget_is_one_line_and_a_failure(tmp_path):
    phases = [
        citime.parse_phase("install=900"),
        citime.parse_phase(f"pass=4300:{tmp_path / 'missing.xml'}"),
    ]
    for p in phases:
        if p.xml:
            citime.read_junit(p)
    lines, ok = citime.report(phases, budget_s=4200)
    assert not ok
    assert any(
        line.startswith("hpcqa: the test passes took 4300 s, over the CI budget of 4200 s")
        for line in lines
    )
    assert any(
        "no test times" in line for line in lines
    )  # a missing XML is a note, not a traceback


def test_install_time_is_not_the_suites(tmp_path):
    lines, ok = citime.report([citime.parse_phase("install=5000")], budget_s=100)
    assert ok


def test_a_bad_phase_is_exit_2(capsys):
    assert citime.main(["--phase", "nonsense"]) == 2
    assert "expected NAME=SECONDS" in capsys.readouterr().err


def test_a_phase_beside_the_others_is_shown_not_added(tmp_path, capsys):
    xml = tmp_path / "p.xml"
    xml.write_text(JUNIT)
    code = citime.main(
        [
            "--phase",
            "install=100",
            "--phase",
            f"pass 1=1000:{xml}",
            "--phase",
            f"Slurm 24.11 pass=400:{xml}",
            "--phase",
            "alone=200",
            "--beside",
            "Slurm 24.11 pass",
            "--budget-s",
            "1250",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Slurm 24.11 pass: 400 s; 2 passed, 1 failed, 1 skipped (ran beside the others)" in out
    assert (
        "total 1300 s; the test passes 1000 s of a 1250 s budget" in out
    )  # alone has no XML: not a pass
    assert out.splitlines()[-1] == "total: 4 passed, 2 failed, 2 skipped"  # its tests still counted
