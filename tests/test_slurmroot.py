"""scripts/slurmroot.py: the cached Debian root of another Slurm release, and running a command in it."""

import json
import os
import shlex
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import slurmroot  # noqa: E402


def test_the_mirror_is_the_one_the_hosts_apt_uses(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\nComponents: main\n"
    )
    assert slurmroot.host_mirror(tmp_path) == "http://mirror.example/debian/"
    (tmp_path / "sources.list.d/debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "deb [signed-by=/k.gpg] https://other.example/debian bookworm main\n"
    )
    assert slurmroot.host_mirror(tmp_path) == "https://other.example/debian"
    (tmp_path / "sources.list").write_text("deb https://packages.example/apt cloud main\n")
    with pytest.raises(SystemExit, match="--mirror"):
        slurmroot.host_mirror(tmp_path)


def test_a_root_is_used_only_when_its_stamp_names_this_package_list(tmp_path):
    root = tmp_path / "24.11"
    assert "no readable stamp" in slurmroot.stale(root, "24.11")
    (root / "usr/sbin").mkdir(parents=True)
    (root / ".hpcqa-root.json").write_text("{not json")
    assert "no readable stamp" in slurmroot.stale(root, "24.11")
    (root / ".hpcqa-root.json").write_text(
        json.dumps({**slurmroot.stamp_of("24.11"), "packages": ["slurmd"]})
    )
    assert "another package list" in slurmroot.stale(root, "24.11")
    (root / ".hpcqa-root.json").write_text(json.dumps(slurmroot.stamp_of("24.11")))
    assert "no slurmctld" in slurmroot.stale(root, "24.11")
    (root / "usr/sbin/slurmctld").touch()
    assert slurmroot.stale(root, "24.11") == ""


def test_binds_skip_system_folders_and_nested_paths_and_hostile_paths_stay_one_word(tmp_path):
    hostile = tmp_path / "a b$(touch pwned)'`x`"
    (hostile / "inner").mkdir(parents=True)
    binds = slurmroot.needed_paths([str(hostile), str(hostile / "inner"), "/usr"])
    assert hostile.resolve() in binds and (hostile / "inner").resolve() not in binds
    assert not any(str(b) in ("/usr", "/") for b in binds)
    script = slurmroot.enter_script(
        tmp_path / "root", tmp_path / "scratch", [hostile], hostile, ["echo", "$(id)"]
    )
    words = [shlex.split(line) for line in script.splitlines()]
    assert ["mount", "--bind", str(hostile), str(tmp_path / "root") + str(hostile)] in words
    inner = words[-1][-1]  # chroot ROOT /bin/sh -c INNER: the command's words come through as typed
    assert shlex.split(inner) == ["cd", str(hostile), "&&", "exec", "echo", "$(id)"]


@pytest.mark.slow
def test_a_command_in_the_root_runs_against_its_slurm_and_leaves_nothing_behind(tmp_path):
    """Needs root and debootstrap (scripts/test.sh installs it): builds the root once (about a minute), then runs a
    command there that leaves a process running and another in a nested mount namespace (as a multi-node test's
    slurmd leaves an orphaned slurmstepd); afterwards both are gone, no mount is left, the exit status is the
    command's, and a second run at the same time is refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    mounts = open("/proc/self/mounts").read()
    pids, gate = tmp_path / "pids", tmp_path / "gate"
    script = (
        f'slurmctld -V; echo "$HPCQA_SLURM_RELEASE"; sleep 300 >/dev/null 2>&1 & echo $! >> {pids}; '
        f'unshare --mount -- sh -c "sleep 301 >/dev/null 2>&1 & echo \\$! >> {pids}"; '
        f"while [ ! -e {gate} ]; do sleep 0.2; done; exit 7"
    )
    cmd = [
        sys.executable,
        str(ROOT / "scripts/slurmroot.py"),
        "run",
        "--release",
        "24.11",
        "--bind",
        str(tmp_path),
        "--",
        "sh",
        "-c",
        script,
    ]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.time() + 900
    while time.time() < end and len(pids.read_text().split() if pids.exists() else []) < 2:
        time.sleep(0.2)
    second = subprocess.run(cmd[:5] + ["--", "true"], capture_output=True, text=True, timeout=60)
    assert second.returncode != 0 and "another `run` uses the 24.11 root" in second.stderr, (
        second.stderr
    )
    gate.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 7, err
    assert out.splitlines()[:2] == ["slurm-wlm 24.11.5", "24.11"], out
    assert "ending 2 process(es)" in err, err
    time.sleep(0.5)
    for pid in map(int, pids.read_text().split()):  # no PID namespace: the PIDs are the host's
        assert (
            not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
        )
    assert open("/proc/self/mounts").read() == mounts
