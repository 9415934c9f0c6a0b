"""Sweeps, pure parts: expansion and validation, grouping into arrays, MaxArraySize, results tables."""

import json
import re
import time

import pytest

from hpcqa.core import command, config, plan, sweep, sweepcheck
from hpcqa.errors import ConfigError
from hpcqa.executors.slurm.cli import parse_max_array_size
from hpcqa.record import results
from tests.conftest import ROOT, SLURM_HERE, typed_view

HOST = plan.HostProbe(schedulers=SLURM_HERE, python="python3")


def raw(extra_sweep: dict, base="configs/quickstart.toml"):
    r = config.read_toml(ROOT / base)
    r["cluster"]["executor"] = "slurm"
    r["sweep"] = extra_sweep
    return r


def test_grid_then_explicit_variants():
    vs, par = sweep.expand(
        raw(
            {
                "parallelism": 2,
                "train": {"learning_rate": [3e-5, 5e-5], "seed": [1, 2, 3]},
                "variants": [{"train": {"learning_rate": 1e-3}, "cluster": {"nodes": 2}}],
            }
        )
    )
    assert par == 2 and len(vs) == 7
    assert [dict(v.params) for v in vs[:2]] == [
        {"train.learning_rate": 3e-5, "train.seed": 1},
        {"train.learning_rate": 3e-5, "train.seed": 2},
    ]
    assert vs[6].config.cluster.nodes == 2 and vs[6].config.train.learning_rate == 1e-3
    assert vs[6].config.train.seed == 42  # untouched keys keep the base value


def test_every_variant_is_validated_before_submission():
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw({"train": {"learning_rate": [3e-5, -1.0]}}))
    assert e.value.key == "train.learning_rate" and "sweep variant 1" in e.value.render()
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw({"train": {"learnig_rate": [1.0]}}))
    assert "did you mean 'learning_rate'" in e.value.render()


@pytest.mark.parametrize(
    "bad,key",
    [
        ({"parallelism": -1}, "sweep.parallelism"),
        ({"train": {"seed": 3}}, "sweep.train.seed"),
        ({"train": {"seed": []}}, "sweep.train.seed"),
        ({"variants": [1, 2]}, "sweep.variants"),
        ({"nosuch": {"x": [1]}}, "sweep.nosuch.x"),
    ],
)
def test_bad_sweep_tables(bad, key):
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw(bad))
    assert e.value.key == key


def test_one_array_for_uniform_resources_and_one_per_node_count():
    sp = sweep.build(
        raw(
            {
                "parallelism": 2,
                "train": {
                    "learning_rate": [1e-5, 2e-5, 3e-5],
                    "per_device_train_batch_size": [8, 16],
                },
            }
        ),
        "x",
        HOST,
        lambda p: (1001, "scontrol show config"),
    )
    assert len(sp.arrays) == 1 and sp.array_lines() == ["--array=0-5%2"]
    scaling = sweep.build(
        config.read_toml(ROOT / "configs/scaling_spr.toml"),
        "x",
        HOST,
        lambda p: (1001, "scontrol show config"),
    )
    assert [len(a.variants) for a in scaling.arrays] == [1, 1, 1]
    assert [p.nodes for p in scaling.plans] == [1, 2, 4]


