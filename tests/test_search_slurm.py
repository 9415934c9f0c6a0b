"""A search on a real Slurm (3 emulated nodes, accounting): each batch one job array, a follow-up job that waits
for it (afterany) and, on a node, tells the study and submits the next batch; a trial pruned for real by the median
pruner after a real evaluation; a cancel that stops the search at the follow-up."""

import json
import re
import time
from pathlib import Path

import pytest

from tests import slurm_cluster
from tests.conftest import run_cli
from tests.test_slurm import TINY

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# random, seed 6, batches of 2: batch 1 draws 1e-3, 1e-3; batch 2 (seeded 6 + 2) 1e-12, 1e-3 (study.sampler). The
# 1e-12 trial cannot learn: at its first evaluation it is behind the median of the two completed trials.
SETS = (
    "cluster.exclusive=false",
    "launch.ranks_per_socket=1",
    'train.eval_strategy="steps"',
    "train.eval_steps=3",
    "train.save_steps=3",
    "train.per_device_train_batch_size=8",
    'sweep.strategy="random"',
    "sweep.trials=4",
    "sweep.parallelism=2",
    "sweep.seed=25",
    'sweep.pruner="median"',
    "sweep.train.learning_rate=[1e-3, 2e-3, 1.5e-3, 1e-12]",  # distinct points: a repeat is not run
)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(tmp_path_factory, nodes=3, accounting=True)


def args(out: Path, *more: str) -> list[str]:
    a = [
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        f"job.output_dir={json.dumps(str(out))}",
    ]
    for s in (*SETS, *more):
        a += ["--set", s]
    return a


def wait_trials(env: dict, sweep_id: str, n: int, timeout: float = 600) -> list[dict]:
    end, rows = time.time() + timeout, []
    while time.time() < end:
        out = run_cli("results", sweep_id, "--json", env=env)
        rows = json.loads(out.stdout)["variants"] if out.returncode == 0 else []
        if len(rows) == n and all(
            r["state"] in ("COMPLETED", "PRUNED", "FAILED", "CANCELLED") for r in rows
        ):
            return rows
        time.sleep(3)
    raise AssertionError(f"search {sweep_id}: {[(r.get('trial'), r['state']) for r in rows]}")


def wait_log(path: Path, words: str, timeout: float = 300) -> str:
    """The follow-up jobs' log once it says `words` (the follow-up runs after its batch has ended)."""
    end = time.time() + timeout
    while time.time() < end and words not in (path.read_text() if path.exists() else ""):
        time.sleep(2)
    return path.read_text() if path.exists() else ""


def test_a_search_runs_in_batches_of_arrays_and_prunes_a_trial(slurm, tmp_path):
    dry = run_cli(*args(tmp_path), "--dry-run", "--json", env=slurm)
    assert dry.returncode == 0, dry.stderr
    assert [v["params"] for v in json.loads(dry.stdout)["sweep"]["variants"]] == [
        {"train.learning_rate": 1e-3},
        {"train.learning_rate": 1.5e-3},
    ]
    got = run_cli(*args(tmp_path), env=slurm)
    assert got.returncode == 0, got.stderr
    sid = got.stdout.strip()
    assert re.search(r"follow-up job \d+ tells the study", got.stderr), got.stderr
    # submitted again while it runs: refused (a second chain of batches on one study), naming the follow-up
    again = run_cli(*args(tmp_path), env=slurm)
    assert again.returncode == 2 and "is running: its follow-up job" in again.stderr, again.stderr
    rows = wait_trials(slurm, sid, 4)
    by = {r["trial"]: r for r in rows}
    assert [by[n]["params"]["train.learning_rate"] for n in range(4)] == [1e-3, 1.5e-3, 1e-12, 2e-3]
    assert by[2]["state"] == "PRUNED" and by[2]["steps"] == 3 and not by[2]["best"], by[2]
    assert all(by[n]["state"] == "COMPLETED" for n in (0, 1, 3))
    # two arrays, one per batch, registered under one sweep id
    arrays = {r["id"].split("_")[0] for r in rows}
    assert len(arrays) == 2 and sid in arrays
    # the follow-up jobs' own words, and Optuna's record of the study
    log = wait_log(
        tmp_path / "quickstart" / "search" / "follow-up.log", " complete, "
    )  # the last one
    assert "trial 0 (job" in log and "trial 2 (job" in log and "1 pruned" in log, log
    st = json.loads(run_cli("results", sid, "--json", env=slurm).stdout)["study"]
    assert [t["state"] for t in st["trials"]] == ["COMPLETE", "COMPLETE", "PRUNED", "COMPLETE"]
    status = run_cli("status", sid, env={**slurm, "COLUMNS": "200"}).stdout
    assert "3 COMPLETED, 1 PRUNED" in status, status


def test_cancel_stops_the_search_at_its_follow_up(slurm, tmp_path):
    out = tmp_path / "c"
    got = run_cli(*args(out, "train.max_steps=400", 'job.name="cancelled"'), env=slurm)
    assert got.returncode == 0, got.stderr
    sid = got.stdout.strip()
    end = time.time() + 300
    while time.time() < end:
        states = {v["state"] for v in slurm_cluster.job_states(slurm, sid).values()}
        if "RUNNING" in states:
            break
        time.sleep(2)
    assert run_cli("cancel", sid, env=slurm).returncode == 0
    log = wait_log(out / "cancelled" / "search" / "follow-up.log", "stopped")
    assert "was cancelled; submit the config again to go on" in log
    time.sleep(5)  # no next batch was queued
    rows = json.loads(run_cli("results", sid, "--json", env=slurm).stdout)["variants"]
    assert len(rows) == 2 and {r["state"] for r in rows} == {"CANCELLED"}, rows
