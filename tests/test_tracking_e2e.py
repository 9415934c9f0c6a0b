"""End to end: train.report_to = ["mlflow"] through `hpcqa submit` on the local executor with two real ranks; the runs
read back through MLflow's own client. A real `mlflow server` (SQLite backend) started here receives a job's run;
a sweep of two variants goes to the job root's SQLite store (no URI: the default) as a parent with two nested runs;
a server stopped while the job runs costs a warning, not the job; a job whose rank 1 fails leaves its run FAILED."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.test_local_e2e import TINY, job_dirs

pytestmark = pytest.mark.slow
pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

MLFLOW_ON = ["--set", 'train.report_to=["tensorboard", "mlflow"]']


@pytest.fixture
def cache_env(tmp_path_factory):
    env = {"HPCQA_CACHE": str(tmp_path_factory.getbasetemp() / "hpcqa-cache")}
    return {**env, "MLFLOW_TRACKING_URI": ""}  # the tests say where runs go, never the environment


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` with a SQLite backend on a free port, in its own process group; -> (process, URI) once it
    answers /health."""
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "server.log", "w")
    argv = [str(Path(sys.executable).parent / "mlflow"), "server"]
    argv += ["--backend-store-uri", f"sqlite:///{folder}/server.db", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--workers", "1"]
    # no job runner and its consumers beside the server (MLflow 3's GenAI jobs): this test sends runs only
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        argv, cwd=folder, stdout=log, stderr=log, start_new_session=True, env=env
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2):
                return proc, uri
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    stop_server(proc)
    raise AssertionError(
        "mlflow server did not come up:\n" + (folder / "server.log").read_text()[-3000:]
    )


