"""A user command as the job (`job.command`, `hpcqa submit CONFIG -- ...`): placeholders, the CLI's --, what the dry
run shows, the copy of the program's folder and its verification at the rank, and (slow) the two examples and a
failing program under the local executor."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcqa.core import command, config
from hpcqa.errors import ConfigError
from hpcqa.record import worktree
from tests.conftest import ROOT, run_cli, run_qa_like

QUICK = str(ROOT / "configs/quickstart.toml")
ENV_PROBE = """import json, os, sys
names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "HPCQA_ATTEMPT", "HPCQA_CHECKPOINT_DIR",
         "HPCQA_RESUMING", "HPCQA_JOB_DIR", "TORCHELASTIC_RESTART_COUNT", "PYTHONSAFEPATH", "HPCQA_SWEEP_TRAIN_SEED"]
out = {k: os.environ.get(k) for k in names}
out.update(cpus=sorted(os.sched_getaffinity(0)), cwd=os.getcwd(), argv=sys.argv[1:])
with open(os.path.join(os.environ["HPCQA_JOB_DIR"], "probe-%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(out, f)
if os.environ["RANK"] == "0":
    json.dump({"loss": 0.25, "tag": "x"}, open(os.environ["HPCQA_RESULTS"], "w"))
"""


def _values(**over):
    cfg = config.load(QUICK, [f"{k}={v}" for k, v in over.items()])
    return cfg.to_dict()


def test_placeholders_take_the_configs_values_and_braces_escape():
    v = _values(**{"train.learning_rate": "3e-5"})
    got = command.resolve(
        [
            "python",
            "t.py",
            "--lr={train.learning_rate}",
            "{{x}}",
            "{cluster.nodes}",
            "{train.bf16}",
        ],
        v,
        "/venv/bin/python",
    )
    assert got == ("/venv/bin/python", "t.py", "--lr=3e-05", "{x}", "1", "auto")
    assert (
        command.resolve(["bash", "run.sh"], v, "/p")[0] == "bash"
    )  # only python/python3 mean the interpreter
    for bad, key in (
        (["python", "{train.nope}"], "job.command[1]"),
        (["python", "a}b"], "job.command[1]"),
        (["{", "x"], "job.command[0]"),
    ):
        with pytest.raises(ConfigError) as e:
            command.resolve(bad, v, "/p")
        assert e.value.key == key


def test_the_jobs_own_paths_are_filled_in_at_the_rank():
    """{job.dir}, {job.work_dir}, {job.checkpoint_dir}: left for the rank at submit (the folder is named by the job id),
    the rest of the argument filled in and escaped; a literal brace stays literal."""
    values = _values()
    cmd = [
        "python",
        "t.py",
        "--output_dir",
        "{job.dir}/out",
        "--lr",
        "{train.learning_rate}",
        "--x",
        "{{job.dir}}",
        "--y",
        "a{{b}}{job.checkpoint_dir}",
    ]
    argv = command.resolve(cmd, values, "py")
    assert (
        argv[3] == "{job.dir}/out"
        and argv[7] == "{job.dir}"
        and argv[5] == str(values["train"]["learning_rate"])
    )
    assert command.templates(cmd) == [3, 9]
    out = command.job_paths(
        argv,
        command.templates(cmd),
        {"job.dir": "/j/7", "job.work_dir": "/j/7/work", "job.checkpoint_dir": "/j/7/checkpoints"},
    )
    assert out[3] == "/j/7/out" and out[7] == "{job.dir}" and out[9] == "a{b}/j/7/checkpoints"
    with pytest.raises(ConfigError, match="job.command"):
        command.check(["python", "{job.nothing}"], values)


def test_sweep_values_become_variables():
    assert command.sweep_env({"train.learning_rate": 3e-5, "cluster.nodes": 2}) == {
        "HPCQA_SWEEP_CLUSTER_NODES": "2",
        "HPCQA_SWEEP_TRAIN_LEARNING_RATE": "3e-05",
    }


def test_a_programs_loss_sorts_low_first_its_accuracy_high_first():
    from types import SimpleNamespace

    from hpcqa.record import results
    from hpcqa.record.jobfiles import results as schema

    views = [
        SimpleNamespace(
            task_index=i,
            id=str(i),
            state="COMPLETED",
            variant={"train.seed": i},
            nodes=1,
            world_size=2,
            results=schema.parse({"loss": loss, "accuracy": acc}),  # as the job folder gives it
            outputs=[],
        )
        for i, (loss, acc) in enumerate([(0.9, 0.7), (0.2, 0.9), (0.5, 0.8)])
    ]
    assert [r["task"] for r in results.rows(views, "loss")] == [1, 2, 0]
    assert [r["task"] for r in results.rows(views, "accuracy")] == [1, 2, 0]
    assert (
        results.lower_better("eval_loss")
        and results.lower_better("step_time")
        and not results.lower_better("f1")
    )


def test_named_files_are_the_arguments_that_are_files(tmp_path):
    (tmp_path / "a.py").write_text("x")
    (tmp_path / "d.json").write_text("{}")
    got = command.named_files(
        ["a.py", "--data=d.json", "--out", "nope.txt", str(tmp_path)], str(tmp_path)
    )
    assert got == [str(tmp_path / "a.py"), str(tmp_path / "d.json")]


def test_cli_double_dash_sets_the_command_and_refuses_elsewhere(tmp_path):
    (tmp_path / "t.py").write_text("print(1)\n")
    r = run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path}",
        "--dry-run",
        "--json",
        "--",
        "python",
        "t.py",
        "--lr",
        "{train.learning_rate}",
        "--weird",
        "a'b\"c$(x)`y`;z",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["command"] == [
        plan["python"],
        "t.py",
        "--lr",
        "0.0001",
        "--weird",
        "a'b\"c$(x)`y`;z",
    ]
    assert plan["config"]["job"]["command"][1:] == [
        "t.py",
        "--lr",
        "{train.learning_rate}",
        "--weird",
        "a'b\"c$(x)`y`;z",
    ]
    work = plan["request"]["work"]
    assert work["source"] == str(tmp_path) and plan["work"]["run_in"].endswith(
        f"work-{work['digest']}/work"
    )
    assert plan["work"]["dir"] == str(tmp_path)
    for argv in (["status", "--", "x"], ["submit", QUICK, "--"]):
        bad = run_cli(*argv)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr and "fix:" in bad.stderr


def test_bad_commands_are_refused_naming_the_entry(tmp_path):
    cases = [
        (["python", "{train.nope}"], "job.command[1]"),
        (["python", "x.py", "--token", "hf_" + "a" * 34], "job.command[3]"),
        (["python", "x\ny"], "job.command[1]"),
    ]
    for argv, key in cases:
        r = run_cli(
            "submit", QUICK, "--set", f"job.output_dir={tmp_path}", "--dry-run", "--", *argv
        )
        assert r.returncode == 2 and key in r.stderr and "Traceback" not in r.stderr, (
            argv,
            r.stderr,
        )
    r = run_cli("submit", QUICK, "--set", "job.task=comm", "--dry-run", "--", "python", "x.py")
    assert r.returncode == 2 and "job.task" in r.stderr
    # the program twice: --set job.command and after -- (one of them would win silently)
    r = run_cli(
        "submit",
        QUICK,
        "--set",
        'job.command=["python", "a.py"]',
        "--dry-run",
        "--",
        "python",
        "b.py",
    )
    assert r.returncode == 2 and "given twice" in r.stderr and "Traceback" not in r.stderr


def test_arguments_that_together_pass_the_kernels_limit_are_refused():
    """40 arguments of 60 KB each pass the per-argument and count limits but not the kernel's ARG_MAX together
    (every rank would die with "Argument list too long"): refused at the config, naming job.command."""
    big = ["python", "x.py"] + ["a" * 60_000] * 40
    with pytest.raises(ConfigError) as e:
        command.check(big, _values())
    assert (
        e.value.key == "job.command" and "ARG_MAX" in e.value.message and "a file" in e.value.hint
    )
    command.check(["python", "x.py"] + ["a" * 60_000] * 10, _values())  # 600 KB: fine


def test_a_named_file_that_cannot_be_read_is_one_line(tmp_path, monkeypatch, capsys):
    """`-- python my.py secret.txt` where secret.txt is mode 000 for this (non-root) user: its digest cannot be taken
    at submit. One line naming the file, exit 2 -- not a PermissionError traceback. (Root reads any mode, so the
    refusal of open() is stood in for.)"""
    from hpcqa import cli, fsutil
    from hpcqa.record import worktree

    (tmp_path / "my.py").write_text("print(1)\n")
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("s\n")

    def refuse(path):
        if str(path) == str(outside):
            raise PermissionError(13, "Permission denied", str(path))
        return fsutil.file_sha256(path)

    monkeypatch.setattr(worktree, "file_sha256", refuse)
    monkeypatch.chdir(tmp_path)
    code = cli.main(
        [
            "submit",
            QUICK,
            "--set",
            f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
            "--dry-run",
            "--",
            "python",
            "my.py",
            str(outside),
        ]
    )
    err = " ".join(capsys.readouterr().err.split())
    assert (
        code == 2
        and f"job.command names {outside}, which cannot be read here (Permission denied)" in err
    ), err


def test_tune_refuses_to_time_layouts_for_a_program_it_does_not_run(tmp_path):
    r = run_cli(
        "tune",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path}",
        "--set",
        'job.command=["python", "x.py"]',
    )
    assert r.returncode == 2 and "job.command" in r.stderr and "Traceback" not in r.stderr


def test_the_dry_run_shows_the_command_its_folder_and_the_programs_variables(tmp_path):
    (tmp_path / "t.py").write_text("print(1)\n")
    r = run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--dry-run",
        "--",
        "python",
        "t.py",
        cwd=tmp_path,
        env={"COLUMNS": "300"},
    )
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert (
        "t.py" in text
        and f"a copy of {tmp_path}: 1 files" in text
        and "HPCQA_CHECKPOINT_DIR=" in text
    )
    assert "batches" not in text and "staged" not in text  # the built-in trainer's rows
    assert "torchrun's GROUP_*/ROLE_*" in text


def test_render_carries_the_command_in_the_plan_not_in_shell_text(tmp_path):
    hostile = "$(touch /tmp/pwned-hpcqa)'\";`id`"
    r = run_cli(
        "render",
        QUICK,
        "--set",
        "cluster.executor=slurm",
        "--",
        "python",
        "t.py",
        hostile,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert hostile not in r.stdout and "python3 -m hpcqa.rank.train --plan" in r.stdout.replace(
        "'", ""
    )


def test_a_pytorchjob_carries_the_command_in_its_plan_and_runs_it_in_the_image(tmp_path):
    import yaml

    r = run_cli(
        "render",
        QUICK,
        "--set",
        "k8s.image=reg.example.com/hpcqa:1",
        "--set",
        "k8s.memory=8Gi",
        "--kind",
        "pytorchjob",
        "-o",
        str(tmp_path / "job.yaml"),
        "--",
        "python",
        "my_train.py",
        "--lr",
        "{train.learning_rate}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert (
        "command: python3 my_train.py --lr 0.0001" in r.stderr
        and "must be in the image" in r.stderr
    )
    docs = [d for d in yaml.safe_load_all((tmp_path / "job.yaml").read_text()) if d]
    (job,) = docs
    (c,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    plan = json.loads(next(e["value"] for e in c["env"] if e["name"] == "HPCQA_PLAN_JSON"))
    assert plan["command"] == ["python3", "my_train.py", "--lr", "0.0001"]
    assert plan["work"] == {
        "dir": "",
        "run_in": "",
        "snapshot": "",
        "named": {},  # nothing of this machine's
        "job_paths": [],
    }


def test_the_copy_verifies_and_names_what_changed(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('a')\n")
    (src / "pkg" / "util.py").write_text("X = 1\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    (src / "__pycache__").mkdir()
    tree = worktree.scan(str(src))
    assert set(tree.files) == {"train.py", "pkg/util.py"} and any(".git" in s for s in tree.skipped)
    run_in = worktree.write(tree, tmp_path / "code")
    folder = str(run_in.parent)
    assert worktree.problem(folder, tree.digest) is None
    (src / "train.py").write_text(
        "print('edited after submit')\n"
    )  # the checkout changes: the copy doesn't
    assert (run_in / "train.py").read_text() == "print('a')\n"
    # nothing may be added to the shared copy (the programs run in their jobs' own folders, laid from it): a
    # planted module or bytecode would run instead of the verified code
    for planted in ("json.py", "pkg/__pycache__/util.cpython-311.pyc"):
        (run_in / planted).parent.mkdir(exist_ok=True)
        (run_in / planted).write_text("import os; os.system('touch /tmp/pwned')\n")
        assert f"{planted} was added after submit" in worktree.problem(folder, tree.digest)
        (run_in / planted).unlink()
    assert worktree.problem(folder, tree.digest) is None
    (run_in / "pkg" / "util.py").write_text("X = 2\n")
    assert "pkg/util.py changed after submit" in worktree.problem(folder, tree.digest)
    with pytest.raises(
        worktree.WorkError, match="changed while it was copied"
    ):  # the source moved on since the scan
        worktree.write(tree, tmp_path / "code")
    (src / "train.py").write_text("print('a')\n")
    assert (
        worktree.write(tree, tmp_path / "code") == run_in
    )  # a damaged copy is set aside, made again
    assert (run_in / "pkg" / "util.py").read_text() == "X = 1\n"
    assert list((tmp_path / "code").glob("*.damaged-*"))
    outside = tmp_path / "data.json"
    outside.write_text("{}")
    named = worktree.named_digests([str(outside), str(src / "train.py")], str(src))
    assert list(named) == [str(outside)]
    outside.write_text('{"changed": 1}')
    assert "changed after submit" in worktree.named_problem(named)


def test_symlinks_in_the_folder_are_not_followed_and_an_unreadable_file_is_named(
    tmp_path, monkeypatch
):
    """A link to /proc/self/environ (or to a secret anywhere) in the program's folder would copy what it points to
    into the job root: links are left out and the dry run says so. An unreadable file is one line, not a
    traceback."""
    import os

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('a')\n")
    (src / "env.txt").symlink_to("/proc/self/environ")
    (src / "data").symlink_to(tmp_path)
    tree = worktree.scan(str(src))
    assert set(tree.files) == {"train.py"}
    assert any(s.startswith("env.txt (a symlink") for s in tree.skipped), tree.skipped
    run_in = worktree.write(tree, tmp_path / "code")
    assert not (run_in / "env.txt").exists() and "HPCQA" not in "".join(
        p.read_text() for p in run_in.iterdir()
    )
    secret = src / "secret.key"
    secret.write_text("k")
    secret.chmod(0)
    if (
        os.geteuid() == 0
    ):  # root reads it anyway: what a user without the permission gets, as access() says
        monkeypatch.setattr(
            worktree.os, "access", lambda p, mode: not str(p).endswith("secret.key")
        )
    with pytest.raises(worktree.WorkError, match="secret.key cannot be read"):
        worktree.scan(str(src))


def test_a_folder_too_large_to_copy_is_refused_with_the_fix(tmp_path, monkeypatch):
    (tmp_path / "big.bin").write_bytes(b"x" * 2048)
    monkeypatch.setattr(worktree, "MAX_BYTES", 1024)
    with pytest.raises(worktree.WorkError) as e:
        worktree.scan(str(tmp_path))
    assert "job.workdir" in e.value.message and "--no-snapshot" in e.value.hint


# ------------------------------------------------------------------------------------------- local, end to end


def _submit_local(tmp_path, *argv, extra=(), wait=True):
    return run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--set",
        f"job.registry={tmp_path / 'logs' / 'reg.sqlite'}",
        *extra,
        *([] if wait else ["--no-wait"]),
        "--",
        *argv,
        cwd=tmp_path,
    )


def _job(tmp_path, r):
    job_id = r.stderr.split("local job ")[1].split(":")[0]
    (folder,) = (tmp_path / "logs").glob(f"*/{job_id}-*")  # logs/<the program's name>/
    return job_id, folder


@pytest.mark.slow
def test_two_ranks_get_the_plans_environment_and_pinning(tmp_path):
    (tmp_path / "probe.py").write_text(ENV_PROBE)
    r = _submit_local(tmp_path, "python", "probe.py", "--seed", "{train.seed}", "it's $HOME")
    assert r.returncode == 0, r.stderr
    job_id, folder = _job(tmp_path, r)
    probes = [json.loads((folder / f"probe-{k}.json").read_text()) for k in range(2)]
    plan = json.loads(
        next((tmp_path / "logs" / "probe" / "plans").glob("*/task-0.json")).read_text()
    )
    for k, p in enumerate(probes):
        assert (
            p["RANK"] == p["ROLE_RANK"] == str(k)
            and p["LOCAL_RANK"] == str(k)
            and p["WORLD_SIZE"] == "2"
        )
        assert (
            p["GROUP_RANK"] == "0"
            and p["GROUP_WORLD_SIZE"] == "1"
            and p["MASTER_ADDR"] == "127.0.0.1"
        )
        assert p["cpus"] == plan["local_ranks"][k]["cpus"] and p["OMP_NUM_THREADS"] == "1"
        assert (
            p["HPCQA_ATTEMPT"] == "0" == p["TORCHELASTIC_RESTART_COUNT"]
            and p["HPCQA_RESUMING"] == "0"
        )
        assert (
            p["HPCQA_CHECKPOINT_DIR"] == str(folder / "checkpoints") and p["PYTHONSAFEPATH"] is None
        )
        assert p["argv"] == [
            "--seed",
            "42",
            "it's $HOME",
        ]  # no shell between the config and the program
        assert p["cwd"] == str(
            folder / "work"
        )  # the job's own copy of the verified one (plan["work"]["run_in"])
    assert probes[0]["MASTER_PORT"] == probes[1]["MASTER_PORT"]
    j = json.loads(
        run_cli(
            "status", "--json", job_id, "--registry", str(tmp_path / "logs" / "reg.sqlite")
        ).stdout
    )[0]
    assert j["state"] == "COMPLETED" and j["results"]["metrics"] == {"loss": 0.25, "tag": "x"}
    text = run_cli("status", job_id, "--registry", str(tmp_path / "logs" / "reg.sqlite")).stdout
    assert "probe.py --seed 42" in " ".join(text.split()) and "loss 0.25" in text


@pytest.mark.slow
def test_a_failing_program_fails_the_job_with_its_code_and_stderr(tmp_path):
    (tmp_path / "bad.py").write_text(
        "import os, sys\nprint('loading the data', file=sys.stderr)\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('KeyError: answers', file=sys.stderr)\n    sys.exit(3)\n"
    )
    r = _submit_local(tmp_path, "python", "bad.py")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "rank 1 on" in r.stderr and "exited with code 3" in r.stderr
    job_id, _ = _job(tmp_path, r)
    text = run_cli("status", job_id, "--registry", str(tmp_path / "logs" / "reg.sqlite")).stdout
    assert "FAILED" in text and "exited with code 3" in text and "KeyError: answers" in text


@pytest.mark.slow
def test_a_programs_error_comes_first_and_its_carets_are_dropped(tmp_path):
    """A Python traceback ends with the one line that matters, under lines of ^^^^ markers: submit's report and
    status JOB show that line first, and no marker line."""
    (tmp_path / "bad.py").write_text(
        "import os\n\n\ndef load(name):\n"
        "    return open(os.path.join('/nonexistent', name)).read().strip()\n\n\n"
        "if os.environ['RANK'] == '0':\n    load('no-such-model')\n"
    )
    r = _submit_local(tmp_path, "python", "bad.py")
    assert r.returncode == 1, r.stderr
    lines = [line.strip() for line in r.stderr.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("rank 0 on"))
    assert lines[at + 1].startswith("FileNotFoundError:") and "no-such-model" in lines[at + 1], (
        r.stderr
    )
    assert not any(line and set(line) <= set("^~ ") for line in lines), r.stderr
    job_id, _ = _job(tmp_path, r)
    text = run_cli("status", job_id, "--registry", str(tmp_path / "logs" / "reg.sqlite")).stdout
    after = text.split("its stderr", 1)[1].strip().splitlines()
    assert after[0].lstrip("│ ").startswith("FileNotFoundError:"), text
    assert not any(set(line.strip("│ ")) <= set("^~") and line.strip("│ ") for line in after), text


@pytest.mark.slow
def test_a_queued_job_runs_the_submitted_copy_and_refuses_a_tampered_one(tmp_path):
    (tmp_path / "t.py").write_text(
        "import os, json\njson.dump({'v': 1}, open(os.environ['HPCQA_RESULTS'], 'w'))\n"
    )
    dry = run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--dry-run",
        "--json",
        "--",
        "python",
        "t.py",
        cwd=tmp_path,
    )
    run_in = Path(json.loads(dry.stdout)["work"]["run_in"])
    r = _submit_local(tmp_path, "python", "t.py", wait=False)
    (tmp_path / "t.py").write_text(
        "raise SystemExit(7)\n"
    )  # edited while the job is queued/running
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    w = run_cli("status", "--json", job_id, "--registry", str(tmp_path / "logs" / "reg.sqlite"))
    import time

    for _ in range(60):
        j = json.loads(
            run_cli(
                "status", "--json", job_id, "--registry", str(tmp_path / "logs" / "reg.sqlite")
            ).stdout
        )[0]
        if j["state"] in ("COMPLETED", "FAILED"):
            break
        time.sleep(1)
    assert j["state"] == "COMPLETED" and j["results"]["metrics"] == {"v": 1}, (j, w.stdout)
    # the same files again: the same copy, which someone has changed since
    (tmp_path / "t.py").write_text(
        "import os, json\njson.dump({'v': 1}, open(os.environ['HPCQA_RESULTS'], 'w'))\n"
    )
    (run_in / "t.py").write_text("print('not what was submitted')\n")
    (run_in.parent / worktree.MANIFEST).write_text("{}")  # and covered its tracks in the list
    r = _submit_local(tmp_path, "python", "t.py")
    assert r.returncode == 0, r.stderr  # submit saw the damage: set aside, copied again
    assert list(run_in.parent.parent.glob("work-*.damaged-*"))


@pytest.mark.slow
def test_the_ddp_loop_example_runs_on_two_ranks_and_writes_its_metrics(tmp_path):
    shutil.copy(ROOT / "examples/ddp_loop.py", tmp_path)
    r = _submit_local(
        tmp_path, "python", "ddp_loop.py", "--steps", "20", "--lr", "{train.learning_rate}"
    )
    assert r.returncode == 0, r.stderr
    assert "metrics: loss" in r.stdout
    job_id, folder = _job(tmp_path, r)
    res = json.loads((folder / "results.json").read_text())
    assert (
        res["metrics"]["steps"] == 20
        and res["metrics"]["lr"] == 1e-4
        and res["metrics"]["resumed_from"] == 0
    )
    assert (folder / "checkpoints" / "ddp_loop.pt").exists()


@pytest.mark.slow
def test_the_hf_trainer_qa_example_runs_on_two_ranks(tmp_path, tmp_path_factory):
    from hpcqa.rank.train import model

    data = tmp_path_factory.mktemp(
        "qa-data"
    )  # outside the program's folder: named, digested, not copied
    subprocess.run(
        [sys.executable, str(ROOT / "examples/qa_data.py"), str(data)],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    tiny = model.build_tiny_bert(tmp_path / "tiny")
    shutil.copy(ROOT / "examples/qa_trainer.py", tmp_path)
    r = _submit_local(
        tmp_path,
        "python",
        "qa_trainer.py",
        "--model_name_or_path",
        str(tiny),
        "--train_file",
        str(data / "train.json"),
        "--validation_file",
        str(data / "dev.json"),
        "--max_steps",
        "6",
        "--max_train_samples",
        "120",
        "--learning_rate",
        "{train.learning_rate}",
    )
    assert r.returncode == 0, r.stderr
    job_id, folder = _job(tmp_path, r)
    res = json.loads((folder / "results.json").read_text())
    assert res["metrics"]["steps"] == 6 and res["metrics"]["eval_loss"] > 0
    # the data files it named, outside its folder, were digested at submit
    assert set(res["work"]["named"]) == {str(data / "train.json"), str(data / "dev.json")}


@pytest.mark.slow
def test_a_run_qa_shaped_program_writes_into_its_own_job_each_time(tmp_path, tmp_path_factory):
    """run_qa.py as its README runs it: from its own folder, `--output_dir out`, the last checkpoint there resumed.
    Submitted twice, each job writes out/ in its own working folder: the second starts from step 0, and the
    shared, verified copy of the folder stays as submitted."""
    prog, argv = run_qa_like(tmp_path, tmp_path_factory)
    argv += ["--max_steps", "4", "--save_steps", "2"]
    folders = []
    for _ in range(2):
        r = run_cli(
            "submit",
            QUICK,
            "--set",
            f"job.output_dir={tmp_path / 'logs'}",
            "--set",
            f"job.registry={tmp_path / 'reg.sqlite'}",
            "--",
            *argv,
            cwd=prog,
        )
        assert r.returncode == 0, r.stderr
        job_id = r.stderr.split("local job ")[1].split(":")[0]
        (folder,) = (tmp_path / "logs" / "run_qa").glob(f"{job_id}-*")  # named after the program
        folders.append(folder)
        state = json.loads((folder / "work" / "out" / "trainer_state.json").read_text())
        assert state["global_step"] == 4 and (folder / "work" / "out" / "checkpoint-4").is_dir()
        logs = " ".join(p.read_text(errors="replace") for p in folder.glob("*_log.*"))
        assert "Resuming training" not in logs, logs[
            -2000:
        ]  # the second job did not pick up the first's
        assert (
            json.loads((folder / "work" / "out" / "all_results.json").read_text())["train_samples"]
            > 0
        )
        # what the Trainer wrote, in the job's record with no change to the program: progress, EM/F1
        progress = json.loads((folder / "progress.json").read_text())
        assert (progress["step"], progress["total_steps"]) == (4, 4) and isinstance(
            progress["loss"], float
        )
        j = json.loads(
            run_cli("status", "--json", job_id, "--registry", str(tmp_path / "reg.sqlite")).stdout
        )[0]
        assert j["state"] == "COMPLETED" and 0 <= j["results"]["f1"] <= 100, j["results"]
        assert (
            j["results"]["metrics"]["train_samples"] == 64
            and "eval_exact_match" in j["results"]["metrics"]
        )
    assert folders[0] != folders[1]
    (shared,) = (tmp_path / "logs" / "run_qa" / "code").glob("work-*/work")
    assert sorted(p.name for p in shared.iterdir()) == [
        "run_qa.py",
        "utils_qa.py",
    ]  # as submitted, nothing added
    assert not (prog / "out").exists()


@pytest.mark.slow
def test_the_mpirun_hosts_script_runs_the_program_under_intel_mpi(tmp_path):
    """`render --launcher mpirun --hosts` with a command: Intel MPI's hydra starts the ranks, the program sees
    Intel MPI's rank variables mapped to torch's, and its exit code is the script's."""
    import socket

    assert shutil.which("mpirun"), (
        "Intel MPI (pip install impi-rt) is needed: scripts/test.sh installs it"
    )
    (tmp_path / "probe.py").write_text(ENV_PROBE)
    script = tmp_path / "run.sh"
    r = run_cli(
        "render",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--set",
        "cluster.executor=slurm",
        "--launcher",
        "mpirun",
        "--hosts",
        socket.gethostname(),
        "--python",
        sys.executable,
        "-o",
        str(script),
        "--",
        "python",
        "probe.py",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    run = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    (folder,) = [
        p
        for p in (tmp_path / "logs" / "probe").iterdir()
        if p.name.startswith(socket.gethostname().split(".")[0])
    ]
    probes = [json.loads((folder / f"probe-{k}.json").read_text()) for k in range(2)]
    assert [p["RANK"] for p in probes] == ["0", "1"] and probes[0]["cpus"] != probes[1]["cpus"]
    assert probes[0]["cwd"] == str(
        tmp_path
    )  # render makes no copy: the script runs the folder as it is then
    (tmp_path / "probe.py").write_text("import sys\nsys.exit(4)\n")
    again = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert again.returncode != 0


def test_the_programs_stderr_is_passed_on_as_it_comes_in_bounded_memory(monkeypatch):
    """A progress bar's \\r updates reach the rank's log before any newline; a 20 MiB line without one is passed on
    whole while the pump's memory stays near one read's size (the old line reader held the whole line), and the
    failure record keeps its first 500 characters."""
    import collections
    import io
    import os
    import threading
    import time
    import tracemalloc

    from hpcqa.rank import command as rankcmd

    class Sink(io.RawIOBase):
        def __init__(self):
            self.n, self.first = 0, bytearray()

        def write(self, b):
            self.n += len(b)
            self.first += bytes(b[: max(0, 64 - len(self.first))])
            return len(b)

    sink = Sink()
    monkeypatch.setattr(
        rankcmd.sys, "stderr", type("E", (), {"buffer": sink, "flush": lambda self: None})()
    )
    read, write = os.pipe()
    tail: collections.deque = collections.deque(maxlen=rankcmd.TAIL_LINES)
    pump = threading.Thread(target=rankcmd._pump, args=(os.fdopen(read, "rb"), tail), daemon=True)
    tracemalloc.start()
    pump.start()
    os.write(write, b"epoch 1:  10%\r")
    end = time.time() + 5
    while time.time() < end and sink.n < 14:
        time.sleep(0.01)
    assert bytes(sink.first) == b"epoch 1:  10%\r"  # before any newline
    block = b"x" * (1 << 20)
    for _ in range(20):
        os.write(write, block)
    os.write(write, b"\nKeyError: 'answers'\n")
    os.close(write)
    pump.join(timeout=30)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sink.n == 14 + 20 * (1 << 20) + len(b"\nKeyError: 'answers'\n")
    assert peak < 2 << 20, peak
    assert list(tail)[-1] == "KeyError: 'answers'" and len(list(tail)[-2]) == rankcmd.TAIL_LINE


def test_a_program_that_is_not_there_is_refused_at_submit(tmp_path):
    """`python prog.py` from a folder without prog.py, or `./train.sh`: the job could never start (python exits 2,
    exec 127). Refused at submit and in the dry run, naming the folder, before anything is queued."""
    for argv in (["python", "prog.py"], ["./train.sh", "--x"]):
        for dry in ([], ["--dry-run"]):
            r = run_cli(
                "submit",
                QUICK,
                "--set",
                f"job.output_dir={tmp_path / 'logs'}",
                *dry,
                "--",
                *argv,
                cwd=tmp_path,
            )
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
            assert (
                f"{argv[0] if argv[0] != 'python' else argv[1]} is not in {tmp_path}" in r.stderr
            ), r.stderr
    assert not (tmp_path / "logs").exists()
    for argv in (
        ["python", "-m", "json.tool", "--help"],
        ["python", "-c", "pass"],
        ["bash", "-c", "true"],
    ):
        r = run_cli(
            "submit",
            QUICK,
            "--set",
            f"job.output_dir={tmp_path / 'logs'}",
            "--dry-run",
            "--",
            *argv,
            cwd=tmp_path,
        )
        assert r.returncode == 0, (argv, r.stderr)


def test_a_program_that_is_not_there_is_a_warning_at_render_and_refused_at_render_submit(tmp_path):
    """A rendered script runs the command in its folder when the job starts: the program may be put there before
    then, so render warns (naming the folder) and writes the script; `render --submit` queues it now, so it is
    refused as submit refuses it, nothing written. A pod runs its command in its image: no warning."""
    script = tmp_path / "run.sh"
    r = run_cli(
        "render",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "-o",
        str(script),
        "--",
        "python",
        "prog.py",
        cwd=tmp_path,
    )
    assert r.returncode == 0 and script.is_file(), r.stderr
    assert (
        f"warning: job.command: prog.py is not in {tmp_path}, the folder the script runs it in"
        in " ".join(r.stderr.split())
    )
    queued = run_cli(
        "render",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "-o",
        str(tmp_path / "q.sh"),
        "--submit",
        "--",
        "./train.sh",
        cwd=tmp_path,
    )
    assert queued.returncode == 2 and "Traceback" not in queued.stderr, queued.stderr
    assert "train.sh is not in" in queued.stderr and "nothing was submitted" in " ".join(
        queued.stderr.split()
    )
    assert not (tmp_path / "q.sh").exists() and not (tmp_path / "logs").exists()
    (tmp_path / "prog.py").write_text("pass\n")
    there = run_cli(
        "render",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "-o",
        str(script),
        "--",
        "python",
        "prog.py",
        cwd=tmp_path,
    )
    assert there.returncode == 0 and "warning" not in there.stderr, there.stderr
    pod = run_cli(
        "render",
        QUICK,
        "--kind",
        "pytorchjob",
        "--set",
        "k8s.image=registry.example.com/hpcqa:1",
        "--set",
        'k8s.memory="8Gi"',
        "-o",
        str(tmp_path / "pj.yaml"),
        "--",
        "python",
        "gone.py",
        cwd=tmp_path,
    )
    assert pod.returncode == 0 and "gone.py is not in" not in pod.stderr, pod.stderr


@pytest.mark.slow
def test_paths_out_of_the_folder_are_passed_absolute_and_the_job_runs(tmp_path):
    """`python ../other/prog.py --data=../other/data.txt` from a folder of its own: the program runs in a copy of
    that folder, where the relative paths would name nothing, so they are passed absolute (the dry run shows it)
    and the file named is checked by digest; the job completes and read the right data."""
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    (other / "prog.py").write_text(
        "import json, os, sys\n"
        "data = open(sys.argv[1].split('=', 1)[1]).read().strip()\n"
        "if os.environ['RANK'] == '0':\n"
        "    json.dump({'data': data}, open(os.environ['HPCQA_RESULTS'], 'w'))\n"
    )
    (other / "data.txt").write_text("forty-two\n")
    argv = ["python", "../other/prog.py", "--data=../other/data.txt"]
    dry = run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--dry-run",
        "--json",
        "--",
        *argv,
        cwd=work,
    )
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["command"][1:] == [str(other / "prog.py"), f"--data={other / 'data.txt'}"], plan[
        "command"
    ]
    assert sorted(plan["work"]["named"]) == [str(other / "data.txt"), str(other / "prog.py")]
    r = _submit_local(work, *argv, extra=("--set", f"job.output_dir={tmp_path / 'logs'}"))
    assert r.returncode == 0, r.stderr
    job_id = r.stderr.split("local job ")[1].split(":")[0]
    j = json.loads(
        run_cli("status", "--json", job_id, "--registry", str(work / "logs" / "reg.sqlite")).stdout
    )[0]
    assert j["state"] == "COMPLETED" and j["results"]["metrics"] == {"data": "forty-two"}, j
