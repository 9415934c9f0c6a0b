"""Golden files for rendered scripts, and hostile config text executed through them.

Regenerate the golden files after an intended change:  HPCQA_REGEN_GOLDEN=1 pytest tests/test_render.py
"""

import json
import os
import re
import shlex
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from hpcqa.core import config, plan, sweep
from hpcqa.core.kinds import Requeue
from hpcqa.errors import ConfigError
from hpcqa.executors import common, render, table
from tests.conftest import ROOT, SLURM_HERE

GOLDEN = ROOT / "tests" / "golden"
HOST = plan.HostProbe(
    schedulers=SLURM_HERE,
    ccl_bindings=False,
    libraries={"tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"},
    python="python3",
)


def rendered(launcher, *overrides):
    cfg = config.load(
        "configs/squad_spr.toml" if Path("configs").exists() else ROOT / "configs/squad_spr.toml",
        list(overrides),
    )
    return render.standalone(plan.build_plan(cfg, HOST, launcher=launcher), launcher)


@pytest.mark.parametrize(
    "launcher,overrides",
    [
        ("srun", []),
        ("mpirun", ["cluster.threads_per_core=2", "launch.ccl_workers=4", "train.ddp_backend=ccl"]),
    ],
)
def test_golden(launcher, overrides, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = rendered(launcher, *overrides)
    path = GOLDEN / f"squad_spr.{launcher}.sbatch"
    if os.environ.get("HPCQA_REGEN_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), (
        f"rendered script changed; if intended: HPCQA_REGEN_GOLDEN=1 pytest {__file__}"
    )


def test_mpirun_script_follows_the_seed_recipe_but_leaves_pinning_to_the_wrapper(monkeypatch):
    monkeypatch.chdir(ROOT)
    text = rendered(
        "mpirun", "cluster.threads_per_core=2", "launch.ccl_workers=4", "train.ddp_backend=ccl"
    )
    assert 'mpirun -f "$hostfile" -n 8 -ppn 2' in text
    # hydra pins to an explicit I_MPI_PIN_DOMAIN even with I_MPI_PIN=0: the domain stays in the plan (each
    # rank's environment), not on mpirun's command line
    assert "-genv I_MPI_PIN 0" in text and "-genv I_MPI_PIN_DOMAIN" not in text
    assert '"I_MPI_PIN_DOMAIN": "[0xfffffffffffff0,0xfffffffffffff000000000000000]"' in text
    assert "-genv OMP_NUM_THREADS 52" in text
    assert "-genv CCL_WORKER_AFFINITY 0,1,2,3,56,57,58,59" in text


def test_scripts_are_valid_bash(monkeypatch):
    monkeypatch.chdir(ROOT)
    for launcher in ("srun", "mpirun"):
        r = subprocess.run(["bash", "-n"], input=rendered(launcher), text=True, capture_output=True)
        assert r.returncode == 0, r.stderr


HOSTILE = [
    "it's",
    'say "hi"',
    "$(touch PWNED)",
    "`touch PWNED`",
    "x'; touch PWNED; echo '",
    "HPCQA_PLAN_EOF",
    "$HOME ${PATH} \\ ; | & > < * ? ~ # !",
]


def _fake_bin(tmp_path: Path) -> Path:
    """srun / mpirun / python3 stand-ins that record their argv: the script's own logic runs for real."""
    b = tmp_path / "bin"
    b.mkdir()
    for name in ("srun", "mpirun"):
        (b / name).write_text(
            '#!/bin/bash\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$FAKE_LOG"\n'
        )
    # `python3 -m hpcqa hosts` must work: use the real interpreter for that call only
    (b / "python3").write_text(
        f'#!/bin/bash\nexec {shlex.quote(__import__("sys").executable)} "$@"\n'
    )
    for f in b.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return b


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_hostile_text_survives_the_script(tmp_path, text, launcher):
    work = tmp_path / "work"
    work.mkdir()
    # a path holding a $VARIABLE is refused at the config (no shell expands it, docs/configuration.md): the paths
    # get the text with each variable's $ followed by "-" ($- is still shell syntax, quoted or it would expand)
    path_text = re.sub(r"\$(?=[A-Za-z_{])", "$-", text)
    if path_text != text:
        with pytest.raises(ConfigError, match="VARIABLE"):
            config.load(
                ROOT / "configs/squad_spr.toml", [f"job.output_dir={json.dumps(str(work / text))}"]
            )
    cfg = config.load(
        ROOT / "configs/squad_spr.toml",
        [
            f"job.output_dir={json.dumps(str(work / path_text))}",
            f"model.name_or_path={json.dumps(path_text)}",
            f"launch.env.HOSTILE={json.dumps(text)}",
        ],
    )
    script = render.standalone(plan.build_plan(cfg, HOST, launcher=launcher), launcher)
    (tmp_path / "job.sbatch").write_text(script)
    log = tmp_path / "argv"
    env = {
        "PATH": f"{_fake_bin(tmp_path)}:/usr/bin:/bin",
        "SLURM_JOB_ID": "31",
        "FAKE_LOG": str(log),
        "SLURM_JOB_NODELIST": "cn[1-4]",
        "PYTHONPATH": str(ROOT),
    }
    r = subprocess.run(
        ["bash", str(tmp_path / "job.sbatch")], cwd=work, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.rglob("PWNED")), "config text was executed"
    job_dir = work / path_text / "squad-spr" / "slurm-31"
    written = json.loads((job_dir / "plan.json").read_text())
    assert written["config"]["model"]["name_or_path"] == path_text
    assert written["local_ranks"][0]["env"]["HOSTILE"] == text
    argv = log.read_text().split("\0")[:-1]
    assert str(job_dir / "plan.json") in argv
    if launcher == "mpirun":
        assert (job_dir / "hostfile").read_text().split() == ["cn1", "cn2", "cn3", "cn4"]
        assert argv[argv.index("MASTER_ADDR") + 1] == "cn1"


@pytest.mark.parametrize(
    "key", ["job.name", "cluster.partition", "cluster.account", "cluster.qos", "cluster.constraint"]
)
@pytest.mark.parametrize("text", ["a b", "a'b", "a\nb", "$(x)", 'a"b'])
def test_sbatch_line_values_are_restricted(key, text):
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/squad_spr.toml", [f"{key}={json.dumps(text)}"])
    assert e.value.key == key


def sbatch_preview(sp):
    """The batch scripts of the request the table's executor would submit."""
    return list(table.for_sweep(sp).dry_run(sp).scripts)


def test_sbatch_preview_is_the_submission_with_the_real_plan_path(tmp_path):
    out = tmp_path / "it's"
    cfg = config.load(ROOT / "configs/squad_spr.toml", [f"job.output_dir={json.dumps(str(out))}"])
    lp = plan.build_plan(cfg, HOST)
    request = table.for_sweep(sweep.single(lp)).dry_run(sweep.single(lp))
    (text,) = request.scripts
    assert (
        "#SBATCH --nodes=4" in text
        and "#SBATCH --ntasks-per-node=2" in text
        and "--array" not in text
    )
    assert "--cpus-per-task=112" in text.split("srun", 1)[1]
    (handed,) = (
        request.sweep.plans
    )  # the plan as this executor hands it on: submitit requeues its ranks
    assert (
        handed.requeue is Requeue.SUBMITIT
        and lp.requeue is Requeue.NONE
        and handed.config == lp.config
    )
    (path,) = common.plan_paths([handed])
    assert path.name == "task-0.json" and path.parent.name == handed.digest
    folder = shlex.quote(str(out / "squad-spr" / f"%j-{request.submission}"))
    assert (
        f"-m hpcqa.rank --plan {shlex.quote(str(path))} --job-dir {folder} -- python3 -u -m submitit.core._submit"
        in text
    )
    assert not out.exists()  # a dry run writes nothing


def test_sbatch_preview_of_a_sweep_is_an_array_reading_its_task_plans():
    raw = config.read_toml(ROOT / "configs/sweep_quickstart.toml")
    raw["cluster"]["executor"] = "slurm"
    sp = sweep.build(raw, "x", HOST, lambda p: (1001, "scontrol show config"))
    (text,) = sbatch_preview(sp)
    assert "#SBATCH --array=0-4%2" in text and "task-{array_task_id}.json" in text


SETUP_TEXTS = [t for t in HOSTILE if "\n" not in t]


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_setup_lines_run_first_as_written_and_nothing_else(tmp_path, launcher):
    """cluster.setup entries are commands: each runs exactly as written, before the ranks, in order; the
    text inside them (quoted by the user as in any shell line) stays text; no entry can add a line."""
    work = tmp_path / "work"
    work.mkdir()
    setup = [f"printf '%s\\n' {shlex.quote(t)} >> setup.log" for t in SETUP_TEXTS]
    setup += [
        'export SETUP_MARK="$UNSET_IN_ACTIVATE_SCRIPTS"ok',
        ": HPCQA_PLAN_EOF @@PLAN@@ @@SBATCH@@",
        "printenv SETUP_MARK >> setup.log",
    ]
    cfg = config.load(
        ROOT / "configs/squad_spr.toml",
        [f"job.output_dir={json.dumps(str(work))}", f"cluster.setup={json.dumps(setup)}"],
    )
    lp = plan.build_plan(cfg, HOST, launcher=launcher)
    (tmp_path / "job.sbatch").write_text(render.standalone(lp, launcher))
    log = tmp_path / "argv"
    env = {
        "PATH": f"{_fake_bin(tmp_path)}:/usr/bin:/bin",
        "SLURM_JOB_ID": "31",
        "FAKE_LOG": str(log),
        "SLURM_JOB_NODELIST": "cn[1-4]",
        "PYTHONPATH": str(ROOT),
    }
    r = subprocess.run(
        ["bash", str(tmp_path / "job.sbatch")], cwd=work, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert (work / "setup.log").read_text().splitlines() == SETUP_TEXTS + ["ok"]
    assert not list(tmp_path.rglob("PWNED")) and log.exists()  # the launcher ran after the setup
    # the submitit path carries the same lines in its sbatch script, and the dry run shows them
    (text,) = sbatch_preview(sweep.single(plan.build_plan(cfg, HOST)))
    body = text.splitlines()
    assert (
        all(line in body for line in setup)
        and body.index(setup[-1]) < [i for i, x in enumerate(body) if x.startswith("srun")][0]
    )


@pytest.mark.parametrize("entry", ["module load x\ntouch PWNED", "a\rb", "   ", ""])
def test_setup_entries_must_be_one_line(entry):
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/squad_spr.toml", [f"cluster.setup={json.dumps([entry])}"])
    assert e.value.key == "cluster.setup[0]"


def test_cluster_python_is_the_ranks_interpreter_quoted(tmp_path):
    py = "/opt/my env/bin/python3 it's"
    cfg = config.load(ROOT / "configs/squad_spr.toml", [f"cluster.python={json.dumps(py)}"])
    lp = plan.build_plan(cfg, HOST)
    assert lp.python == py
    (text,) = sbatch_preview(sweep.single(lp))
    assert f"{shlex.quote(py)} -m hpcqa.rank" in text
    script = render.standalone(lp, "srun")
    assert f"{shlex.quote(py)} -m hpcqa.rank" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_plain_machine_script_and_its_errors(tmp_path):
    from hpcqa.executors.slurm.cli import parse_sbatch_parsable
    from tests.conftest import run_cli

    q = ["--set", "cluster.executor=slurm", "--set", "cluster.nodes=2"]
    out = tmp_path / "run.sh"
    r = run_cli(
        "render",
        "configs/quickstart.toml",
        *q,
        "--launcher",
        "mpirun",
        "--hosts",
        "n[1-2]",
        "-o",
        str(out),
    )
    assert r.returncode == 0 and "run it on n1" in r.stderr, r.stderr
    text = out.read_text()
    assert "#SBATCH" not in text and "printf '%s\\n' n1 n2 >" in text
    assert not [line for line in text.splitlines() if line.lstrip().startswith("srun")]
    assert "I_MPI_HYDRA_BOOTSTRAP=ssh" in text and "-genv I_MPI_PIN 0" in text
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0
    hf = tmp_path / "hosts"
    hf.write_text("# the nodes\nn7:2\nn9 slots=2\n")
    r = run_cli(
        "render", "configs/quickstart.toml", *q, "--launcher", "mpirun", "--hostfile", str(hf)
    )
    assert r.returncode == 0 and "printf '%s\\n' n7 n9 >" in r.stdout
    for bad, words in (
        (["--launcher", "mpirun", "--hosts", "n[1-3]"], "cluster.nodes = 2"),
        (["--hosts", "n[1-2]", "--launcher", "srun"], "--launcher mpirun"),
        (["--launcher", "mpirun", "--hosts", "n1,n1"], "distinct"),
        (["--launcher", "mpirun", "--hosts", "n[1-2]", "--submit"], "plain machines"),
    ):
        r = run_cli("render", "configs/quickstart.toml", *q, *bad)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert parse_sbatch_parsable("42\n") == ("42", None) and parse_sbatch_parsable("7;hq\n") == (
        "7",
        "hq",
    )
    with pytest.raises(ValueError):
        parse_sbatch_parsable("sbatch: error: invalid partition")


def test_a_local_config_renders_for_several_nodes(cli):
    """executor = "local" can't run 2 nodes, but a rendered script is not run by it."""
    r = cli("render", "configs/quickstart.toml", "--set", "cluster.nodes=2")
    assert r.returncode == 0 and "#SBATCH --nodes=2" in r.stdout, r.stderr
    bad = cli("submit", "configs/quickstart.toml", "--set", "cluster.nodes=2", "--dry-run")
    assert bad.returncode == 2 and "cluster.nodes" in bad.stderr


@pytest.mark.parametrize("key", sorted(table.EXECUTORS), ids=lambda k: "-".join(k))
def test_every_executor_hands_its_ranks_a_plan_that_says_who_requeues(key, monkeypatch):
    """Who brings a stopped rank back is the plan's `requeue`, stamped by the executor that makes the request: the
    plan the ranks read (a plan file, or the plan inside a script or a Kubernetes job) says it, and nothing else does."""
    monkeypatch.chdir(ROOT)
    kind, launcher, mode = key
    cfg = config.load(
        "configs/squad_spr.toml",
        ["cluster.nodes=1", "cluster.executor=local"] if kind == table.LOCAL else [],
    )
    if mode == table.SUBMIT:
        lp = plan.build_plan(
            cfg,
            replace(HOST, schedulers=SLURM_HERE if kind == table.SLURM else frozenset()),
            launcher=launcher,
        )
        ex = table.choose(lp, mode, snapshot=False)
    else:
        hosts = ("n1", "n2", "n3", "n4") if mode == table.HOSTS else ()
        k8s_target = {t: name for name, t in table.RENDER_K8S.items()}.get(launcher)
        ex, lp = table.render(
            cfg,
            HOST,
            k8s_target if kind == table.K8S else table.RENDER_SCRIPT,
            None if kind == table.K8S else launcher,
            hosts,
        )
    assert (lp.executor, lp.launcher) == (kind, launcher) and ex.kind.name == kind
    request = ex.dry_run(sweep.single(lp))
    (handed,) = request.sweep.plans
    assert handed.requeue is ex.requeue and request.executor == kind
    assert any(
        handed.dumps() in text for text in (*request.scripts, *(f.text for f in request.files))
    )
    assert not any("HPCQA_REQUEUE" in text for text in request.scripts)
    expected = {
        table.HOSTS: Requeue.NONE,
        table.SCRIPT: Requeue.POD if kind == table.K8S else Requeue.SCRIPT,
    }
    assert ex.requeue is expected.get(
        mode, Requeue.SCRIPT if launcher == "mpirun" else Requeue.SUBMITIT
    )


def test_render_target_is_render_kind_and_says_so_once():
    """`render --target` (its name before 0.2) still works: the same text as --kind, and one line naming the new
    option on stderr."""
    from tests.conftest import run_cli

    old = run_cli("render", "configs/squad_spr.toml", "--target", "script")
    new = run_cli("render", "configs/squad_spr.toml", "--kind", "script")
    assert old.returncode == new.returncode == 0, old.stderr
    assert old.stdout == new.stdout and "#SBATCH" in new.stdout
    said = [ln for ln in old.stderr.splitlines() if "--target is now --kind" in ln]
    assert len(said) == 1 and "--target" not in new.stderr, old.stderr
