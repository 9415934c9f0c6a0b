"""MLflow parent runs on Slurm, where `submit` returns at once: a grid sweep's parent is ended by its last variant to
end (FAILED when a variant failed), a search's by the follow-up job that finds no next batch. Runs go to the job
root's SQLite store (no URI), read back through MLflow's own client."""

import json
import time
from pathlib import Path

import pytest

from tests import slurm_cluster
from tests.conftest import run_cli
from tests.test_search_slurm import wait_log
from tests.test_slurm import TINY
from tests.test_sweep_slurm import sweep, wait_sweep

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

MLFLOW = 'train.report_to=["mlflow"]'


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(tmp_path_factory, nodes=3, accounting=True)


def parent_and_children(store: Path, timeout: float = 120) -> tuple:
    """The one parent run in the store and its children, once the parent has ended (or the time is up)."""
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    end = time.time() + timeout
    while True:
        exp = client.get_experiment_by_name("quickstart")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        parents = [r for r in runs if r.data.tags.get("hpcqa.sweep") == "parent"]
        if (parents and parents[0].info.status != "RUNNING") or time.time() > end:
            break
        time.sleep(2)
    assert len(parents) == 1, [r.data.tags for r in runs]
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], kids


def test_a_grid_sweeps_parent_ends_with_its_last_variant(slurm, tmp_path):
    sweep_id, err = sweep(slurm, tmp_path, MLFLOW, "sweep.train.seed=[1, 2]")
    assert "the sweep's parent run" in err, err
    jobs = wait_sweep(slurm, sweep_id, 2)
    assert {j["state"] for j in jobs} == {"COMPLETED"}
    parent, kids = parent_and_children(tmp_path / "quickstart" / "mlflow.db")
    assert parent.data.tags["hpcqa.parent_ends"] == "last-child"
    assert len(kids) == 2 and {k.info.status for k in kids} == {"FINISHED"}
    assert parent.info.status == "FINISHED"
    assert parent.info.end_time >= max(k.info.end_time for k in kids)


def test_a_grid_sweep_with_a_failed_variant_ends_its_parent_failed(slurm, tmp_path):
    sets = (
        MLFLOW,
        "sweep.train.seed=[1]",
        "sweep.variants=[{train = {fail_at_step = 1, seed = 5}}]",
    )
    sweep_id, _ = sweep(slurm, tmp_path, *sets)
    jobs = wait_sweep(slurm, sweep_id, 2)
    assert sorted(j["state"] for j in jobs) == ["COMPLETED", "FAILED"]
    parent, kids = parent_and_children(tmp_path / "quickstart" / "mlflow.db")
    assert sorted(k.info.status for k in kids) == ["FAILED", "FINISHED"]
    assert parent.info.status == "FAILED"


def test_a_searchs_parent_is_ended_by_its_last_follow_up(slurm, tmp_path):
    args = ["submit", "configs/quickstart.toml", *TINY]
    sets = (
        f"job.output_dir={json.dumps(str(tmp_path))}",
        "cluster.exclusive=false",
        "launch.ranks_per_socket=1",
        "train.max_steps=6",
        MLFLOW,
        'sweep.strategy="random"',
        "sweep.trials=2",
        "sweep.parallelism=1",
        "sweep.seed=6",
        'sweep.pruner="none"',  # this job does not evaluate on the way: nothing to prune by
        "sweep.train.learning_rate=[1e-4, 1e-3]",
    )
    for s in sets:
        args += ["--set", s]
    got = run_cli(*args, env=slurm)
    assert got.returncode == 0, got.stderr
    log = wait_log(tmp_path / "quickstart" / "search" / "follow-up.log", "parent run ended", 600)
    assert "MLflow: the search's parent run ended FINISHED" in log, log
    parent, kids = parent_and_children(tmp_path / "quickstart" / "mlflow.db")
    assert parent.data.tags["hpcqa.parent_ends"] == "follow-up"
    assert len(kids) == 2 and {k.info.status for k in kids} == {"FINISHED"}  # one per batch
    assert parent.info.status == "FINISHED"