def stop_server(proc: subprocess.Popen) -> None:
    """The server and its workers: its own process group, whose id is its pid."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def server(tmp_path):
    proc, uri = start_server(tmp_path / "server")
    yield uri
    stop_server(proc)


def submit(cli, out: Path, *sets: str, env: dict, wait: bool = True):
    """`hpcqa submit` of the tiny quickstart with MLflow on, into `out`, with `sets` as --set overrides."""
    args = ["submit", "configs/quickstart.toml", *(() if wait else ("--no-wait",))]
    args += ["--set", f"job.output_dir={json.dumps(str(out))}", *TINY, *MLFLOW_ON]
    for s in sets:
        args += ["--set", s]
    return cli(*args, env=env)


def only_run(client: MlflowClient, experiment: str):
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, experiment
    return client.search_runs([exp.experiment_id])


def test_a_jobs_run_reaches_the_server_from_rank_0_only(cli, tmp_path, cache_env, server):
    out = tmp_path / "out"
    r = submit(cli, out, f"tracking.uri={json.dumps(server)}", env=cache_env)
    assert r.returncode == 0, r.stdout + r.stderr
    (job,) = job_dirs(out)
    res = json.loads((job / "results.json").read_text())
    assert not [w for w in res["warnings"] if "MLflow" in w], res["warnings"]
    client = MlflowClient(tracking_uri=server)
    runs = only_run(client, "quickstart")
    assert len(runs) == 1, [x.info.run_id for x in runs]  # rank 1 sent nothing
    run = runs[0]
    assert run.info.status == "FINISHED"
    p = run.data.params
    assert p["world_size"] == "2" and p["model.name_or_path"] == "builtin:tiny-bert"
    assert float(p["train.learning_rate"]) == 1e-4 and p["train.logging_steps"] == "2"
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert len(loss) >= 3 and len({m.step for m in loss}) == len(loss), loss
    assert client.get_metric_history(run.info.run_id, "learning_rate")
    m = run.data.metrics
    assert m["f1"] == pytest.approx(res["f1"]) and m["exact_match"] == pytest.approx(
        res["exact_match"]
    )
    assert m["train_samples_per_second"] == pytest.approx(res["train_samples_per_second"])
    if (
        res["efficiency"]["mfu"] is not None
    ):  # withheld (a peak that moved on this shared machine): not sent
        assert m["mfu"] == pytest.approx(res["efficiency"]["mfu"])
    else:
        assert "mfu" not in m
    t = run.data.tags
    assert t["hpcqa.job_id"] == job.name.split("-")[0]
    assert t["hpcqa.plan_digest"] == res["plan_digest"] and t["hpcqa.executor"] == "local"
    assert "mlflow.parentRunId" not in t
    # where the run went: in the job folder, results.json and `hpcqa status JOB`
    assert res["tracking"] == {"run_id": run.info.run_id, "uri": server}
    status = cli("status", t["hpcqa.job_id"], env={**cache_env, "COLUMNS": "200"})
    assert re.search(rf"MLflow run\s+{run.info.run_id} at {re.escape(server)}", status.stdout), (
        status.stdout
    )


def test_a_sweep_is_a_parent_run_with_its_variants_nested_in_the_job_roots_store(
    cli, tmp_path, cache_env
):
    r = submit(
        cli,
        tmp_path,
        "sweep.train.learning_rate=[1e-4, 2e-4]",
        "train.do_eval=false",
        env=cache_env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the sweep's parent run" in r.stderr, r.stderr
    store = tmp_path / "quickstart" / "mlflow.db"
    assert store.is_file()
    runs = only_run(MlflowClient(tracking_uri=f"sqlite:///{store}"), "quickstart")
    parents = [x for x in runs if x.data.tags.get("hpcqa.sweep") == "parent"]
    assert len(parents) == 1 and len(runs) == 3, [x.data.tags for x in runs]
    (parent,) = parents
    assert parent.info.status == "FINISHED"  # the local executor ran the sweep to its end
    children = [x for x in runs if x is not parent]
    assert {x.data.tags["mlflow.parentRunId"] for x in children} == {parent.info.run_id}
    assert sorted(x.data.params["train.learning_rate"] for x in children) == ["0.0001", "0.0002"]
    assert sorted(x.data.tags["hpcqa.variant"] for x in children) == ["0", "1"]
    assert all(x.info.status == "FINISHED" and x.data.metrics["loss"] for x in children)


def test_a_server_gone_during_the_job_is_a_warning_not_a_failure(cli, tmp_path, cache_env):
    proc, uri = start_server(tmp_path / "server")
    try:
        r = submit(
            cli, tmp_path / "out", f"tracking.uri={json.dumps(uri)}", env=cache_env, wait=False
        )
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        stop_server(proc)  # the ranks are still loading: their first call to the server fails
    job_id = r.stdout.split()[-1]
    (job,) = job_dirs(tmp_path / "out")
    deadline = time.time() + 600
    while not (job / "results.json").exists() and time.time() < deadline:
        time.sleep(2)
    st = cli("status", job_id, "--json", env=cache_env)
    assert json.loads(st.stdout)[0]["state"] == "COMPLETED", st.stdout
    res = json.loads((job / "results.json").read_text())
    warned = [w for w in res["warnings"] if w.startswith(f"MLflow ({uri})")]
    assert len(warned) == 1 and "training goes on" in warned[0], res["warnings"]
    log = (job / f"{job_id}_0_log.err").read_text()
    assert "WARNING: MLflow" in log and res["f1"] is not None


def test_a_job_whose_other_rank_fails_ends_its_run_failed(cli, tmp_path, cache_env):
    """train.fail_at_step: the last rank (1) raises at step 2; rank 0 is blocked in a collective, then stopped by
    the local controller. Rank 1's failure path and the executor's end both end rank 0's run: FAILED."""
    r = submit(cli, tmp_path, "train.fail_at_step=2", "train.do_eval=false", env=cache_env)
    assert r.returncode == 1, r.stdout + r.stderr
    (job,) = job_dirs(tmp_path)
    run = json.loads((job / "tracking.json").read_text())
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/quickstart/mlflow.db")
    assert client.get_run(run["run_id"]).info.status == "FAILED"
    assert "WARNING: MLflow" not in r.stderr and "did not answer" not in r.stderr, r.stderr


def test_a_restarted_rank_continues_its_run(tmp_path, cache_env):
    """A rank started again in the same job folder (what a requeue does) goes on with the run tracking.json names:
    one run, RUNNING again then FINISHED, its end values from both attempts, its curves without a step twice."""
    from tests.conftest import ROOT
    from tests.test_local_e2e import one_rank_plan

    p = one_rank_plan(tmp_path, "train.do_eval=false", 'train.report_to=["mlflow"]')
    job = tmp_path / "job"  # its job root is tmp_path: the store is tmp_path/mlflow.db
    env = {**os.environ, **cache_env, "HPCQA_JOB_DIR": str(job)}
    cmd = [sys.executable, "-m", "hpcqa.rank", "--plan", str(p), "--"]
    cmd += [sys.executable, "-m", "hpcqa.rank.train", "--plan", str(p)]
    for attempt in (1, 2):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
        res = json.loads((job / "results.json").read_text())
        if attempt == 1:
            first = res["tracking"]["run_id"]
    assert res["resumed_from"].endswith("checkpoint-6") and res["tracking"]["run_id"] == first
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = only_run(client, "quickstart")
    assert run.info.run_id == first and run.info.status == "FINISHED"
    assert (
        len(client.get_metric_history(first, "wall_time_s")) == 2
    )  # each attempt's end, in the one run
    # the second attempt's steps are not logged twice
    loss = client.get_metric_history(first, "loss")
    assert loss and len({m.step for m in loss}) == len(loss), [m.step for m in loss]
