"""Bring a real dev Slurm cluster (scripts/devcluster.py) up for a test module and down afterwards."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def available() -> str:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("slurmctld", "slurmd", "sbatch", "munged"):
        if not shutil.which(tool):
            return f"{tool} not installed (scripts/test.sh installs Debian's Slurm as root)"
    return ""


def cluster(tmp_path_factory, nodes: int, accounting: bool, max_array_size: int = 1001, slurmd_timeout: int = 300,
            preempt: str = "off", grace_time: int = 30, core_per_node: bool = False):
    why = available()
    if why:
        if os.environ.get("HPCQA_REQUIRE_SLURM"):
            pytest.fail(f"real Slurm required but unavailable: {why}")
        pytest.skip(why)
    d = tmp_path_factory.mktemp(f"slurm{nodes}{'a' if accounting else ''}")
    cmd = [sys.executable, str(ROOT / "scripts/devcluster.py"), "up", "--dir", str(d), "--nodes", str(nodes),
           "--max-array-size", str(max_array_size), "--slurmd-timeout", str(slurmd_timeout),
           "--preempt", preempt, "--grace-time", str(grace_time)]
    if accounting:
        cmd.append("--accounting")
    if core_per_node:
        cmd.append("--core-per-node")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        yield {"SLURM_CONF": str(d / "slurm.conf"), "HPCQA_REGISTRY": str(d / "registry.sqlite"),
               "HPCQA_CACHE": str(tmp_path_factory.getbasetemp() / "hpcqa-cache"),
               "HPCQA_TEST_CLUSTER_DIR": str(d)}  # devcluster.py shape needs it
    finally:
        subprocess.run([sys.executable, str(ROOT / "scripts/devcluster.py"), "down", "--dir", str(d)],
                       capture_output=True, text=True, timeout=120)
