"""Searches run for real on the local executor: Optuna proposes, real trials train and evaluate, the median pruner
stops one that falls behind at a real evaluation, status/results/--json say PRUNED, a cancel stops the search and
submitting again goes on with the same study."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, cli_env, run_cli

pytestmark = pytest.mark.slow

# random, seed 10, batches of one: the trials draw 1e-3, 1e-3, 1e-12 (study.sampler seeds each batch with the seed
# plus the trials asked) -- the third cannot learn, and falls behind the two before it at its first evaluation
CONFIG = """
[job]
name = "search"
output_dir = "{out}"
[cluster]
executor = "local"
sockets_per_node = 1
cores_per_socket = 2
[launch]
ccl_workers = 0
ranks_per_socket = 2
[model]
name_or_path = "builtin:tiny-bert"
[data]
dataset = "builtin:synthetic-squad"
synthetic_train_examples = 240
synthetic_eval_examples = 30
[train]
bf16 = false
num_train_epochs = 1.0
per_device_train_batch_size = 8
max_seq_length = 128
doc_stride = 32
eval_strategy = "steps"
eval_steps = 3
save_steps = 3
[sweep]
strategy = "random"
trials = 3
parallelism = 1
seed = 3
pruner = "median"
train.learning_rate = [1e-3, 2e-3, 1.5e-3, 1e-12]  # distinct points: a repeat is not run
"""


@pytest.fixture
def search(tmp_path):
    cfg = tmp_path / "search.toml"
    cfg.write_text(CONFIG.format(out=tmp_path / "out"))
    env = {
        "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite"),
        "HPCQA_CACHE": str(tmp_path / "cache"),
        "COLUMNS": "200",
    }
    return cfg, env


def sweep_id(text: str) -> str:
    return re.search(r"hpcqa results (local-\d+)", text).group(1)


def test_a_search_prunes_a_trial_for_real_and_goes_on_when_submitted_again(search, tmp_path):
    cfg, env = search
    dry = run_cli("submit", str(cfg), "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    predicted = [v["params"] for v in json.loads(dry.stdout)["sweep"]["variants"]]
    assert (
        predicted == [{"train.learning_rate": 2e-3}]
        and not (tmp_path / "out" / "search" / "search").exists()
    )
    run = run_cli("submit", str(cfg), env=env, timeout=900)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-3000:]
    assert "search search: 3 trials, random, batches of 1, pruner median" in said
    assert "trial 2: PRUNED at step 3" in said and "2 complete, 1 pruned; best f1" in said, said
    sid = sweep_id(said)
    res = json.loads(run_cli("results", sid, "--json", env=env).stdout)
    by_trial = {v["trial"]: v for v in res["variants"]}
    assert [by_trial[n]["params"]["train.learning_rate"] for n in range(3)] == [2e-3, 1.5e-3, 1e-12]
    pruned, full = by_trial[2], by_trial[0]
    assert (
        pruned["state"] == "PRUNED" and not pruned["best"] and pruned["steps"] == 3 < full["steps"]
    )
    assert full["state"] == "COMPLETED" and pruned["model"]  # a pruned trial keeps its model
    assert all(v["node_hours"] > 0 for v in res["variants"])
    # the study itself: Optuna's own record of the pruner's decision and of every report
    st = res["study"]
    assert [t["state"] for t in st["trials"]] == ["COMPLETE", "COMPLETE", "PRUNED"] and st[
        "best_trial"
    ] in (0, 1)
    assert list(st["trials"][2]["reports"]) == ["3"] and len(st["trials"][0]["reports"]) >= 4
    status = run_cli("status", sid, env=env)
    assert "2 COMPLETED, 1 PRUNED" in status.stdout and re.search(
        r"trial 2\s+PRUNED", status.stdout
    ), status.stdout
    table = run_cli("results", sid, env=env).stdout
    assert "search " + sid in table and re.search(r"\s2\s+1e-12\s+PRUNED", table), table
    # submitted again: nothing left to ask, said (not an error: exit 0, as the dry run)
    for dry in ((), ("--dry-run",)):
        again = run_cli("submit", str(cfg), *dry, env=env)
        said = " ".join(again.stderr.split())
        assert again.returncode == 0 and "Traceback" not in said, said
        assert "has asked all its 3 trials" in said and "nothing to run" in said, said
        assert "to go on: raise sweep.trials" in said and not again.stdout, again.stdout
    # with what its trials trained on changed: refused naming the key, before anything runs
    moved = run_cli(
        "submit", str(cfg), "--set", "sweep.trials=4", "--set", "train.max_steps=99", env=env
    )
    text = " ".join(moved.stderr.split())
    assert moved.returncode == 2 and "Traceback" not in text, text
    assert re.search(
        r"train\.max_steps: the search '\S+' ran its 3 trials with train\.max_steps = (-?\d+), this config "
        r"says 99: .* fix: set train\.max_steps = \1 again to go on, or set another job\.name",
        text,
    ), text
    assert len(json.loads(run_cli("results", sid, "--json", env=env).stdout)["variants"]) == 3
    # one more trial: the same study goes on
    more = run_cli("submit", str(cfg), "--set", "sweep.trials=4", env=env, timeout=900)
    said = more.stdout + more.stderr
    assert more.returncode == 0 and "resuming its study, 3 of 4 trials asked" in said, said[-3000:]
    assert (
        re.search(r"trial 3: (COMPLETE|PRUNED)", said) and "trial 0 {" not in said
    )  # only the new one ran
    assert sweep_id(said) == sid  # ... under the same sweep
    assert len(json.loads(run_cli("results", sid, "--json", env=env).stdout)["variants"]) == 4


@pytest.mark.parametrize("how", ["hpcqa cancel", "ctrl-c"])
def test_a_stop_ends_the_search_and_submitting_again_runs_that_trial_again(search, tmp_path, how):
    """hpcqa cancel SWEEP, or Ctrl-C as a terminal sends it (SIGINT to the whole foreground process group: the
    submit and every rank): the search stops, its running trial stays RUNNING in the study, a second submit while
    the first runs is refused, and submitting again after it runs that trial again, then goes on."""
    cfg, env = search
    again_args = ["submit", str(cfg), "--set", "sweep.trials=2", "--set", 'sweep.pruner="none"']
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcqa", *again_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(env),
        cwd=ROOT,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        deadline, sid = time.time() + 300, None
        while time.time() < deadline and sid is None:
            st = run_cli("status", env=env)
            m = re.search(r"(local-\d+)", st.stdout)
            sid = m.group(1) if m and "RUNNING" in st.stdout else None
            time.sleep(1)
        assert sid, st.stdout
        twice = run_cli(*again_args, env=env)
        assert twice.returncode == 2 and "is running: `hpcqa submit` process" in twice.stderr, (
            twice.stderr
        )
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            assert run_cli("cancel", sid, env=env).returncode == 0
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
    assert "trial 0: " not in out and "trial 1" not in out, out  # trial 0 was not told FAIL
    assert "submit the config again to go on" in " ".join(out.split()), (
        out
    )  # and how it goes on is said
    first = re.search(r"trial 0 (\{.*?\}) -> local job", out).group(1)
    again = run_cli(*again_args, env=env, timeout=900)
    said = again.stdout + again.stderr
    assert again.returncode == 0 and "resuming its study, 1 of 2 trials asked" in said, said[-3000:]
    assert (
        f"trial 0 {first} -> local job" in said
        and "trial 0: COMPLETE" in said
        and "trial 1: COMPLETE" in said
    )


def test_bad_searches_are_refused_before_anything_runs(search, tmp_path):
    cfg, env = search
    for sets, key in (
        (["sweep.train.learning_rate={low = 1e-3, high = 1e-5}"], "sweep.train.learning_rate"),
        (['sweep.strategy="bayes"'], "sweep.strategy"),
        (['sweep.pruner="hyperband"'], "sweep.pruner"),
        (['sweep.storage="postgresql://nobody@127.0.0.1:1/none"'], "sweep.storage"),
        (['train.eval_strategy="no"'], "sweep.pruner"),
    ):
        args = [a for s in sets for a in ("--set", s)]
        got = run_cli("submit", str(cfg), *args, env=env)
        err = got.stderr.strip().splitlines()
        assert got.returncode == 2 and key in err[0] and "Traceback" not in got.stderr, got.stderr
    assert (
        not (tmp_path / "reg.sqlite").exists()
        and not (tmp_path / "out" / "search" / "search").exists()
    )


def test_without_optuna_the_message_names_the_extra(search, tmp_path):
    cfg, env = search
    fake = tmp_path / "no-optuna" / "optuna"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named optuna')\n")
    got = run_cli("submit", str(cfg), "--dry-run", env={**env, "PYTHONPATH": str(fake.parent)})
    assert (
        got.returncode == 2
        and "pip install 'hpcqa[search]'" in got.stderr
        and "Traceback" not in got.stderr
    )
