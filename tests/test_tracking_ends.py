"""How MLflow runs end when no submit process waits for them (rank/runends.py), against a real SQLite store read back
through MLflow's own client: a Slurm grid sweep's parent ended by its last variant (race-free, reopened by a resumed
variant), a Slurm search's parent by its follow-up, a failed job's run FAILED by the executor or by a failing rank
other than 0, and a resumed run's curves not logged twice at the steps it redoes."""

import json
import os
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpcqa.core import tracking
from hpcqa.core.states import State
from hpcqa.executors import tracking as submitside
from hpcqa.rank import runends
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles import marks
from tests.conftest import free_port
from tests.test_tracking import plan_of

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """One job root, one store for the module's tests (a new SQLite store takes MLflow seconds to migrate)."""
    return tmp_path_factory.mktemp("mlflow-ends")


def mlflow_plan(root: Path, **more):
    return plan_of(
        train={"report_to": ["mlflow"]}, job={"output_dir": str(root), "name": "qa"}, **more
    )


def store(root: Path) -> str:
    return f"sqlite:///{root}/qa/mlflow.db"


def child(client, parent_id: str, name: str) -> str:
    exp = client.get_run(parent_id).info.experiment_id
    tags = {"mlflow.parentRunId": parent_id}
    return client.create_run(exp, run_name=name, tags=tags).info.run_id


def status(client, run_id: str) -> str:
    return client.get_run(run_id).info.status


def test_a_grid_sweeps_parent_is_ended_by_its_last_variant_to_end(root):
    """Each variant ends its own run, then lists its siblings: the first to end leaves the parent RUNNING, the last
    ends it (FAILED: a variant failed). Two variants that end at once both check: the second finds the parent
    ended and leaves it; ending it twice is harmless. A variant that resumes reopens it; its end ends it again."""
    p = mlflow_plan(root)
    client, parent = submitside.parent_run(p, 2, runends.BY_LAST_CHILD)
    tags = client.get_run(parent).data.tags
    assert tags[runends.PARENT_ENDS] == "last-child" and tags[runends.VARIANTS] == "2"
    a, b = child(client, parent, "a"), child(client, parent, "b")
    client.set_terminated(a, "FINISHED")
    assert runends.end_if_last(client, parent) is None and status(client, parent) == "RUNNING"
    client.set_terminated(b, "FAILED")
    assert runends.end_if_last(client, parent) == "FAILED"  # b, the last
    assert (
        runends.end_if_last(client, parent) is None
    )  # a, checking at the same time: already ended
    client.set_terminated(parent, "FAILED")  # both ending it: harmless
    assert status(client, parent) == "FAILED"
    # b requeued: RUNNING again, the parent too; b then finishes, and the parent with it
    client.update_run(b, status="RUNNING")
    assert runends.reopen(client, parent) and status(client, parent) == "RUNNING"
    assert runends.end_if_last(client, parent) is None  # b still runs
    client.set_terminated(b, "FINISHED")
    assert runends.end_if_last(client, parent) == "FINISHED"


def test_a_parent_is_not_ended_before_every_variant_has_a_run(root):
    client, parent = submitside.parent_run(mlflow_plan(root), 3, runends.BY_LAST_CHILD)
    for name in "ab":
        client.set_terminated(child(client, parent, name), "FINISHED")
    assert runends.end_if_last(client, parent) is None  # the third has not started yet
    client.set_terminated(child(client, parent, "c"), "KILLED")
    assert (
        runends.end_if_last(client, parent) == "KILLED"
    )  # a variant cancelled: the sweep was stopped


def test_who_ends_a_parent_is_tagged_at_submit_and_only_they_end_it(root):
    """The local executor ends its sweep's parent itself (as before); a queued grid's is ended by its last variant,
    a queued search's by its follow-up: a variant of those never ends it."""
    p = mlflow_plan(root)
    client = MlflowClient(tracking_uri=store(root))
    with submitside.sweep_parent([p, p], is_sweep=True, ends_here=True) as local:
        assert os.environ[tracking.PARENT_ENV] == local
    assert status(client, local) == "FINISHED"
    assert client.get_run(local).data.tags[runends.PARENT_ENDS] == "submit"
    with submitside.sweep_parent([p, p], is_sweep=True, ends_here=False) as queued:
        pass
    assert status(client, queued) == "RUNNING"
    assert client.get_run(queued).data.tags[runends.PARENT_ENDS] == "last-child"
    _, search = submitside.parent_run(p, 2, runends.BY_FOLLOW_UP)
    for parent in (local, search):
        kid = child(client, parent, "x")
        client.set_terminated(kid, "FINISHED")
        assert runends.end_if_last(client, parent) is None
    assert status(client, search) == "RUNNING"


