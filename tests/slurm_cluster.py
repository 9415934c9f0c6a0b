"""Bring a real dev Slurm cluster (scripts/devcluster.py) up for a test module and down afterwards."""

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import slurmroot  # noqa: E402

# The tests that also run on every other Slurm release (scripts/test.sh's later passes, `-m "slurm and
# each_release"`): what depends on the scheduler's own behaviour (sacct states, squeue reasons, arrays, --signal
# and requeue, preemption, a node or the controller failing, a rendered sbatch script). The rest of `-m slurm`
# exercises hpcqa's side of the same paths and runs on the host's release only.
EACH_RELEASE = pytest.mark.each_release


def available() -> str:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("slurmctld", "slurmd", "sbatch", "munged"):
        if not shutil.which(tool):
            return f"{tool} not installed (scripts/test.sh installs Debian's Slurm as root)"
    return ""


def slurm_version() -> str:
    """The version of the slurmctld the clusters start (22.05.8, 24.11.5...), or "" when there is none."""
    return slurmroot.slurm_version(None) if shutil.which("slurmctld") else ""


def release_mismatch() -> str:
    """The Slurm release is a parameter of the run (HPCQA_SLURM_RELEASE, set by scripts/slurmroot.py run): a test
    asked to run on one release never passes on another."""
    want = os.environ.get("HPCQA_SLURM_RELEASE", "")
    got = slurm_version()
    if want and not got.startswith(want + "."):
        return f"HPCQA_SLURM_RELEASE={want}, but slurmctld here is {got or 'missing'}"
    return ""


def instance() -> int:
    """Which of scripts/devcluster.py's side-by-side clusters this test process brings up: one per pytest-xdist
    worker (gw0, gw1...; a worker runs one module's cluster at a time), offset by HPCQA_CLUSTER_INSTANCE_BASE (the
    Slurm root's pass runs beside the first pass with its own)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return int(os.environ.get("HPCQA_CLUSTER_INSTANCE_BASE", "0")) + int(worker or 0)


# The emulated nodes of a cluster without --core-per-node are the same machine: each node's slurmd offers all of its
# cores, so the ranks of two "nodes" are pinned to the same cores, which no real cluster does. Their OpenMP threads
# spin while they wait (libgomp's default), on cores another node's rank is computing on: a 2-thread DDP step of a
# tiny BERT took 260 ms of CPU per rank spinning, 125 ms waiting passively (benchmarks/spin_bench.py). The jobs get
# this from the submitting environment (sbatch exports it); the scaling test's cluster (a core per node) does not.
SHARED_CORES_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def cluster(
    tmp_path_factory,
    nodes: int,
    accounting: bool,
    max_array_size: int = 1001,
    slurmd_timeout: int = 300,
    preempt: str = "off",
    grace_time: int = 30,
    core_per_node: bool = False,
):
    why = available()
    if why:
        if os.environ.get("HPCQA_REQUIRE_SLURM"):
            pytest.fail(f"real Slurm required but unavailable: {why}")
        pytest.skip(why)
    if release_mismatch():
        pytest.fail(release_mismatch())
    d = tmp_path_factory.mktemp(f"slurm{nodes}{'a' if accounting else ''}")
    k = instance()
    cmd = [
        sys.executable,
        str(ROOT / "scripts/devcluster.py"),
        "up",
        "--dir",
        str(d),
        "--nodes",
        str(nodes),
        "--instance",
        str(k),
        "--max-array-size",
        str(max_array_size),
        "--slurmd-timeout",
        str(slurmd_timeout),
        "--preempt",
        preempt,
        "--grace-time",
        str(grace_time),
    ]
    if accounting:
        cmd.append("--accounting")
    if core_per_node:
        cmd.append("--core-per-node")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        yield {
            "SLURM_CONF": str(d / "slurm.conf"),
            "HPCQA_REGISTRY": str(d / "registry.sqlite"),
            "HPCQA_CACHE": str(tmp_path_factory.getbasetemp() / "hpcqa-cache"),
            "HPCQA_TEST_CLUSTER_DIR": str(d),  # devcluster.py shape needs it
            "HPCQA_TEST_CLUSTER_NET": f"10.77.{k}",  # node K is at .1K (scripts/devcluster.py)
            **({} if core_per_node else SHARED_CORES_ENV),
        }
    finally:
        if accounting:
            log_jobs_cpu(d)
        subprocess.run(
            [sys.executable, str(ROOT / "scripts/devcluster.py"), "down", "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=120,
        )


@contextlib.contextmanager
def environment(env: dict):
    """os.environ with `env` over it, for hpcqa called in this process as the CLI would run with it."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def log_jobs_cpu(d) -> None:
    """HPCQA_TEST_CPU_LOG (tests/conftest.py): before a cluster with accounting goes down, a line per job it ran in
    the tests' own layout, `CPU_S ELAPSED_S START WORKER slurm-job:JOBID:NAME:STATE:CLUSTER_DIR` -- the CPU of
    the Slurm jobs, which the tests' lines leave out (their processes are slurmd's): sacct's TotalCPU, the job's
    steps summed (a step Slurm killed -- a cancel, a preemption -- counts little or nothing). A diagnostic: whatever
    goes wrong here is not the test's failure."""
    path = os.environ.get("HPCQA_TEST_CPU_LOG")
    if not path:
        return
    from hpcqa.executors.slurm.cli import duration_s

    try:
        r = subprocess.run(
            ["sacct", "-a", "-n", "-P", "-S", "2000-01-01"]
            + ["-o", "JobID,JobName,State,TotalCPU,Elapsed,Start"],
            capture_output=True,
            text=True,
            env={**os.environ, "SLURM_CONF": str(d / "slurm.conf"), "SLURM_TIME_FORMAT": "%s"},
            timeout=60,
        )
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        rows = []
        for line in r.stdout.splitlines():
            parts = line.split("|")
            # the job's own line (no '.'): TotalCPU summed over its steps
            if len(parts) == 6 and "." not in parts[0]:
                jid, name, state, cpu, elapsed, start = parts
                rows.append(
                    f"{duration_s(cpu):.1f} {duration_s(elapsed):.1f} {start if start.isdigit() else 0} "
                    f"{worker} slurm-job:{jid}:{name}:{(state.split() or ['?'])[0]}:{d.name}\n"
                )
        with open(path, "a") as f:
            f.writelines(rows)
    except (OSError, ValueError, subprocess.SubprocessError):
        pass


def job_states(env: dict, *ids: str) -> dict[str, dict]:
    """What `hpcqa status --json IDS` prints, by id -- computed in this process. For the waits, which ask every
    second: a CLI process per ask cost ~0.3 s of CPU (a third of a core for as long as a test waits, on a machine
    the test workers share). What a test asserts about status it still asks the CLI."""
    from hpcqa.executors import jobs
    from hpcqa.executors.slurm.cli import Slurm
    from hpcqa.record import registry

    with environment(env):
        reg = registry.Registry(None, create=False)
        views = jobs.collect(reg, Slurm(), list(ids), False)[0] if reg.exists else []
        return {v.id: json.loads(json.dumps(v.to_json(), default=str)) for v in views}
