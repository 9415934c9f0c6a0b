"""Secrets never land on disk or screen: credentials are refused in launch.env, passed by name (launch.pass_env) or
taken from a Kubernetes Secret (k8s.secret_env); job roots and registries are their owner's."""

import json
import os
import stat
import uuid
from pathlib import Path

import pytest

from hpcqa.core import config
from hpcqa.errors import ConfigError
from tests.conftest import ROOT
from tests.test_local_e2e import TINY, cache_env, job_dirs  # noqa: F401  (cache_env is a fixture)


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "WANDB_API_KEY", "db_password", "MY_SECRET_THING", "AWS_SECRET_ACCESS_KEY"]
)
def test_a_credential_in_launch_env_is_refused_with_the_fix(name):
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/quickstart.toml", [f'launch.env={{{name} = "x"}}'])
    assert e.value.key == f"launch.env.{name}" and f'launch.pass_env = ["{name}"]' in e.value.hint


def test_a_key_shaped_value_under_a_neutral_name_is_refused():
    """A W&B key (40 hex digits) under a name that says nothing (WANDB, X): refused by its shape, before it is
    written anywhere; 39 or 41 digits, or text around them, pass."""
    key = uuid.uuid4().hex + uuid.uuid4().hex[:8]
    for name in ("WANDB", "X"):
        with pytest.raises(ConfigError) as e:
            config.load(ROOT / "configs/quickstart.toml", [f'launch.env={{{name} = "{key}"}}'])
        assert e.value.key == f"launch.env.{name}" and key not in e.value.message + e.value.hint
        assert f'launch.pass_env = ["{name}"]' in e.value.hint
    for fine in (key[:39], key + "0", f"rev-{key}"):
        config.load(ROOT / "configs/quickstart.toml", [f'launch.env={{X = "{fine}"}}'])


def test_plain_names_pass_and_pass_env_takes_names_only():
    cfg = config.load(
        ROOT / "configs/quickstart.toml",
        ['launch.env={HF_HUB_OFFLINE = "1", KEYBOARD = "us"}', 'launch.pass_env=["HF_TOKEN"]'],
    )
    assert cfg.launch.pass_env == ("HF_TOKEN",)
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/quickstart.toml", ['launch.pass_env=["HF_TOKEN=abc"]'])
    assert e.value.key == "launch.pass_env[0]"
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/quickstart.toml", ['k8s.secret_env={HF_TOKEN = "no slash"}'])
    assert e.value.key == "k8s.secret_env.HF_TOKEN"


def test_a_missing_passed_variable_stops_submit_before_anything_is_registered(cli, tmp_path):
    env = {"HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    r = cli(
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        "--set",
        'launch.pass_env=["TEST_UNSET_TOKEN_OF_HPCQA"]',
        env=env,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert (
        "launch.pass_env" in r.stderr
        and "TEST_UNSET_TOKEN_OF_HPCQA" in r.stderr
        and "export" in r.stderr
    )
    assert not (tmp_path / "reg.sqlite").exists()


@pytest.mark.slow
def test_a_sentinel_secret_reaches_the_ranks_and_nothing_written_or_printed(
    cli,
    tmp_path,
    cache_env,  # noqa: F811
):
    sentinel = f"hf_sentinel_{uuid.uuid4().hex}"
    env = {**cache_env, "HF_TOKEN": sentinel, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    common = [
        "configs/quickstart.toml",
        *TINY,
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        "--set",
        'launch.pass_env=["HF_TOKEN"]',
        "--set",
        "train.max_steps=3",
        "--set",
        "train.do_eval=false",
    ]
    runs = [
        cli("submit", *common, "--dry-run", env=env),
        cli("submit", *common, "--dry-run", "--json", env=env),
        cli("render", *common, "--set", "cluster.executor=slurm", env=env),
        cli(
            "render",
            *common,
            "--kind",
            "pytorchjob",
            "--set",
            "k8s.image=r/hpcqa:1",
            "--set",
            "k8s.memory=8Gi",
            "--set",
            'k8s.secret_env={HF_TOKEN = "hf/token"}',
            env=env,
        ),
        cli("submit", *common, env=env),
        cli("status", env=env),
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert sentinel not in r.stdout + r.stderr
    (job,) = job_dirs(tmp_path)
    reports = [json.loads((job / "ranks" / f"rank-{k}.json").read_text()) for k in (0, 1)]
    assert [rep["passed_env"] for rep in reports] == [{"HF_TOKEN": True}] * 2  # it arrived, by name
    assert (
        "secretKeyRef" in runs[3].stdout
        and "name: hf" in runs[3].stdout
        and "key: token" in runs[3].stdout
    )
    written = [
        p
        for root in (tmp_path, Path(cache_env["HPCQA_CACHE"]))
        for p in root.rglob("*")
        if p.is_file()
    ]
    assert len(written) > 10
    leaks = [str(p) for p in written if sentinel.encode() in p.read_bytes()]
    assert not leaks, leaks
    # only its owner can enter the job root; the registry is the owner's
    assert stat.S_IMODE(os.stat(tmp_path / "quickstart").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "reg.sqlite").st_mode) == 0o600


def test_group_readable_opens_the_job_root_to_the_group_only(tmp_path):
    from hpcqa.record.jobdir import JobRoot
    from hpcqa.record.registry import Registry

    JobRoot.of(str(tmp_path), "a").ensure(group_readable=True)
    JobRoot.of(str(tmp_path), "b").ensure()
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(tmp_path / "b").st_mode) == 0o700
    Registry(tmp_path / "g.sqlite", group_readable=True).add_many([])
    assert stat.S_IMODE(os.stat(tmp_path / "g.sqlite").st_mode) == 0o640