@pytest.mark.parametrize(
    "ended, cancelled, expected",
    [
        (("FINISHED", "FAILED"), False, "FINISHED"),  # a failed trial is part of a search
        (("FAILED", "FAILED"), False, "FAILED"),  # no trial finished
        (("FINISHED", "KILLED"), True, "KILLED"),  # a trial cancelled: the search stopped
    ],
)
def test_a_searchs_parent_is_ended_by_its_follow_up(root, monkeypatch, ended, cancelled, expected):
    from hpcqa.executors.slurm import followup

    p = mlflow_plan(root)
    client, parent = submitside.parent_run(p, 2, runends.BY_FOLLOW_UP)
    for i, end in enumerate(ended):
        client.set_terminated(child(client, parent, f"trial-{i}"), end)
    monkeypatch.setenv(tracking.PARENT_ENV, parent)  # as sbatch exports it to the follow-up job
    said: list[str] = []
    raw = {"train": {"report_to": ["mlflow"]}, "job": {"output_dir": str(root), "name": "qa"}}
    raw["sweep"] = {"strategy": "random", "trials": 2, "train.learning_rate": [1e-5, 1e-3]}
    followup.end_parent(raw, "s.toml", cancelled, said.append)
    assert status(client, parent) == expected and said == [
        f"  MLflow: the search's parent run ended {expected}"
    ]
    assert submitside.end_search(p.config, cancelled) == (None, None)  # ended already: left


def test_no_parent_nothing_to_end(tmp_path, monkeypatch):
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    assert submitside.end_search(mlflow_plan(tmp_path).config, False) == (None, None)
    assert not (tmp_path / "qa").exists()  # no store opened


def job_with_run(tmp_path: Path, run_status: str):
    """A job folder naming its run (tracking.json), the run ended as given (or RUNNING)."""
    p = mlflow_plan(tmp_path)
    client, parent = submitside.parent_run(p, 1, runends.BY_LAST_CHILD)
    run_id = child(client, parent, "job")
    if run_status != "RUNNING":
        client.set_terminated(run_id, run_status)
    jd = JobDir(tmp_path / "qa" / f"17-{uuid.uuid4().hex[:8]}")
    jd.path.mkdir(parents=True)
    body = {"run_id": run_id, "uri": store(tmp_path), "parent_run_id": parent}
    marks.write_tracking(jd.tracking, body)
    return p, jd, client, run_id, parent


@pytest.mark.parametrize(
    "before, after",
    [("RUNNING", "FAILED"), ("KILLED", "FAILED"), ("FINISHED", "FINISHED"), ("FAILED", "FAILED")],
)
def test_a_failed_jobs_run_ends_failed_on_the_executor_side(root, before, after):
    """Rank 0 killed (or stopped KILLED by the notice that ended the others) while another rank failed: the run the
    job folder names ends FAILED; one that had ended FINISHED or FAILED is left. Its parent, of one variant, ends."""
    p, jd, client, run_id, parent = job_with_run(root, before)
    assert submitside.end_failed(p, jd) is None
    assert status(client, run_id) == after
    # the parent's last child: ended by whoever ended the run (here, only when end_failed did)
    assert status(client, parent) == ("FAILED" if before in ("RUNNING", "KILLED") else "RUNNING")


