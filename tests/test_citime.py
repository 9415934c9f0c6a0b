"""scripts/citime.py: the CI run's time at its end -- phases, counts, the slowest tests, the budget."""

import os
import subprocess
import sys

import pytest

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


SHARED = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_c" name="test_first" time="94.0"><properties>
<property name="shared_s" value="14.5"/><property name="shared" value="slurm (module) set up"/></properties>
</testcase>
<testcase classname="tests.test_c" name="test_last" time="30.0"><properties>
<property name="shared_s" value="x"/><property name="shared_s" value="5.0"/>
<property name="shared" value="slurm (module) torn down"/></properties></testcase>
</testsuite></testsuites>"""


def test_a_shared_fixtures_time_is_a_line_of_its_own(tmp_path):
    """A module's cluster, set up in its first test and torn down in its last: the tests' own times without it, and
    the fixture's time on a line of its own (a damaged value is no time)."""
    xml = tmp_path / "p.xml"
    xml.write_text(SHARED)
    p = citime.parse_phase(f"pass=200:{xml}")
    citime.read_junit(p)
    assert sorted(p.tests, reverse=True) == [
        (79.5, "tests.test_c::test_first"),
        (25.0, "tests.test_c::test_last"),
        (14.5, "slurm (module) set up (in tests.test_c::test_first)"),
        (5.0, "slurm (module) torn down (in tests.test_c::test_last)"),
    ]
    assert p.counts["passed"] == 2


MODULE = """
import time
import pytest


@pytest.fixture(scope="session")
def base():
    time.sleep(1.0)
    yield


@pytest.fixture(scope="module")
def cluster(base):
    time.sleep(0.2)
    yield
    time.sleep(1.0)


@pytest.fixture
def own():
    time.sleep(0.4)


def test_first(cluster, own):
    time.sleep(0.1)


def test_last(cluster):
    time.sleep(0.1)
"""


@pytest.mark.process
def test_the_plugin_times_what_the_tests_share(tmp_path):
    """tests/shared_setup.py in a real pytest run: the module fixture's set-up (with the session one it needs,
    counted once) on the first test, its teardown on the last, the function fixture left the test's own."""
    (tmp_path / "test_mod.py").write_text(MODULE)
    xml = tmp_path / "out.xml"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.shared_setup", "-p", "no:cacheprovider"]
        + [f"--junitxml={xml}", "--rootdir", str(tmp_path), str(tmp_path / "test_mod.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    p = citime.parse_phase(f"pass=10:{xml}")
    citime.read_junit(p)
    got = dict((name, t) for t, name in p.tests)
    first, last = "test_mod::test_first", "test_mod::test_last"
    up = next(n for n in got if n.startswith("base (session) set up; cluster (module) set up"))
    down = next(n for n in got if n.startswith("cluster (module) torn down"))
    # bounds that hold on a busy machine and still tell the cases apart: the session fixture counted twice would be
    # 2.2 s; the module's set-up or teardown left on a test would put it over 1.2 s
    # (the lower bounds loose too: junit's time and the plugin's clock are read at slightly different moments)
    assert 1.1 <= got[up] < 2.0, got  # 1.0 + 0.2
    assert 0.9 <= got[down] < 1.9, got
    assert 0.4 <= got[first] < 1.2, got  # its own: the function fixture (0.4) and its body (0.1)
    assert 0.05 <= got[last] < 0.9, got
