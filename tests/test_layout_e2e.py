"""Layouts for real on this machine: `hpcqa tune` measures 1x2 against 2x1 and `auto` follows it;
seeded runs repeat exactly; the rank's threads are placed as documented."""

import json
import os
from pathlib import Path

import pytest

from tests.test_local_e2e import TINY, job_dirs

pytestmark = pytest.mark.slow


@pytest.fixture
def env(tmp_path, tmp_path_factory):
    return {
        "HPCQA_CACHE": str(tmp_path_factory.getbasetemp() / "hpcqa-cache"),
        "HPCQA_REGISTRY": str(tmp_path / "registry.sqlite"),
        "HPCQA_TUNE_STORE": str(tmp_path / "tuned.json"),
    }


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs for two layouts")
def test_tune_compares_layouts_and_auto_uses_the_winner(cli, tmp_path, env):
    out = ["--set", f"job.output_dir={json.dumps(str(tmp_path))}"]
    r = cli(
        "tune",
        "configs/quickstart.toml",
        *TINY,
        *out,
        "--steps",
        "6",
        "--warmup",
        "2",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    measured = {int(k): v for k, v in res["measured"].items()}
    assert set(measured) == {1, 2} and all(v and v > 0 for v in measured.values())
    winner = max(measured, key=measured.get)
    assert res["entry"]["ranks_per_socket"] == winner
    for rps, job in res[
        "jobs"
    ].items():  # each candidate ran as an ordinary job with its own layout
        rep = json.loads((Path(job["folder"]) / "ranks" / "rank-0.json").read_text())
        assert rep["torch_threads"] == 2 // int(rps) and rep["local_world_size"] == int(rps)
    dry = cli("submit", "configs/quickstart.toml", *TINY, *out, "--dry-run", "--json", env=env)
    plan = json.loads(dry.stdout)
    assert plan["ranks_per_domain"] == winner and plan["world_size"] == winner
    assert plan["layout_source"].startswith("auto: `hpcqa tune`")
    status = json.loads(cli("status", "--json", "--all", env=env).stdout)
    assert sorted(j["state"] for j in status) == ["COMPLETED", "COMPLETED"]
    assert not list(tmp_path.glob("*/%j-*")), "submitit's staging folders were left behind"


def test_same_seed_same_weights_and_scores(cli, tmp_path, env):
    """The first run on a node shape measures the matmul peak (its store starts empty here); the second reads it
    when the first kept it (only a measurement on quiet cores is kept: on a busy CI machine the second measures
    again). The weights are the same all the same."""
    env = {**env, "HPCQA_CACHE": str(tmp_path / "cache")}  # an empty peak store for run a
    results, peaks = [], []
    for run in ("a", "b"):
        out = tmp_path / run
        r = cli(
            "submit",
            "configs/quickstart.toml",
            *TINY,
            "--set",
            f"job.output_dir={json.dumps(str(out))}",
            "--set",
            "launch.ranks_per_socket=2",
            "--set",
            "train.seed=7",
            env=env,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        (job,) = job_dirs(out)
        results.append(json.loads((job / "results.json").read_text()))
        peaks.append(json.loads((job / "ranks" / "rank-0.json").read_text())["peak_source"])
        if run == "a":
            kept = list((tmp_path / "cache").rglob("peaks.json"))
    assert peaks[0].startswith("measured"), peaks  # either rank may have kept it (the same shape)
    assert peaks[1] == "cached" if kept else peaks[1].startswith("measured"), peaks
    a, b = results
    assert a["world_size"] == b["world_size"] == 2
    assert a["weights_digest"] == b["weights_digest"]
    assert (a["exact_match"], a["f1"]) == (b["exact_match"], b["f1"])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_openmp_workers_one_per_core_everything_else_on_the_pool(cli, tmp_path, env):
    r = cli(
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        "--set",
        "launch.ranks_per_socket=1",
        "--set",
        "train.dataloader_num_workers=1",
        "--set",
        "train.max_steps=4",
        "--set",
        "train.do_eval=false",
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (job,) = job_dirs(tmp_path)
    rep = json.loads((job / "ranks" / "rank-0.json").read_text())
    pool = "0-1"
    assert rep["cpus"] == [0, 1] and rep["torch_threads"] == 2 and "widened" in rep["main_thread"]
    threads = rep[
        "threads"
    ]  # recorded by the rank itself at step 2, from /proc/<pid>/task/*/status
    main = [t for t in threads if t["main"] and t["pid"] == min(x["pid"] for x in threads)]
    assert main and main[0]["cpus"] == pool
    pinned = [t for t in threads if t["cpus"] != pool]
    assert len(pinned) == 1 and pinned[0]["cpus"] == "1"  # the one OpenMP worker, on its own core
    workers = {t["pid"] for t in threads} - {main[0]["pid"]}
    assert workers, "the DataLoader worker process was not seen"
    assert all(t["cpus"] == pool for t in threads if t["pid"] in workers)
