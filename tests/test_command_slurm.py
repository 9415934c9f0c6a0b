"""A user command on the real Slurm test cluster (two nodes in network namespaces, accounting): both examples with
one rank on each node through submitit, a sweep of one as an array with the swept value as an argument, a failing
program whose exit code and stderr `status` names, a held job whose checkout changes before it starts, and a
rendered script that checkpoints the program on USR2 and requeues itself."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import slurm_cluster
from tests.conftest import ROOT, qa_data, run_cli, run_qa_like, tiny_model
from tests.test_slurm import _start_requeued_now, wait_state

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
QUICK = str(ROOT / "configs/quickstart.toml")
TWO = [
    "--set",
    "cluster.executor=slurm",
    "--set",
    "cluster.nodes=2",
    "--set",
    "launch.ranks_per_socket=1",
    "--set",
    "cluster.time_limit_min=10",
    "--set",
    "train.ddp_timeout_s=120",
]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(tmp_path_factory, nodes=2, accounting=True)


@pytest.fixture
def work(tmp_path):
    """The program's folder (what is copied) apart from the job output (logs/, also the registry's home)."""
    w = tmp_path / "w"
    w.mkdir()
    shutil.copy(ROOT / "examples/ddp_loop.py", w)
    shutil.copy(ROOT / "examples/qa_trainer.py", w)
    return w


def submit(env, tmp_path, work, *argv, extra=(), wait=True):
    return run_cli(
        "submit",
        QUICK,
        *TWO,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        *extra,
        *([] if wait else ["--no-wait"]),
        "--",
        *argv,
        env=env,
        cwd=work,
    )


def job_of(r) -> str:
    return r.stderr.split("submitted Slurm job ")[1].split(":")[0]


def test_the_ddp_loop_on_two_nodes_is_the_dry_runs_request(slurm, tmp_path, work):
    argv = ["python", "ddp_loop.py", "--steps", "20", "--lr", "{train.learning_rate}"]
    dry = run_cli(
        "submit",
        QUICK,
        *TWO,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--dry-run",
        "--json",
        "--",
        *argv,
        env=slurm,
        cwd=work,
    )
    assert dry.returncode == 0, dry.stderr
    r = submit(slurm, tmp_path, work, *argv)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = job_of(r)
    (folder,) = (tmp_path / "logs" / "ddp_loop").glob(f"{job_id}-*")
    shown = json.loads(dry.stdout)
    assert (
        shown["sbatch"].replace(shown["submission"], folder.name.split("-", 1)[1])
        == (folder / f"{job_id}_submission.sh").read_text()
    )
    reports = [json.loads((folder / "ranks" / f"rank-{k}.json").read_text()) for k in range(2)]
    assert [rep["host"] for rep in reports] == ["node1", "node2"]
    assert {rep["plan_digest"] for rep in reports} == {shown["plan_digest"]}
    assert {rep["master_addr"] for rep in reports} == {"node1"} and [
        rep["node_rank"] for rep in reports
    ] == [0, 1]
    out = [p.read_text() for p in sorted(folder.glob(f"{job_id}_*_log.out"))]
    assert "rank 0/2" in out[0] and "rank 1/2" in out[1]
    j = wait_state(slurm, job_id, {"COMPLETED"})
    assert j["results"]["metrics"]["steps"] == 20 and j["results"]["metrics"]["lr"] == 1e-4


def test_the_hf_trainer_qa_example_on_two_nodes(slurm, tmp_path, work, tmp_path_factory):
    data = qa_data(tmp_path_factory)
    tiny = tiny_model(tmp_path_factory)
    r = submit(
        slurm,
        tmp_path,
        work,
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
    )
    assert r.returncode == 0, r.stdout + r.stderr
    j = wait_state(slurm, job_of(r), {"COMPLETED"})
    assert j["results"]["metrics"]["steps"] == 6 and j["results"]["world_size"] == 2
    assert j["results"]["metrics"]["eval_loss"] > 0


def test_a_run_qa_shaped_program_twice_from_its_folder_on_two_nodes(
    slurm, tmp_path, tmp_path_factory
):
    """As run_qa.py's users run it: from its own folder, `--output_dir out`, submitted twice in a row with the
    user's default registry. Each job writes out/ in its own working folder (the second starts from step 0), the
    Trainer's own files give the progress and EM/F1 in `status`, and `status` from another folder finds both."""
    prog, argv = run_qa_like(tmp_path, tmp_path_factory)
    home = {**slurm, "HPCQA_REGISTRY": "", "XDG_STATE_HOME": str(tmp_path / "state")}
    ids = []
    for _ in range(2):
        r = run_cli(
            "submit",
            QUICK,
            *TWO,
            "--set",
            f"job.output_dir={tmp_path / 'logs'}",
            "--",
            *argv,
            "--max_steps",
            "4",
            "--save_steps",
            "2",
            env=home,
            cwd=prog,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        ids.append(job_of(r))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    views = {
        v["id"]: v
        for v in json.loads(run_cli("status", "--all", "--json", env=home, cwd=elsewhere).stdout)
    }
    assert sorted(views) == sorted(ids), views.keys()
    for job_id in ids:
        j = json.loads(run_cli("status", "--json", job_id, env=home, cwd=elsewhere).stdout)[0]
        assert j["state"] == "COMPLETED" and j["name"] == "run_qa" and j["nodes"] == 2, j
        assert j["progress"]["step"] == j["progress"]["total_steps"] == 4, j["progress"]
        assert 0 <= j["results"]["f1"] <= 100 and j["results"]["exact_match"] is not None, j[
            "results"
        ]
        folder = Path(j["folder"])
        state = json.loads((folder / "work" / "out" / "trainer_state.json").read_text())
        assert state["global_step"] == 4
        logs = " ".join(p.read_text(errors="replace") for p in folder.glob("*_log.*"))
        assert "Resuming training" not in logs, logs[-2000:]  # the second job started from step 0
    assert not (prog / "out").exists() and not (prog / "logs").exists()


def test_a_sweep_of_the_program_is_an_array_with_the_values_as_arguments(slurm, tmp_path, work):
    r = submit(
        slurm,
        tmp_path,
        work,
        "python",
        "ddp_loop.py",
        "--steps",
        "10",
        "--lr",
        "{train.learning_rate}",
        extra=["--set", "sweep.train.learning_rate=[0.01, 0.02]", "--set", "sweep.parallelism=2"],
    )
    assert r.returncode == 0, r.stderr
    sweep_id = r.stdout.strip().splitlines()[-1]
    end = time.time() + 240
    while time.time() < end:
        jobs = json.loads(run_cli("status", "--json", sweep_id, env=slurm).stdout)
        if len(jobs) == 2 and all(j["state"] in ("COMPLETED", "FAILED") for j in jobs):
            break
        time.sleep(2)
    assert sorted(j["id"] for j in jobs) == [f"{sweep_id}_0", f"{sweep_id}_1"]
    assert {j["state"] for j in jobs} == {"COMPLETED"}
    assert sorted(j["results"]["metrics"]["lr"] for j in jobs) == [0.01, 0.02]
    res = run_cli("results", sweep_id, "--json", "--metric", "loss", env=slurm)
    assert res.returncode == 0, res.stderr
    assert all(isinstance(v["loss"], float) for v in json.loads(res.stdout)["variants"])


def test_a_failing_program_names_its_exit_code_and_stderr(slurm, tmp_path, work):
    (work / "bad.py").write_text(
        "import os, sys\nif os.environ['RANK'] == '1':\n"
        "    print('FileNotFoundError: /data/train.json', file=sys.stderr)\n    sys.exit(5)\n"
        "import time; time.sleep(2)\n"
    )
    r = submit(slurm, tmp_path, work, "python", "bad.py")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "exited with code 5" in r.stderr
    job_id = job_of(r)
    wait_state(slurm, job_id, {"FAILED"})
    text = run_cli("status", job_id, env=slurm).stdout
    assert "rank 1 on node2: the command exited with code 5" in " ".join(text.split())
    assert "FileNotFoundError: /data/train.json" in text


def test_a_held_job_runs_what_was_submitted_though_the_checkout_changed(slurm, tmp_path, work):
    (work / "t.py").write_text(
        "import os, json\njson.dump({'version': 1}, open(os.environ['HPCQA_RESULTS'], 'w'))\n"
    )
    r = submit(
        slurm,
        tmp_path,
        work,
        "python",
        "t.py",
        extra=["--set", 'cluster.sbatch_extra=["--hold"]'],
        wait=False,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    wait_state(slurm, job_id, {"PENDING"})
    (work / "t.py").write_text(
        "raise SystemExit('the edited checkout ran')\n"
    )  # the checkout moves on meanwhile
    env = {**os.environ, **slurm}
    subprocess.run(["scontrol", "release", job_id], check=True, env=env, capture_output=True)
    j = wait_state(slurm, job_id, {"COMPLETED", "FAILED"}, timeout=120)
    assert j["state"] == "COMPLETED" and j["results"]["metrics"] == {"version": 1}


@pytest.mark.parametrize("heard_by", ["every node", "the second node only"])
def test_a_rendered_script_checkpoints_the_program_on_usr2_and_requeues(
    slurm, tmp_path, work, heard_by
):
    """USR2 from `scancel --signal`, which Slurm delivers to each node in its own time: the program's ranks agree to
    stop (ddp_loop.py: every rank ends the same step, rank 0 saves, all exit 0), and the script requeues the job.
    The second case is the race a full run met: the notice reached the second node's rank, the program on the
    first node then ended with 0 before that node's notice came -- rank 0 took it for done and the job ended at
    step 28 of 120, complete. Here the first node never hears it: rank 0 learns of it from the other rank's
    report."""
    r = run_cli(
        "render",
        QUICK,
        *TWO,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--python",
        sys.executable,
        "--submit",
        "--",
        "python",
        "ddp_loop.py",
        "--steps",
        "120",
        "--step-time",
        "0.1",
        "--save-every",
        "1000",
        env=slurm,
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stderr.split("submitted Slurm job ")[1].split(":")[0]
    folder = tmp_path / "logs" / "ddp_loop" / f"hqtest-{job_id}"
    end = time.time() + 120
    while time.time() < end and "step 20 " not in _log(folder, 0):
        time.sleep(0.5)
    assert "step 20 " in _log(folder, 0), _log(folder, 0)
    env = {**os.environ, **slurm}
    if heard_by == "every node":
        subprocess.run(
            ["scancel", "--signal=USR2", job_id], check=True, env=env, capture_output=True
        )
    else:  # the rank on node2, by the PID its report gives, once /proc says it is this job's rank
        pid = json.loads((folder / "ranks" / "rank-1.json").read_text())["pid"]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"hpcqa.rank.train" in argv and str(folder / "plan.json").encode() in argv, argv
        os.kill(pid, signal.SIGUSR2)
    _start_requeued_now(slurm, job_id)
    j = wait_state(slurm, job_id, {"COMPLETED", "FAILED"}, timeout=240)
    assert j["state"] == "COMPLETED", _log(folder, 0)
    saved = int(
        _log(folder, 0).split("resumed from step ")[1].split()[0]
    )  # the requeued attempt's log
    assert 20 <= saved < 120 and j["results"]["metrics"]["resumed_from"] == saved
    notice = json.loads((folder / "ranks" / "attempt-0" / "rank-0.json").read_text())["notice"]
    assert (
        notice["signal"] == "SIGUSR2" and notice["exit_code"] == 0
    )  # the program saved and exited by itself
    assert (folder / "requeue-requested.0").exists() and "requeued 1x" in j["attempts"]


def _log(folder: Path, rank: int) -> str:
    p = folder / f"rank-{rank}.log"
    return p.read_text(errors="replace") if p.exists() else ""


def test_the_hf_trainer_script_saves_on_the_notice_and_resumes_after_submitits_requeue(
    slurm, tmp_path, work, tmp_path_factory
):
    """The QA example through submitit on two nodes, USR2 as `--signal` sends it before the time limit: hpcqa passes
    it on as SIGTERM, the Trainer's ranks agree after a step and save a checkpoint in HPCQA_CHECKPOINT_DIR, submitit
    requeues the job, and the next attempt resumes the Trainer from that checkpoint and finishes."""
    data = qa_data(tmp_path_factory)
    tiny = tiny_model(tmp_path_factory)
    steps = 35  # the notice comes after 15 (3 losses logged, every 5 steps): the rest is what the resume trains
    r = submit(
        slurm,
        tmp_path,
        work,
        "python",
        "qa_trainer.py",
        "--model_name_or_path",
        str(tiny),
        "--train_file",
        str(data / "train.json"),
        "--max_steps",
        str(steps),
        "--per_device_train_batch_size",
        "4",
        wait=False,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    folder = Path(wait_state(slurm, job_id, {"RUNNING"})["folder"])
    log = folder / f"{job_id}_0_log.out"
    end = time.time() + 180
    while time.time() < end and (log.read_text() if log.exists() else "").count("'loss'") < 3:
        time.sleep(0.5)
    assert log.read_text().count("'loss'") >= 3, log.read_text()[-2000:]
    env = {**os.environ, **slurm}
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True, env=env, capture_output=True)
    _start_requeued_now(slurm, job_id)
    j = wait_state(slurm, job_id, {"COMPLETED", "FAILED"}, timeout=300)
    assert j["state"] == "COMPLETED", log.read_text()[-3000:]
    m = j["results"]["metrics"]
    saved = int(m["resumed_from"].rsplit("checkpoint-", 1)[1])
    assert (
        m["resumed_from"].startswith(str(folder / "checkpoints"))
        and 15 <= saved < steps
        and m["steps"] == steps
    )
    assert j["results"]["requeues"] == 1 and j["attempts"].startswith("requeued 1x (SIGUSR2)")
