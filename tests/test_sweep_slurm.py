"""Sweeps as real Slurm job arrays: 3 emulated nodes, accounting, MaxArraySize = 3. A task takes a node, so three
nodes let an array's throttle be what limits it (with two, `%2` could not be told from the node count), and an
array of three runs at once."""

import json
import re
import time
from pathlib import Path

import pytest

from tests import slurm_cluster
from tests.conftest import run_cli
from tests.test_slurm import TINY

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(tmp_path_factory, nodes=3, accounting=True, max_array_size=3)


def sweep_args(out, *sets):
    """A task is one rank: what these tests hold is the arrays (which variant each task ran, throttling, splitting,
    cancelling), and a second rank per task cost ~7 s of CPU for its imports alone (multi-rank jobs: test_slurm)."""
    args = [
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        f"job.output_dir={json.dumps(str(out))}",
        "--set",
        "cluster.exclusive=false",
        "--set",
        "train.max_steps=6",
        "--set",
        "train.do_eval=true",
        "--set",
        "launch.ranks_per_socket=1",
    ]
    for s in sets:
        args += ["--set", s]
    return args


def sweep(env, out, *sets):
    r = run_cli(*sweep_args(out, *sets), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip(), r.stderr


def dry_run(env, out, *sets) -> dict:
    """The dry run of the very same submission (its request: plans, batch scripts)."""
    r = run_cli(*sweep_args(out, *sets), "--dry-run", "--json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def planned_digests(dry: dict) -> dict:
    """variant index -> plan digest."""
    return {v["index"]: v["plan_digest"] for v in dry["sweep"]["variants"]}


def wait_sweep(env, sweep_id, n, timeout=300):
    end, jobs = time.time() + timeout, []
    while time.time() < end:
        jobs = list(slurm_cluster.job_states(env, sweep_id).values())
        if len(jobs) == n and all(
            j["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for j in jobs
        ):
            return jobs
        time.sleep(2)
    raise AssertionError(
        f"sweep {sweep_id} did not finish: {[(j['id'], j['state']) for j in jobs]}"
    )


@slurm_cluster.EACH_RELEASE
def test_three_variants_one_array_throttled_to_two(slurm, tmp_path):
    sweep_id, err = sweep(
        slurm,
        tmp_path,
        "sweep.parallelism=2",
        "sweep.train.learning_rate=[1e-4, 1e-3]",
        "sweep.variants=[{train = {per_device_train_batch_size = 4}}]",
    )
    assert (
        len([x for x in err.splitlines() if x.startswith("array ")]) == 1
        and "3 variants in 1 array(s)" in err
    )
    jobs = wait_sweep(slurm, sweep_id, 3)
    assert {j["state"] for j in jobs} == {"COMPLETED"}
    assert {j["id"].split("_")[0] for j in jobs} == {sweep_id} and sorted(
        j["task_index"] for j in jobs
    ) == list(range(3))
    # from the tasks' own clocks: start of rank 0, end = results written
    spans = []
    for j in jobs:
        start = json.loads(open(f"{j['folder']}/ranks/rank-0.json").read())["started"]
        end = json.loads(open(f"{j['folder']}/results.json").read())["finished_at"]
        spans.append((start, end))
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert peak <= 2, f"{peak} tasks ran at once with parallelism 2"
    res = run_cli("results", sweep_id, "--json", "--plot", str(tmp_path / "sweep.png"), env=slurm)
    assert res.returncode == 0, res.stderr
    table = json.loads(res.stdout)["variants"]
    assert (
        len(table) == 3
        and all(r["f1"] is not None for r in table)
        and sum(r["best"] for r in table) == 1
    )
    assert table[0]["f1"] == max(r["f1"] for r in table)
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # each variant's trained model, by job id, the best marked: in --json, and on an 80-column terminal asked from
    # the output folder (paths relative to it), every line within 80 columns
    assert all(Path(r["model"], "config.json").is_file() for r in table), table
    text = run_cli("results", sweep_id, env={**slurm, "COLUMNS": "80"}, cwd=tmp_path).stdout
    assert max(len(line) for line in text.splitlines()) <= 80, text
    for r in table:
        shown = str(Path(r["model"]).relative_to(tmp_path))
        assert re.search(
            rf"{'best' if r['best'] else ''}\s+job {re.escape(r['id'])}\s+{re.escape(shown)}$",
            text,
            re.M,
        ), text
        mark = r"\*" if r["best"] else " "
        assert re.search(rf"^\s*{mark}{re.escape(r['id'])}\s.*\sCOMPLETED\s", text, re.M), text
    assert sweep_id in run_cli("status", env=slurm).stdout  # the sweep is one row of the overview


def test_sweep_larger_than_max_array_size_is_split_and_a_failure_stays_visible(slurm, tmp_path):
    # 4 grid variants + 1 explicit failing one = 5 > MaxArraySize 3: two arrays, each variant once
    sets = (
        "sweep.parallelism=3",
        "sweep.train.seed=[1, 2, 3, 4]",
        "sweep.variants=[{train = {fail_at_step = 1, seed = 5}}]",
    )
    dry = dry_run(slurm, tmp_path, *sets)
    planned = planned_digests(dry)
    assert len(set(planned.values())) == 5
    sweep_id, err = sweep(slurm, tmp_path, *sets)
    assert "5 variants in 2 array(s)" in err
    jobs = wait_sweep(slurm, sweep_id, 5)
    assert len({j["id"].split("_")[0] for j in jobs}) == 2
    # the dry run showed both arrays' batch scripts as they were submitted (but for the submission's token)
    arrays = sorted({j["id"].split("_")[0] for j in jobs}, key=int)
    first = {a: Path(next(j["folder"] for j in jobs if j["id"] == f"{a}_0")) for a in arrays}
    token = first[arrays[0]].name.split("-", 1)[1]
    submitted = [(first[a] / f"{a}_submission.sh").read_text() for a in arrays]
    assert [s.replace(dry["submission"], token) for s in dry["sbatch"]] == submitted
    assert "#SBATCH --array=0-2%3" in submitted[0] and "#SBATCH --array=0-1%2" in submitted[1]
    assert sorted(j["task_index"] for j in jobs) == list(range(5))
    ran = []
    for j in jobs:  # from each task's own rank reports: which plan (and so which variant) it ran
        reports = [
            json.loads(p.read_text())
            for p in sorted(Path(j["folder"]).glob("ranks/rank-*.json"))
            if p.name.count(".") == 1
        ]  # rank-K.json, not rank-K.phase.json
        assert len(reports) == 1, reports  # the plan's one rank
        assert {rep["plan_digest"] for rep in reports} == {planned[j["task_index"]]}
        assert {rep["variant_index"] for rep in reports} == {j["task_index"]}
        assert {rep["variant"]["train.seed"] for rep in reports} == {j["variant"]["train.seed"]}
        ran.append(reports[0]["plan_digest"])
    assert sorted(ran) == sorted(planned.values())  # each variant ran exactly once, as itself
    states = {j["task_index"]: j["state"] for j in jobs}
    assert states.pop(4) == "FAILED" and set(states.values()) == {"COMPLETED"}
    res = json.loads(run_cli("results", sweep_id, "--json", env=slurm).stdout)["variants"]
    assert len(res) == 5 and res[-1]["state"] == "FAILED" and res[-1]["f1"] is None


@slurm_cluster.EACH_RELEASE
def test_cancel_a_sweep_task_and_the_sweep(slurm, tmp_path):
    sweep_id, _ = sweep(
        slurm,
        tmp_path,
        "sweep.parallelism=1",
        "sweep.train.seed=[1, 2, 3]",
        "train.max_steps=100000",
    )
    r = run_cli("cancel", sweep_id, "--task", "2", env=slurm)
    assert r.returncode == 0 and f"{sweep_id}_2" in r.stdout, r.stderr
    r = run_cli("cancel", sweep_id, env=slurm)
    assert r.returncode == 0, r.stderr
    jobs = wait_sweep(slurm, sweep_id, 3, timeout=60)
    assert {j["state"] for j in jobs} == {"CANCELLED"}