def test_large_sweep_is_split_by_max_array_size_and_dry_run_is_fast():
    grid = {"train": {"seed": list(range(1000))}}
    t = time.perf_counter()
    sp = sweep.build(raw(grid), "x", HOST, lambda p: (300, "scontrol show config"))
    elapsed = time.perf_counter() - t
    assert [len(a.variants) for a in sp.arrays] == [300, 300, 300, 100]
    assert len(sp.arrays) == -(-1000 // 300) == 4
    assert sorted(v.index for a in sp.arrays for v in a.variants) == list(
        range(1000)
    )  # each exactly once
    assert sp.to_json()["arrays"][1]["after_previous"] is True
    assert elapsed < 30  # a sanity bound, not a benchmark: the dry run must not be pathological


@pytest.mark.process
def test_dry_run_json_lists_variants_and_arrays(cli):
    r = cli(
        "submit",
        "configs/sweep_quickstart.toml",
        "--dry-run",
        "--json",
        "--set",
        "cluster.executor=slurm",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["sweep"]["variants"]) == 5 and d["sweep"]["parallelism"] == 2
    assert d["sweep"]["arrays"][0]["sbatch_array"] == "--array=0-4%2"


def test_max_array_size_from_scontrol():
    assert (
        parse_max_array_size("ClusterName = x\nMaxArraySize            = 6\nMaxJobCount = 10000\n")
        == 6
    )
    assert parse_max_array_size("nothing") is None


def view(task, params, state, res=None):
    return typed_view(
        id=f"9_{task}",
        name="n",
        executor="slurm",
        state=state,
        nodes=params.get("cluster.nodes", 1),
        world_size=2,
        results=res,
        sweep_id="9",
        task_index=task,
        variant=params,
    )


def test_result_rows_sorted_best_marked_failed_kept():
    vs = [
        view(0, {"train.learning_rate": 1e-5}, "COMPLETED", {"f1": 60.0, "exact_match": 50.0}),
        view(1, {"train.learning_rate": 3e-5}, "FAILED"),
        view(2, {"train.learning_rate": 5e-5}, "COMPLETED", {"f1": 70.0, "exact_match": 65.0}),
    ]
    table = results.rows(vs, "f1")
    assert [r["task"] for r in table] == [2, 0, 1]
    assert [r["best"] for r in table] == [True, False, False]
    text = results.to_csv(table, ["train.learning_rate"], "f1")
    assert text.splitlines()[0].startswith("task,id,state,train.learning_rate,exact_match,f1")
    assert len(text.splitlines()) == 4 and ",FAILED," in text


def test_scaling_table():
    vs = [
        view(i, {"cluster.nodes": n}, "COMPLETED", {"train_samples_per_second": s})
        for i, (n, s) in enumerate([(1, 100.0), (2, 180.0), (4, 300.0)])
    ]
    sc = results.scaling(results.rows(vs, "f1"))
    assert [(r["nodes"], round(r["speedup"], 2), round(r["efficiency"], 2)) for r in sc] == [
        (1, 1.0, 1.0),
        (2, 1.8, 0.9),
        (4, 3.0, 0.75),
    ]


def test_plots_are_png(tmp_path, matplotlib_fonts):
    vs = [
        view(
            i,
            {"train.learning_rate": lr, "train.per_device_train_batch_size": bs},
            "COMPLETED",
            {"f1": f},
        )
        for i, (lr, bs, f) in enumerate(
            [(1e-5, 8, 50.0), (1e-4, 8, 60.0), (1e-5, 16, 55.0), (1e-4, 16, 65.0)]
        )
    ]
    p = tmp_path / "grid.png"
    results.plot(
        results.rows(vs, "f1"),
        ["train.learning_rate", "train.per_device_train_batch_size"],
        "f1",
        str(p),
    )
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sc = [
        view(i, {"cluster.nodes": n}, "COMPLETED", {"train_samples_per_second": s})
        for i, (n, s) in enumerate([(1, 10.0), (2, 19.0)])
    ]
    q = tmp_path / "scaling.png"
    results.plot(results.rows(sc, "f1"), ["cluster.nodes"], "f1", str(q))
    assert q.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_searchs_plot_keeps_pruned_trials_hollow_and_stars_the_best(matplotlib_fonts):
    """Each searched key's panel shows pruned trials as the history does (hollow), the best starred; the history's
    trial axis has whole numbers only (a blind re-test saw 0.5, 1.5)."""
    import matplotlib.pyplot as plt

    table = [
        {"trial": n, "state": st, "f1": f, "best": b, "params": {"train.learning_rate": lr}}
        for n, (st, f, b, lr) in enumerate(
            [
                ("COMPLETED", 30.0, False, 1e-4),
                ("PRUNED", 10.0, False, 2e-4),
                ("COMPLETED", 40.0, True, 3e-4),
            ]
        )
    ]
    fig = results._plot_trials(plt, table, ["train.learning_rate"], "f1")
    history, panel = fig.axes
    marks = {
        (tuple(ln.get_xdata()), ln.get_marker(), ln.get_markerfacecolor()) for ln in panel.lines
    }
    assert ((2e-4,), "o", "none") in marks and any(
        m[1] == "*" and m[0] == (3e-4,) for m in marks
    ), marks
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in history.get_xticks()), history.get_xticks()
    assert panel.get_xscale() == "linear"  # 1e-4 .. 3e-4: under 10x, and not said to be a log range
    plt.close(fig)
    fig = results._plot_trials(plt, table, ["train.learning_rate"], "f1", ["train.learning_rate"])
    assert fig.axes[1].get_xscale() == "log"  # searched with log = true: drawn so
    plt.close(fig)
    # the keys come from the study's mark, read back from a shared folder: any shape gives a list of names
    from hpcqa.record import study

    mark = {
        "space": [
            {"key": "train.learning_rate", "log": True},
            {"key": "x", "log": False},
            3,
            {"log": True},
        ]
    }
    assert study.log_keys(mark) == ["train.learning_rate"]
    assert study.log_keys(None) == study.log_keys({"space": "x"}) == study.log_keys([1]) == []


