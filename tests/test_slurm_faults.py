"""A node fails mid-job, on a real 2-node Slurm (SlurmdTimeout 10 s so the test doesn't wait 5 min)."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests import slurm_cluster
from tests.conftest import run_cli
from tests.test_slurm import ONE_PER_NODE, submit, wait_state

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(tmp_path_factory, nodes=2, accounting=True, slurmd_timeout=10)


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def training_on_two_nodes(slurm, tmp_path) -> tuple[str, Path]:
    """A long 2-node job, one rank on each node, submitted and training. -> (job id, folder)"""
    r = submit(
        slurm,
        tmp_path,
        "--set",
        "cluster.nodes=2",
        *ONE_PER_NODE,
        "--set",
        "train.max_steps=100000",
        wait=False,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    folder = Path(wait_state(slurm, job_id, {"RUNNING"})["folder"])
    end = time.time() + 120
    while time.time() < end and not (folder / "progress.json").exists():
        time.sleep(0.5)
    return job_id, folder


@slurm_cluster.EACH_RELEASE
def test_a_killed_rank_fails_the_job_fast_and_is_named(slurm, tmp_path):
    job_id, folder = training_on_two_nodes(slurm, tmp_path)
    victim = json.loads((folder / "ranks" / "rank-1.json").read_text())
    assert victim["host"] == "node2"
    os.kill(victim["pid"], signal.SIGKILL)  # rank 1's training process, on node2
    t0 = time.time()
    j = wait_state(slurm, job_id, {"FAILED", "CANCELLED", "COMPLETED"}, timeout=60)
    assert j["state"] == "FAILED" and time.time() - t0 < 15, j
    logs = run_cli("logs", job_id, env=slurm)
    assert (
        logs.returncode == 0
        and "first failure: rank 1 on node2: rank process killed by SIGKILL" in logs.stderr
    )


@slurm_cluster.EACH_RELEASE
def test_node_failure_is_followed_and_the_job_can_be_cancelled(slurm, tmp_path):
    job_id, folder = training_on_two_nodes(slurm, tmp_path)
    node2 = [json.loads((folder / "ranks" / f"rank-{k}.json").read_text()) for k in (1,)]
    assert {rep["host"] for rep in node2} == {"node2"}
    slurmd = int((Path(slurm["SLURM_CONF"]).parent / "slurmd.node2.pid").read_text())
    try:
        os.kill(slurmd, signal.SIGKILL)  # the node stops answering; its ranks run on
        seen, end = [], time.time() + 120
        while time.time() < end:
            state = slurm_cluster.job_states(slurm, job_id)[job_id]["state"]
            if not seen or seen[-1] != state:
                seen.append(state)
            if state in ("PENDING", "REQUEUED") and len(seen) > 1:
                break
            time.sleep(1)
        assert seen[0] == "RUNNING" and seen[-1] in ("PENDING", "REQUEUED"), (
            seen
        )  # requeued, not "over"
        assert not set(seen) & {"COMPLETED", "FAILED", "CANCELLED"}
        c = run_cli("cancel", job_id, env=slurm)
        assert c.returncode == 0 and f"cancelled slurm job {job_id}" in c.stdout, (
            c.stdout + c.stderr
        )
        assert wait_state(slurm, job_id, {"CANCELLED"}, timeout=60)["state"] == "CANCELLED"
    finally:
        # node2's slurmd is gone, so nothing stops node2's ranks for us: end them (and their wrappers)
        for rep in node2:
            try:
                parent = int(
                    Path(f"/proc/{rep['pid']}/stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (OSError, ValueError):
                parent = None
            _stop(rep["pid"])
            if parent:
                _stop(parent)
