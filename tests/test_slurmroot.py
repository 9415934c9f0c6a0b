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
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\nComponents: main\n")
    assert slurmroot.host_mirror(tmp_path) == "http://mirror.example/debian/"
    (tmp_path / "sources.list.d/debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [signed-by=/k.gpg] https://other.example/debian bookworm main\n")
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
    (root / ".hpcqa-root.json").write_text(json.dumps({**slurmroot.stamp_of("24.11"), "packages": ["slurmd"]}))
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
    script = slurmroot.enter_script(tmp_path / "root", tmp_path / "scratch", [hostile], hostile, ["echo", "$(id)"])
    head, last = script.split("\nexec chroot ")  # the last command spans lines: INIT is a quoted program
    words = [shlex.split(line) for line in head.splitlines()] + [shlex.split("exec chroot " + last)]
    assert ["mount", "--bind", str(hostile), str(tmp_path / "root") + str(hostile)] in words
    # chroot ROOT PYTHON -I -c INIT CWD ARGV...: the command's words come through as typed
    assert words[-1] == ["exec", "chroot", str(tmp_path / "root"), sys.executable, "-I", "-c", slurmroot.INIT,
                         str(hostile), "echo", "$(id)"]


@pytest.mark.slow
def test_a_command_in_the_root_runs_against_its_slurm_and_leaves_nothing_behind(tmp_path):
    """Needs root and debootstrap (scripts/test.sh installs it): builds the root once (about a minute), then runs a
    command there that leaves a process running and an orphan of a nested mount namespace (as a multi-node test's
    slurmd does); afterwards no process of that PID namespace is left, nor any mount; the exit status is the
    command's."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    mounts = open("/proc/self/mounts").read()
    marker = tmp_path / "ns"
    script = (f'slurmctld -V; echo "$HPCQA_SLURM_RELEASE"; readlink /proc/self/ns/pid > {marker}; '
              'sleep 300 >/dev/null 2>&1 & unshare --mount -- sh -c "sleep 300 >/dev/null 2>&1 &"; exit 7')
    cmd = [sys.executable, str(ROOT / "scripts/slurmroot.py"), "run", "--release", "24.11", "--bind", str(tmp_path),
           "--", "sh", "-c", script]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 7, r.stderr
    assert r.stdout.splitlines()[:2] == ["slurm-wlm 24.11.5", "24.11"], r.stdout
    ns = marker.read_text().strip()
    assert ns.startswith("pid:[") and ns != os.readlink("/proc/self/ns/pid")
    time.sleep(0.5)
    left = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink(f"/proc/{d}/ns/pid") == ns:
                    left.append(d)
            except OSError:
                pass
    assert not left
    assert open("/proc/self/mounts").read() == mounts
