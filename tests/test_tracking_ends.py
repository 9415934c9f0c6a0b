"""How MLflow runs end when no submit process waits for them (rank/runends.py), against a real SQLite store read back
through MLflow's own client: a Slurm grid sweep's parent ended by its last variant (race-free, reopened by a resumed
variant), a Slurm search's parent by its follow-up."""

import os
from pathlib import Path

import pytest

from hpcqa.core import tracking
from hpcqa.executors import tracking as submitside
from hpcqa.rank import runends
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