@pytest.mark.process
def test_wrapper_picks_the_array_tasks_plan(tmp_path, monkeypatch):
    import subprocess
    import sys

    from tests.test_rank import quick_plan

    (tmp_path / "task-0.json").write_text(quick_plan().dumps())
    (tmp_path / "task-3.json").write_text(quick_plan("launch.master_port=23001").dumps())
    env = {
        "SUBMITIT_LOCAL_GLOBALID": "0",
        "SUBMITIT_LOCAL_LOCALID": "0",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SLURM_ARRAY_TASK_ID": "3",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcqa.rank",
            "--plan",
            str(tmp_path / "task-{array_task_id}.json"),
            "--",
            sys.executable,
            "-c",
            "import os; print(os.environ['MASTER_PORT'], os.environ['HPCQA_PLAN_DIGEST'])",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["23001", quick_plan("launch.master_port=23001").digest]


def test_a_v2_sweep_shows_answerable_and_unanswerable_f1_and_each_model(tmp_path, monkeypatch):
    """hpcqa results of a SQuAD v2 sweep: the split by the official v2 script's names, each variant's job id and
    trained model, the best marked, every line within 80 columns."""
    import io

    from rich.console import Console

    from hpcqa.cli import jobs as jobsview

    v2 = {"HasAns_f1": 80.0, "NoAns_f1": 40.0, "HasAns_exact": 75.0, "NoAns_exact": 40.0}
    vs = [
        view(
            0, {"train.learning_rate": 1e-5}, "COMPLETED", {"f1": 60.0, "exact_match": 57.5, **v2}
        ),
        view(
            1, {"train.learning_rate": 3e-5}, "COMPLETED", {"f1": 70.0, "exact_match": 65.0, **v2}
        ),
    ]
    for v in vs:
        v.outputs = [("trained model", str(tmp_path / f"9_{v.task_index}-abc123" / "model"))]
    table = results.rows(vs, "f1")
    monkeypatch.chdir(tmp_path)  # asked from the output folder: the models' paths relative to it
    con = Console(file=io.StringIO(), width=80)
    con.print(jobsview._variants_table("9", "f1", table, ["train.learning_rate"]))
    for line in jobsview._model_lines(table):
        con.print(line, highlight=False, markup=False, soft_wrap=True)
    text = con.file.getvalue()
    assert "F1 has" in text and "F1 no" in text and "COMPLETED" in text, text
    assert re.search(r"\*9_1\s+3e-05\s+COMPLETED\s+65\.0\s+70\.0\s+80\.0\s+40\.0", text), text
    assert max(len(x) for x in text.splitlines()) <= 80, text
    assert re.search(r"best\s+job 9_1\s+9_1-abc123/model$", text, re.M), text
    assert re.search(r"^\s+job 9_0\s+9_0-abc123/model$", text, re.M), text
    assert "HasAns_f1" in results.to_csv(table, ["train.learning_rate"], "f1").splitlines()[0]


def test_a_search_table_on_80_columns_shows_every_searched_value_and_numbers_a_running_trial():
    """Rich squeezes a folding column to nothing when the unwrapped ones fill the width: a search's table (trial,
    steps, node-h besides) lost its searched values on 80 columns. They stay; samp/s, wall s, EM give way, said."""
    import io

    from rich.console import Console

    from hpcqa.cli import jobs as jobsview

    keys = ["train.learning_rate", "train.num_train_epochs", "train.warmup_ratio"]

    def trial(n, lr, state, f1=None):
        params = dict(zip(keys, (lr, 2.0, 0.1)))
        res = {
            "f1": f1,
            "exact_match": f1,
            "train_samples_per_second": 22.4,
            "wall_time_s": 82.0,
            "trial": {"number": n, "state": "COMPLETED", "metric": "f1", "value": f1},
        }
        return view(n, params, state, res if f1 is not None else None)

    table = results.rows([trial(0, 1.5e-4, "COMPLETED", 47.7), trial(7, 4e-4, "RUNNING")], "f1")
    assert [r["trial"] for r in table] == [0, 7]  # the running one by its task index: its number
    for width, left_out in ((80, "samp/s, wall s, EM left out at 80"), (160, None)):
        con = Console(file=io.StringIO(), width=width)
        con.print(jobsview._fitted_table(con, "9", "f1", table, keys))
        text = con.file.getvalue()
        assert max(len(x) for x in text.splitlines()) <= width, text
        assert re.search(r"\*9_0\s+0\s+0\.00015\s+2\s+0\.1\s+COMPLETED", text), text
        assert re.search(r"9_7\s+7\s+0\.0004\s+2\s+0\.1\s+RUNNING", text), text
        assert "node-h" in text and (left_out in text if left_out else "left out" not in text), text
        assert "search 9: 2 trials, sorted by f1" in " ".join(text.split()), text
    # trial 7 cancelled, then run again (another task of the sweep, the same trial): two runs, one trial
    again = trial(7, 4e-4, "COMPLETED", 30.0)
    again.task_index, again.id = 8, "9_8"
    table = results.rows(
        [trial(0, 1.5e-4, "COMPLETED", 47.7), trial(7, 4e-4, "CANCELLED"), again], "f1"
    )
    con = Console(file=io.StringIO(), width=160)
    con.print(jobsview._fitted_table(con, "9", "f1", table, keys))
    assert "search 9: 2 trials (3 runs)" in con.file.getvalue(), con.file.getvalue()


# ---------------------------------------------------------------- what a sweep may not do (issue 72)


@pytest.mark.parametrize(
    "table,key,said",
    [
        ({"train": {"learning_rate": [3e-5, 3e-5]}}, "sweep.train.learning_rate", "(entry 1)"),
        ({"train": {"learning_rate": [3e-5, 0.00003]}}, "sweep.train.learning_rate", "(entry 1)"),
        (
            {"train": {"num_train_epochs": [2, 2.0]}},
            "sweep.train.num_train_epochs",
            "2.0 (entry 1)",
        ),
        (  # on the second axis: variants 0 and 2 (seed 1, then 1 again)
            {"train": {"learning_rate": [1e-5, 2e-5], "seed": [1, 2, 1]}},
            "sweep.train.seed",
            "1 (entry 0) and 1 (entry 2) are equal as train.seed, so variants 0 and 2",
        ),
        (
            {
                "variants": [
                    {"train": {"learning_rate": 1e-4}},
                    {"train": {"learning_rate": 0.0001}},
                ]
            },
            "sweep.variants[1]",
            "the same run as [[sweep.variants]] entry 0",
        ),
        (
            {
                "train": {"learning_rate": [1e-5, 2e-5]},
                "variants": [{"train": {"learning_rate": 2e-5}}],
            },
            "sweep.variants[0]",
            "the same run as the grid's variant 1",
        ),
        (  # an empty variant is the base config: quickstart's learning rate is 1e-4
            {"train": {"learning_rate": [1e-4, 2e-4]}, "variants": [{}]},
            "sweep.variants[0]",
            "sets nothing (the base config): the same run as the grid's variant 0",
        ),
    ],
)
def test_a_run_listed_twice_is_refused_naming_its_key(table, key, said):
    """Two variants equal as the config holds them (3e-5 and 0.00003, 2 and 2.0) were queued twice, silently.
    Refused, not merged (task indices and array sizes stay what the sweep lists), naming the key and the values."""
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw(table))
    assert e.value.key == key and said in e.value.message, e.value.render()
    assert "queued twice" in e.value.message and "remove the duplicate" in e.value.hint