def test_the_local_executor_ends_a_failed_jobs_run(root, monkeypatch):
    from hpcqa.executors.local import executor as local

    p, jd, client, run_id, _ = job_with_run(root, "RUNNING")
    jd.ranks.mkdir()
    (jd.rank_failed(1)).write_text(json.dumps({"rank": 1, "error": "RuntimeError: boom"}))
    monkeypatch.setattr(local.common, "watch", lambda *a, **k: None)  # the job has ended
    job = SimpleNamespace(job_id=17, state="FAILED", done=lambda: True, cancel=lambda: None)
    out = local.finish(job, jd, p)
    assert out.state == State.FAILED and out.warnings == ()
    assert status(client, run_id) == "FAILED"


def test_a_store_that_does_not_answer_is_a_warning_not_an_error(root):
    p, jd, *_ = job_with_run(root, "RUNNING")
    dead = f"http://127.0.0.1:{free_port()}"
    p = mlflow_plan(root, tracking={"uri": dead})
    marks.write_tracking(jd.tracking, {"run_id": "0" * 32, "uri": dead})
    t0 = time.monotonic()
    said = submitside.end_failed(p, jd, wait_s=2.0)
    assert said and time.monotonic() - t0 < 10  # said, within its bound
    assert runends.call(dead, lambda c: 1 / 0, 2.0)[1]  # any error: one line


def test_a_resumed_run_logs_only_the_steps_it_has_not(root):
    client, parent = submitside.parent_run(mlflow_plan(root), 1)
    from mlflow.entities import Metric

    metrics = [Metric("loss", 1.0 / s, 0, s) for s in (2, 4, 6)] + [Metric("eval_f1", 50.0, 0, 4)]
    client.log_batch(parent, metrics=metrics)
    logged = runends.last_steps(client, parent)
    assert logged == {"loss": 6, "eval_f1": 4}
    assert runends.fresh({"loss": 0.1, "eval_f1": 60.0}, 4, logged) == {}  # redone: left out
    # each metric by its own last step: loss had step 6, eval_f1 did not
    assert runends.fresh({"loss": 0.1, "eval_f1": 60.0}, 6, logged) == {"eval_f1": 60.0}
    assert runends.fresh({"loss": 0.1, "eval_f1": 60.0}, 8, logged) == {
        "loss": 0.1,
        "eval_f1": 60.0,
    }
    assert runends.fresh({"loss": 0.1}, 2, {}) == {"loss": 0.1}  # a new run: everything


@pytest.mark.torch
def test_a_resumed_tracker_does_not_log_a_curve_twice(root):
    """A requeued attempt resumes from its checkpoint at step 4 after logging to step 6: steps 5-6 are redone but
    logged once; the end's values (a new attempt's EM/F1) are sent; the run and its parent end FINISHED."""
    from hpcqa.rank.train import tracking as ranktracking

    p, jd, client, run_id, parent = job_with_run(root, "KILLED")
    from mlflow.entities import Metric

    client.log_batch(run_id, metrics=[Metric("loss", 1.0 / s, 0, s) for s in (2, 4, 6)])
    client.set_terminated(parent, "KILLED")  # the sibling-less parent ended when the run was KILLED
    said: list[str] = []
    r = SimpleNamespace(jd=jd, plan=p, rank=0, world=1, log=said.append, report={"warnings": []})
    t = ranktracking.Tracker(r, store(root))
    t.on_train_begin(None, None, None)
    for step in (6, 8):
        t.on_log(None, SimpleNamespace(global_step=step), None, logs={"loss": 0.5})
    t.finish("FINISHED", {"f1": 80.0}, 8)
    assert r.report["warnings"] == [] and any("not logged again" in s for s in said), said
    steps = [m.step for m in client.get_metric_history(run_id, "loss")]
    assert sorted(steps) == [2, 4, 6, 8]
    assert client.get_run(run_id).data.metrics["f1"] == 80.0
    assert status(client, run_id) == "FINISHED" and status(client, parent) == "FINISHED"


@pytest.mark.torch
def test_a_failing_rank_other_than_0_ends_rank_0s_run_failed(root):
    from hpcqa.rank.train import tracking as ranktracking

    p, jd, client, run_id, parent = job_with_run(root, "RUNNING")
    assert ranktracking.fail_job_run(p, jd, 0) is None and status(client, run_id) == "RUNNING"
    assert ranktracking.fail_job_run(p, jd, 1) is None
    assert status(client, run_id) == "FAILED" and status(client, parent) == "FAILED"
