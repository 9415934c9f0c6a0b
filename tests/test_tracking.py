"""train.report_to and [tracking]: today's strings still mean what they meant, lists of reporters, the tracking URI
checked as data (its scheme, no password in it) and before queueing (mlflow installed here, a server that answers:
a real closed port), where the dry run says the runs go; the rank's pure parts (tags, params, final metrics)."""

import json

import pytest

from hpcqa.core import config, tracking
from hpcqa.core.plan import HostProbe, build_plan
from hpcqa.errors import ConfigError
from hpcqa.executors import tracking as submitside
from tests.conftest import free_port, run_cli_in_process


def cfg(**sections) -> config.Config:
    return config.from_dict(sections)


@pytest.mark.parametrize(
    "given, meant",
    [
        ("tensorboard", ("tensorboard",)),
        ("none", ()),
        ("mlflow", ("mlflow",)),
        ([], ()),
        (["none"], ()),
        (["tensorboard", "mlflow"], ("tensorboard", "mlflow")),
    ],
)
def test_report_to_takes_todays_strings_and_lists(given, meant):
    assert cfg(train={"report_to": given}).train.report_to == meant


def test_a_config_of_today_runs_unchanged():
    c = cfg()
    assert c.train.report_to == ("tensorboard",) and c.tracking == tracking.TrackingConfig()
    again = config.from_dict(config.tomllib.loads(config.to_toml(c)))
    assert again == c  # the plan's config round trip (to_dict -> the rank's from_dict)


@pytest.mark.parametrize(
    "section, bad, key, said",
    [
        ({"train": {"report_to": "wandb"}}, None, "train.report_to", "not a reporter"),
        ({"train": {"report_to": ["mlflow", "tb"]}}, None, "train.report_to[1]", "not a reporter"),
        ({"train": {"report_to": ["mlflow", "mlflow"]}}, None, "train.report_to", "twice"),
        ({"train": {"report_to": 1}}, None, "train.report_to", "expected a list"),
        ({"tracking": {"uri": "ftp://host/x"}}, None, "tracking.uri", "no store for ftp"),
        ({"tracking": {"uri": "localhost:5000"}}, None, "tracking.uri", "not a URI"),
        ({"tracking": {"uri": "sqlite:///runs.db"}}, None, "tracking.uri", "not an absolute path"),
        (
            {"tracking": {"uri": "https://me:hunter22@mlflow.example"}},
            None,
            "tracking.uri",
            "password",
        ),
        ({"tracking": {"url": "http://x"}}, None, "tracking.url", "did you mean 'uri'"),
    ],
)
def test_bad_tracking_values_are_refused_naming_the_key(section, bad, key, said):
    with pytest.raises(ConfigError) as e:
        config.from_dict(section)
    assert e.value.key == key and said in e.value.render(), e.value.render()


def test_a_password_in_the_uri_is_never_echoed_and_the_fix_names_the_credentials():
    with pytest.raises(ConfigError) as e:
        config.from_dict({"tracking": {"uri": "https://me:hunter22@mlflow.example"}})
    text = e.value.render()
    assert "hunter22" not in text
    assert "MLFLOW_TRACKING_USERNAME" in text and "launch.pass_env" in text


def test_good_uris_pass():
    for uri in ("http://127.0.0.1:5000", "https://mlflow.example/", "sqlite:////tmp/a.db"):
        assert cfg(tracking={"uri": uri}).tracking.uri == uri
    assert tracking.scheme("postgresql+psycopg2://db/x") == "postgresql"
    cfg(tracking={"uri": "postgresql+psycopg2://db.example/mlflow"})


def test_where_runs_go_config_then_environment_then_the_job_root():
    env = {"MLFLOW_TRACKING_URI": "http://env:5000"}
    store = "/jobs/qa/mlflow.db"
    given = cfg(tracking={"uri": "http://cfg:5000"})
    assert tracking.destination(given, env, store) == ("http://cfg:5000", "tracking.uri")
    assert tracking.destination(cfg(), env, store) == ("http://env:5000", "$MLFLOW_TRACKING_URI")
    assert tracking.destination(cfg(), {}, store) == (
        "sqlite:////jobs/qa/mlflow.db",
        "the job root's store",
    )
    assert tracking.shown_uri("https://u:p@host:5000/x") == "https://host:5000/x"
    assert tracking.experiment(cfg(job={"name": "qa"})) == "qa"
    assert tracking.experiment(cfg(tracking={"experiment": "mine"})) == "mine"


def plan_of(**sections):
    sections.setdefault(
        "cluster", {"executor": "local", "sockets_per_node": 1, "cores_per_socket": 2}
    )
    return build_plan(config.from_dict(sections), HostProbe())


def test_a_server_that_does_not_answer_is_refused_before_queueing():
    port = free_port()  # nothing listens there: a real refused connection
    p = plan_of(train={"report_to": ["mlflow"]}, tracking={"uri": f"http://127.0.0.1:{port}"})
    with pytest.raises(ConfigError) as e:
        submitside.check([p])
    assert e.value.key == "tracking.uri" and "does not answer" in e.value.render()
    assert submitside.unanswered(f"http://127.0.0.1:{port}") is not None
    # nothing is asked when MLflow is not asked for
    submitside.check([plan_of(tracking={"uri": f"http://127.0.0.1:{port}"})])