def test_values_that_only_look_alike_are_not_a_repeat():
    vs, _ = sweep.expand(
        raw(
            {
                "train": {"learning_rate": [3e-5, 3e-6], "seed": [1, 2]},
                "variants": [
                    {"train": {"learning_rate": 3e-5, "num_train_epochs": 3.0}},
                    {"train": {"learning_rate": 3e-5, "seed": 3}},
                ],
            }
        )
    )
    assert len(vs) == 6


@pytest.mark.parametrize(
    "key,values",
    [
        ("cluster.executor", ["local", "slurm"]),
        ("launch.launcher", ["srun", "mpirun"]),
        ("job.name", ["a", "b"]),
        ("job.output_dir", ["/tmp/a", "/tmp/b"]),
        ("job.registry", ["/tmp/a.sqlite", "/tmp/b.sqlite"]),
        ("job.group_readable", [False, True]),
        ("job.workdir", ["/tmp", "/"]),
    ],
)
def test_what_every_task_shares_is_no_sweep_axis(key, values):
    """The executor, the job root, the registry and the program's copy are the first variant's for the whole sweep
    (one executor submits it, into one folder and one registry): an axis over them is refused naming sweep.<key>
    and why -- as a grid axis, and set by a listed variant."""
    section, name = key.split(".")
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw({section: {name: values}}))
    assert e.value.key == f"sweep.{key}" and f"{key} cannot vary in a sweep: " in e.value.message
    assert e.value.detail == f"{key} cannot vary in a sweep: {sweepcheck.SHARED[key]}"
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw({"train": {"seed": [1, 2]}, "variants": [{section: {name: values[1]}}]}))
    assert e.value.key == f"sweep.{key}"


