"""On a real Slurm without accounting: sacct refuses, status falls back to squeue + the jobs' files."""

import pytest

from tests import slurm_cluster
from tests.conftest import run_cli
from tests.test_slurm import status, submit, wait_state

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(tmp_path_factory, nodes=1, accounting=False)


ONE_RANK = (
    "--set",
    "launch.ranks_per_socket=1",
)  # the states are the job's: a second rank added only its imports


@slurm_cluster.EACH_RELEASE
def test_states_without_accounting(slurm, tmp_path):
    assert run_cli("status", env=slurm).returncode == 0
    r = submit(slurm, tmp_path, *ONE_RANK, "--set", "train.num_train_epochs=3", wait=False)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    j = wait_state(slurm, job_id, {"RUNNING"})
    assert j["state"] == "RUNNING"
    j = wait_state(slurm, job_id, {"COMPLETED"}, timeout=180)
    assert j["results"] and "f1" in j["results"]
    bad = submit(slurm, tmp_path, *ONE_RANK, "--set", "train.fail_at_step=1")
    assert bad.returncode == 1
    bad_id = bad.stderr.split("submitted Slurm job ")[1].split(":")[0]
    assert wait_state(slurm, bad_id, {"FAILED"})["state"] == "FAILED"
    # finished states are cached: they stay right without asking the scheduler again
    assert status(slurm, job_id)[job_id]["state"] == "COMPLETED"