def test_mlflow_missing_where_you_submit_names_the_extra(monkeypatch):
    monkeypatch.setattr(submitside, "installed", lambda: False)
    with pytest.raises(ConfigError) as e:
        submitside.check([plan_of(train={"report_to": "mlflow"})])
    assert e.value.key == "train.report_to" and "pip install 'hpcqa[mlflow]'" in e.value.render()
    submitside.check([plan_of()])  # TensorBoard alone needs no mlflow


def test_validate_refuses_a_dead_server_with_one_line_exit_2(tmp_path):
    port = free_port()
    r = run_cli_in_process(
        "validate",
        "configs/quickstart.toml",
        "--set",
        'train.report_to=["tensorboard", "mlflow"]',
        "--set",
        f'tracking.uri="http://127.0.0.1:{port}"',
    )
    assert r.returncode == 2, r.stderr
    assert (
        "tracking.uri" in r.stderr and "does not answer" in r.stderr and "Traceback" not in r.stderr
    )


def test_the_dry_run_line_says_where_runs_go(tmp_path):
    p = plan_of(train={"report_to": ["mlflow"]}, job={"output_dir": str(tmp_path), "name": "qa"})
    line = submitside.describe(p)
    assert f"sqlite:///{tmp_path}/qa/mlflow.db (the job root's store)" in line, line
    assert "experiment 'qa'" in line
    assert "nested" in submitside.describe(p, sweep=True)
    assert submitside.describe(plan_of()) is None


def test_a_users_own_program_is_not_tracked_by_hpcqa():
    c = cfg(train={"report_to": ["mlflow"]}, job={"command": ["python", "train.py"]})
    assert not tracking.sends_to_mlflow(c)


def test_the_parent_variable_is_hpcqas_own():
    with pytest.raises(ConfigError):
        cfg(launch={"env": {tracking.PARENT_ENV: "x"}})
    assert json.dumps(tracking.PARENT_ENV).startswith('"HPCQA_')


@pytest.mark.process
def test_the_dry_run_says_where_runs_go_and_json_carries_it(cli, tmp_path):
    sets = [
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        "--set",
        'train.report_to="mlflow"',
    ]
    r = cli("submit", "configs/quickstart.toml", "--dry-run", *sets, env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    assert f"MLflow sqlite:///{tmp_path}/quickstart/mlflow.db (the job root's store)" in r.stdout
    r = cli("submit", "configs/quickstart.toml", "--dry-run", "--json", *sets)
    assert json.loads(r.stdout)["tracking"] == {
        "uri": f"sqlite:///{tmp_path}/quickstart/mlflow.db",
        "chosen_by": "the job root's store",
        "experiment": "quickstart",
    }
    port = free_port()
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--dry-run",
        *sets,
        "--set",
        f'tracking.uri="http://127.0.0.1:{port}"',
    )
    assert r.returncode == 2 and "tracking.uri" in r.stderr and "Traceback" not in r.stderr, (
        r.stderr
    )
    assert not (tmp_path / "quickstart").exists()  # nothing written, nothing queued


@pytest.mark.torch
def test_the_final_metrics_leave_out_a_withheld_mfu():
    from hpcqa.rank.train.tracking import final_metrics

    res = {"exact_match": 70.0, "f1": 72.5, "train_samples_per_second": 13.0, "wall_time_s": 200}
    res["efficiency"] = {"mfu": None, "mfu_all_tokens": 0.6, "achieved_flops": 6e10}
    res["best_f1"] = None
    assert final_metrics(res) == {
        "exact_match": 70.0,
        "f1": 72.5,
        "train_samples_per_second": 13.0,
        "wall_time_s": 200.0,
    }
    res["efficiency"]["mfu"] = 0.58
    got = final_metrics(res)
    assert got["mfu"] == 0.58 and got["mfu_all_tokens"] == 0.6 and got["achieved_gflops"] == 60.0


@pytest.mark.torch
def test_the_job_id_is_the_schedulers_or_the_folders():
    from hpcqa.rank.train.tracking import job_id

    assert job_id("4242-ab12cd", {}) == "4242"
    assert job_id("x", {"SLURM_JOB_ID": "17"}) == "17"
    array = {"SLURM_JOB_ID": "18", "SLURM_ARRAY_JOB_ID": "17", "SLURM_ARRAY_TASK_ID": "1"}
    assert job_id("x", array) == "17_1"


def test_a_parent_named_in_the_environment_is_kept_not_made(tmp_path, monkeypatch):
    """A search submits its batches under the study's one parent: HPCQA_TRACKING_PARENT set, no new parent."""
    monkeypatch.setenv(tracking.PARENT_ENV, "0123abcd")
    p = plan_of(train={"report_to": ["mlflow"]}, job={"output_dir": str(tmp_path), "name": "qa"})
    with submitside.sweep_parent([p, p], is_sweep=True, ends_here=True) as parent:
        assert parent == "0123abcd"
    assert not (tmp_path / "qa").exists()  # no store made, nothing written
    monkeypatch.delenv(tracking.PARENT_ENV)
    with submitside.sweep_parent([p], is_sweep=False, ends_here=True) as parent:
        assert parent is None  # a plain job has no parent