def test_a_shared_key_may_not_vary_through_a_table_or_what_it_derives_from():
    """A [job] table swept whole, or job.command swept where job.name follows the program (a.py -> a, b.py -> b):
    the tasks would write into two job roots, the array's logs and pickles in the first. Refused naming the swept
    key; the same sweep with one job.name passes."""
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw({"job": [{"name": "a"}, {"name": "b"}]}))
    assert e.value.key == "sweep.job" and "differ in job.name ('a', 'b')" in e.value.message
    r = raw({"job": {"command": [["python", "a.py"], ["python", "b.py"]]}})
    del r["job"]["name"]
    with pytest.raises(ConfigError) as e:
        sweep.expand(r)
    assert e.value.key == "sweep.job.command" and "job.name ('a', 'b')" in e.value.message
    r["job"]["name"] = "mine"
    assert [v.config.job.name for v in sweep.expand(r)[0]] == ["mine", "mine"]


def test_the_interpreter_and_the_requeue_signal_split_arrays():
    """An array's script names one interpreter and sends one --signal: variants that differ in them go to arrays of
    their own (they went into one array, every task run by the first's python and sent the first's signal)."""
    sp = sweep.build(
        raw(
            {
                "launch": {"requeue_signal": ["USR1", "USR2"]},
                "cluster": {"python": ["/opt/a/bin/python", "/opt/b/bin/python"]},
                "train": {"seed": [1, 2]},
            }
        ),
        "x",
        HOST,
        lambda p: (1001, "scontrol show config"),
    )
    assert [len(a.variants) for a in sp.arrays] == [2, 2, 2, 2]
    for a in sp.arrays:
        plans = sp.plans_of(a)
        assert len({(p.python, p.config.launch.requeue_signal) for p in plans}) == 1


def test_two_keys_that_make_one_variable_are_refused_naming_both():
    """Each swept key reaches a user command as HPCQA_SWEEP_<KEY>: launch.env.x and launch.env.X make one name,
    and the program would see one of the two values. Refused naming both keys; x and Y pass."""
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw({"launch": {"env": {"x": ["1", "2"], "X": ["3", "4"]}}}))
    said = e.value.message
    assert "sweep.launch.env.x" in said and "sweep.launch.env.X" in said, said
    assert "HPCQA_SWEEP_LAUNCH_ENV_X" in said and e.value.key in (
        "sweep.launch.env.x",
        "sweep.launch.env.X",
    )
    with pytest.raises(ConfigError) as e:  # one on the grid, one in a listed variant
        sweep.expand(
            raw(
                {
                    "launch": {"env": {"x": ["1", "2"]}},
                    "variants": [{"launch": {"env": {"X": "3"}}}],
                }
            )
        )
    assert e.value.key == "sweep.launch.env.X"
    vs, _ = sweep.expand(raw({"launch": {"env": {"x": ["1", "2"], "Y": ["3", "4"]}}}))
    assert {command.sweep_variable(k) for k in vs[0].params} == {
        "HPCQA_SWEEP_LAUNCH_ENV_X",
        "HPCQA_SWEEP_LAUNCH_ENV_Y",
    }


def test_a_key_given_twice_in_one_sweep_table_is_refused():
    """TOML holds both a quoted "train.seed" and train.seed; one replaced the other, silently."""
    with pytest.raises(ConfigError) as e:
        sweep.expand(raw({"train.seed": [1, 2], "train": {"seed": [3, 4]}}))
    assert e.value.key == "sweep.train.seed" and "given twice" in e.value.message


def sweep_file(tmp_path, text: str, base="configs/quickstart.toml"):
    path = tmp_path / "sweep.toml"
    path.write_text((ROOT / base).read_text() + "\n[sweep]\n" + text + "\n")
    return path


@pytest.mark.process
@pytest.mark.parametrize(
    "text,key",
    [
        ("train.learning_rate = [3e-5, 0.00003]", "sweep.train.learning_rate"),
        ('cluster.executor = ["local", "slurm"]', "sweep.cluster.executor"),
        ('launch.env.x = ["1", "2"]\nlaunch.env.X = ["3", "4"]', "sweep.launch.env.X"),
    ],
)
def test_the_sweep_refusals_are_one_line_before_anything_is_written(cli, tmp_path, text, key):
    """Through the real command, as a user meets them: validate and submit --dry-run exit 2, one error line naming
    the sweep key and a fix line, no traceback, nothing written."""
    path, out = sweep_file(tmp_path, text), tmp_path / "out"
    for verb in (("validate",), ("submit", "--dry-run")):
        r = cli(*verb, str(path), "--set", f"job.output_dir={json.dumps(str(out))}")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines[0].startswith(f"error: {path}: {key}: ") and len(lines) == 2, r.stderr
        assert lines[1].startswith("  fix: "), r.stderr
    assert not out.exists()


@pytest.mark.process
def test_a_sweep_next_to_the_refused_ones_passes_and_checks_every_variants_pass_env(cli, tmp_path):
    """The neighbours of the refused sweeps: distinct values, another variable name, the requeue signal swept (two
    arrays) -- a dry run that shows them. A variable only the second variant passes by name is checked too (the
    check read the first variant's launch.pass_env only)."""
    text = (
        'train.learning_rate = [3e-5, 3e-6]\nlaunch.env.x = ["1", "2"]\n'
        'launch.requeue_signal = ["USR1", "USR2"]\n'
        '[[sweep.variants]]\nlaunch.pass_env = ["ISSUE72_NOT_SET_HERE"]'
    )
    path = sweep_file(tmp_path, text)
    args = ("--set", f"job.output_dir={json.dumps(str(tmp_path / 'out'))}")
    r = cli("submit", str(path), "--dry-run", "--json", "--set", "cluster.executor=slurm", *args)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["sweep"]["variants"]) == 9  # the listed variant keeps the base's USR2
    assert [a["variants"] for a in d["sweep"]["arrays"]] == [[0, 2, 4, 6], [1, 3, 5, 7, 8]]
    assert "ISSUE72_NOT_SET_HERE" in d["would_refuse"]["error"], d["would_refuse"]
    r = cli("validate", str(path), *args)
    assert r.returncode == 0 and "9 variants" in r.stdout, r.stderr
