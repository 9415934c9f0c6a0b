"""Real preemption on a real Slurm 22.05, configured as production clusters run it: partitions low (default) and high,
PreemptType=preempt/partition_prio, PreemptMode=REQUEUE, GraceTime=5 on low. A real preemptor job in the high
partition takes the node; Slurm delivers the notice (SIGCONT + SIGTERM, SIGKILL when the grace time ends) and
requeues the victim. Nothing here sends a signal by hand."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import slurm_cluster
from tests.conftest import ROOT, run_cli
from tests.test_slurm import ONE_PER_NODE, TINY, _start_requeued_now, status, submit, wait_state

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
# the grace time a rank needs here: its SIGTERM checkpoint of the tiny model took ~35 ms on an idle machine, so 5 s
# leave a wide margin for CI's load (production sites give minutes). With PreemptMode=REQUEUE rank 0 requeues the
# job once every rank has saved (hpcqa.executors.slurm.node.preempted_to_requeue); with CANCEL the ranks wait out the grace
# time and Slurm's pass that enforces it.
GRACE_S = 5
STEPS = 200  # the controller test trains on through the controller's absence
# a preempted job: the notice lands near step 20 on an idle machine (step 8 + Slurm 24.11's next scheduling pass, up
# to a second, at ~8 steps a second); under CI's load it once came after step 50 and the job completed unpreempted.
# 120 leaves ~100 steps (12 s idle, more under load, as steps slow too) for the notice; the resume trains the rest.
PREEMPTED_STEPS = 120


def long(steps: int = STEPS) -> list[str]:
    """A job of `steps` steps that saves only when told to (a notice) and does not evaluate."""
    return [
        "--set",
        f"train.max_steps={steps}",
        "--set",
        "train.save_steps=100000",
        "--set",
        "train.do_eval=false",
        "--set",
        "train.logging_steps=5",
    ]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(
        tmp_path_factory, nodes=1, accounting=True, preempt="requeue", grace_time=GRACE_S
    )


def _slurm(env, *argv) -> subprocess.CompletedProcess:
    r = subprocess.run(
        list(argv), capture_output=True, text=True, env={**os.environ, **env}, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r


def _training(env, tmp_path, step: int = 8) -> tuple[str, Path]:
    """A job in the low partition, one rank, running and past `step`."""
    r = submit(env, tmp_path, *long(), *ONE_PER_NODE, wait=False)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    folder = Path(wait_state(env, job_id, {"RUNNING"})["folder"])
    _step_reached(folder, step)
    return job_id, folder


def _preemptor(env) -> str:
    """A real job in the high partition that needs the victim's cores."""
    r = _slurm(
        env,
        "sbatch",
        "--parsable",
        "--output=/dev/null",
        "-p",
        "high",
        "-N1",
        "-n2",
        "--wrap",
        "true",
    )
    return r.stdout.strip().split(";")[0]


def _step_reached(folder: Path, step: int, timeout: float = 180) -> None:
    end = time.time() + timeout
    while time.time() < end:
        p = (
            json.loads((folder / "progress.json").read_text())
            if (folder / "progress.json").exists()
            else {}
        )
        if p.get("step", 0) >= step:
            return
        time.sleep(0.5)
    raise AssertionError(f"{folder} never reached step {step}")


def _a_second_requeue_runs_nothing(err_log: Path) -> None:
    """Slurm 24.11.5 requeues a job preempted with PreemptMode=REQUEUE (killed at the grace time's end) once more
    when its next attempt completes; 22.05 does not. That start runs nothing and the results stay the completing
    attempt's (JobDir.completed_before). Called once the job has left the queue (wait_state waits for that)."""
    skipped = "attempt 2 of a job that attempt 1 completed" in err_log.read_text()
    assert skipped == slurm_cluster.slurm_version().startswith("24.11."), err_log.read_text()[
        -2000:
    ]


@slurm_cluster.EACH_RELEASE
def test_preemption_and_an_edited_checkout(slurm, tmp_path):
    """One job meets both faults as a user would: submitted from a checkout while the node is busy, the checkout is
    then broken (a syntax error in the rank wrapper) before the job starts; running, it is preempted by a real
    high-priority job. It checkpoints once, is requeued by Slurm, resumes at that step, and completes -- on the
    submitted code in both attempts. A --no-snapshot job from the same checkout runs the broken tree and fails."""
    co = _checkout_copy(tmp_path)
    blocker = _slurm(
        slurm, "sbatch", "--parsable", "--output=/dev/null", "-N1", "-n2", "--wrap", "sleep 300"
    ).stdout.strip()
    job_id = _submit_from(
        slurm,
        co,
        tmp_path / "a",
        *long(PREEMPTED_STEPS),
        *ONE_PER_NODE,
    )
    live_id = _submit_from(slurm, co, tmp_path / "b", "--set", "train.max_steps=3", "--no-snapshot")
    assert status(slurm, job_id)[job_id]["state"] == "PENDING"
    (co / "hpcqa" / "rank" / "wrapper.py").write_text("this is not python (\n")
    _slurm(slurm, "scancel", blocker)
    folder = Path(wait_state(slurm, job_id, {"RUNNING"}, timeout=120)["folder"])
    _step_reached(folder, 8)
    _preemptor(slurm)
    # Slurm holds a requeued job ~2 minutes (BeginTime) before it may run again: once the preemptor is done and
    # the node idle, let it start now (the same as tests/test_slurm.py's USR2 test) -- a shorter wait, same fault
    _start_requeued_now(slurm, job_id, timeout=240)
    j = wait_state(slurm, job_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=480)
    assert j["state"] == "COMPLETED", j
    res = json.loads((folder / "results.json").read_text())
    assert res["global_steps"] == PREEMPTED_STEPS and res["requeues"] == 1, (
        f"no preemption before step {PREEMPTED_STEPS}: notices {res.get('notices')}"
    )
    _a_second_requeue_runs_nothing(folder / f"{job_id}_0_log.err")
    (notice, *_) = res["notices"]
    assert notice["signal"] == "SIGTERM" and notice["attempt"] == 0
    # one checkpoint at the step of the notice, and the rerun started there: nothing redone
    assert res["resumed_from_step"] == notice["step"] and notice["checkpoint"].endswith(
        f"checkpoint-{notice['step']}"
    )
    first = json.loads((folder / "ranks" / "attempt-0" / "rank-0.json").read_text())
    assert (
        first["stopped_at_step"] == notice["step"] and first["status"] == "checkpointed on SIGTERM"
    )
    log = (folder / f"{job_id}_0_log.err").read_text()
    assert "SIGTERM (preemption, scancel or the time limit): checkpoint of step" in log
    assert "Bypassing signal SIGTERM" not in log
    # once every rank had saved, rank 0 requeued the job itself (Slurm would have, at the grace time's end), and
    # the rank left on that requeue, not KillWait later on its SIGKILL
    first_attempt = log.split("attempt 1 starts")[0]
    assert "every rank has saved: requeued now (scontrol requeue)" in first_attempt, log[-3000:]
    assert "this rank leaves now" in first_attempt, log[-3000:]
    # the submitted code, in both attempts
    assert res["code"]["snapshot"] and res["code"]["describe"] == "not a git checkout"
    assert first["code"]["digest"] == res["code"]["digest"] and res["code"][
        "imported_from"
    ].startswith(res["code"]["snapshot"])
    assert wait_state(slurm, live_id, {"COMPLETED", "FAILED"}, timeout=300)["state"] == "FAILED"
    detail = run_cli("status", job_id, env={**slurm, "COLUMNS": "200"}).stdout
    assert (
        f"SIGTERM at step {notice['step']}" in detail
        and f"resumed from step {notice['step']}" in detail
    ), detail
    assert f"snapshot {res['code']['digest']}" in detail, detail


def test_a_cancel_ends_the_job_it_does_not_come_back(slurm, tmp_path):
    job_id, folder = _training(slurm, tmp_path)
    r = run_cli("cancel", job_id, env=slurm)
    assert r.returncode == 0, r.stderr
    assert wait_state(slurm, job_id, {"CANCELLED"}, timeout=60)["state"] == "CANCELLED"
    time.sleep(
        8
    )  # a requeue would show by now (the state, and a second attempt's start in the log)
    assert status(slurm, job_id)[job_id]["state"] == "CANCELLED"
    assert "attempt 1 starts" not in (folder / f"{job_id}_0_log.err").read_text()


def test_preempt_mode_cancel_says_preempted_and_where_to_continue(slurm, tmp_path):
    _slurm(slurm, "scontrol", "update", "PartitionName=low", "PreemptMode=CANCEL")
    try:
        job_id, folder = _training(slurm, tmp_path)
        _preemptor(slurm)
        j = wait_state(
            slurm, job_id, {"PREEMPTED", "CANCELLED", "FAILED", "COMPLETED"}, timeout=120
        )
    finally:
        _slurm(slurm, "scontrol", "update", "PartitionName=low", "PreemptMode=REQUEUE")
    assert j["state"] == "PREEMPTED", j
    # PreemptMode=CANCEL, read from the partition: the rank left the job to Slurm, which did not bring it back
    assert "requeued now" not in (folder / f"{job_id}_0_log.err").read_text()
    report = json.loads((folder / "ranks" / "rank-0.json").read_text())
    checkpoint = report["notice"]["checkpoint"]
    assert Path(checkpoint, "trainer_state.json").is_file()
    detail = run_cli("status", job_id, env={**slurm, "COLUMNS": "250"}).stdout
    assert "PREEMPTED" in detail and f"train.resume_from={checkpoint}" in detail, detail
    # the resubmit continues from that checkpoint
    again = submit(
        slurm,
        tmp_path,
        *long(report["stopped_at_step"] + 4),
        *ONE_PER_NODE,
        "--set",
        f"train.resume_from={json.dumps(checkpoint)}",
    )
    assert again.returncode == 0 and "COMPLETED" in again.stdout, again.stdout + again.stderr
    (done,) = [
        p
        for p in (tmp_path / "quickstart").iterdir()
        if p.is_dir() and (p / "results.json").exists()
    ]
    assert json.loads((done / "results.json").read_text())["resumed_from"] == checkpoint


def _checkout_copy(tmp_path) -> Path:
    """A checkout of hpcqa to edit while its job waits (never the real one)."""
    import shutil

    from tests.conftest import ROOT

    co = tmp_path / "checkout"
    for part in ("hpcqa", "configs", "sbatch_templates"):
        shutil.copytree(ROOT / part, co / part, ignore=shutil.ignore_patterns("__pycache__"))
    return co


def _submit_from(env, co: Path, out: Path, *extra) -> str:
    args = [
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        f"job.output_dir={json.dumps(str(out))}",
        *extra,
        "--no-wait",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "hpcqa", *args],
        capture_output=True,
        text=True,
        cwd=co,
        env={**os.environ, **env},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def _ping(env) -> bool:
    r = subprocess.run(
        ["scontrol", "ping"], capture_output=True, text=True, env={**os.environ, **env}, timeout=30
    )
    return r.returncode == 0 and " is UP" in r.stdout


@slurm_cluster.EACH_RELEASE
def test_the_controller_goes_away_and_comes_back(slurm, tmp_path):
    """slurmctld stopped mid-job (by its PID) and started again: the job trains on, status keeps answering
    (accounting and the job's files), a submit meanwhile is one line and exit 2 with nothing registered, and the
    job ends COMPLETED once the controller is back."""
    import signal

    job_id, folder = _training(slurm, tmp_path)
    pidfile = Path(slurm["SLURM_CONF"]).parent / "slurmctld.pid"
    pid = int(pidfile.read_text())
    os.kill(pid, signal.SIGTERM)
    try:
        end = time.time() + 30
        while time.time() < end and Path(f"/proc/{pid}").exists():
            time.sleep(0.2)
        assert not _ping(slurm)
        before = json.loads((folder / "progress.json").read_text())["step"]
        st = run_cli("status", "--json", job_id, env=slurm)
        assert st.returncode == 0 and json.loads(st.stdout)[0]["state"] == "RUNNING", (
            st.stdout + st.stderr
        )
        jobs_before = len(json.loads(run_cli("status", "--json", "--all", env=slurm).stdout))
        down = submit(slurm, tmp_path / "down", *long())
        assert down.returncode == 2 and "Traceback" not in down.stderr, down.stderr
        assert (
            "controller is not answering" in down.stderr and "nothing was submitted" in down.stderr
        )
        assert (
            len(json.loads(run_cli("status", "--json", "--all", env=slurm).stdout)) == jobs_before
        )
        time.sleep(3)
        assert (
            json.loads((folder / "progress.json").read_text())["step"] > before
        )  # training went on
    finally:
        subprocess.run(["slurmctld"], env={**os.environ, **slurm}, check=True, timeout=60)
        end = time.time() + 60
        while time.time() < end and not _ping(slurm):
            time.sleep(0.5)
    assert _ping(slurm)
    j = wait_state(slurm, job_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=300)
    assert j["state"] == "COMPLETED", j
    assert json.loads((folder / "results.json").read_text())["global_steps"] == STEPS


def test_a_preempted_program_resumes_from_its_own_checkpoint(slurm, tmp_path):
    """A user command (examples/ddp_loop.py) preempted by a real higher-priority job: Slurm's SIGTERM reaches the
    program (and hpcqa forwards it), the program saves in HPCQA_CHECKPOINT_DIR and exits, Slurm requeues the job,
    and the next attempt resumes from the program's own checkpoint."""
    work = tmp_path / "w"
    work.mkdir()
    shutil.copy(ROOT / "examples/ddp_loop.py", work)
    r = run_cli(
        "submit",
        str(ROOT / "configs/quickstart.toml"),
        "--set",
        "cluster.executor=slurm",
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--set",
        "cluster.time_limit_min=10",
        "--no-wait",
        "--",
        "python",
        "ddp_loop.py",
        "--steps",
        "150",  # 14 s after the step 10 the preemptor waits for: the notice lands well before the end, under load too
        "--step-time",
        "0.1",
        "--save-every",
        "1000",
        env=slurm,
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    folder = Path(wait_state(slurm, job_id, {"RUNNING"})["folder"])
    log = folder / f"{job_id}_0_log.out"
    end = time.time() + 120
    while time.time() < end and "step 10 " not in (log.read_text() if log.exists() else ""):
        time.sleep(0.5)
    _preemptor(slurm)
    _start_requeued_now(
        slurm, job_id, timeout=240
    )  # not Slurm's ~2 minutes of BeginTime (as above)
    j = wait_state(slurm, job_id, {"COMPLETED", "FAILED"}, timeout=300)
    assert j["state"] == "COMPLETED", log.read_text()[-2000:]
    resumed = j["results"]["metrics"]["resumed_from"]
    assert 10 <= resumed < 150 and j["results"]["requeues"] == 1
    _a_second_requeue_runs_nothing(log.with_suffix(".err"))
    assert j["attempts"].startswith("requeued 1x (SIGTERM)")
    assert f"rank 0: resumed from step {resumed}" in log.read_text()


def test_a_preempted_run_qa_shaped_program_resumes_its_own_checkpoint(
    slurm, tmp_path, tmp_path_factory
):
    """run_qa.py has no SIGTERM handler: preempted, it dies, and its next attempt resumes from the last checkpoint
    the Trainer saved under its relative --output_dir. That folder is the job's own working folder, kept across
    the job's attempts: the requeued attempt resumes from it, and the job ends COMPLETED at max_steps."""
    from tests.conftest import run_qa_like

    prog, argv = run_qa_like(tmp_path, tmp_path_factory)
    home = {**slurm, "HPCQA_REGISTRY": "", "XDG_STATE_HOME": str(tmp_path / "state")}
    # the notice came ~7 steps after checkpoint-10 on an idle machine; under load the wait for the scheduler grows
    # faster than the steps slow down (see PREEMPTED_STEPS), so 60 leaves it ~50 steps to land before the end
    steps = 60
    r = run_cli(
        "submit",
        str(ROOT / "configs/quickstart.toml"),
        "--set",
        "cluster.executor=slurm",
        *ONE_PER_NODE,
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--set",
        "cluster.time_limit_min=10",
        "--no-wait",
        "--",
        *argv,
        "--max_steps",
        str(steps),
        "--save_steps",
        "10",
        "--max_seq_length",
        "256",
        env=home,
        cwd=prog,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    folder = Path(wait_state(home, job_id, {"RUNNING"})["folder"])
    end = time.time() + 180
    while time.time() < end and not list(
        (folder / "work" / "out").glob("checkpoint-*/trainer_state.json")
    ):
        time.sleep(0.5)
    saved = sorted((folder / "work" / "out").glob("checkpoint-*"))
    assert saved, (folder / f"{job_id}_0_log.err").read_text()[-2000:]
    _preemptor(home)
    _start_requeued_now(home, job_id, timeout=240)
    j = wait_state(home, job_id, {"COMPLETED", "FAILED"}, timeout=400)
    out = (folder / f"{job_id}_0_log.out").read_text(errors="replace")
    assert j["state"] == "COMPLETED", (
        out[-2000:] + (folder / f"{job_id}_0_log.err").read_text()[-2000:]
    )
    # the program died on the notice; its supervisor (rank 0 of 1) requeued the job without the grace time's wait
    err = (folder / f"{job_id}_0_log.err").read_text(errors="replace")
    assert "every rank has saved: requeued now" in err, err[-2000:]
    resumed = [ln for ln in out.splitlines() if "Resuming training from checkpoint" in ln]
    assert resumed and "out/checkpoint-" in resumed[-1], out[-2000:]
    step = int(resumed[-1].rsplit("checkpoint-", 1)[1])
    assert 10 <= step < steps and j["results"]["requeues"] >= 1
    assert j["progress"]["step"] == steps and 0 <= j["results"]["f1"] <= 100
    assert (
        json.loads((folder / "work" / "out" / "trainer_state.json").read_text())["global_step"]
        == steps
    )
    # found from another folder, with the default registry
    (there,) = json.loads(run_cli("status", "--json", job_id, env=home, cwd="/").stdout)
    assert there["state"] == "COMPLETED" and there["name"] == "run_qa"


SLOW_SAVER = '''"""Saves as the HF Trainer does (checkpoint-N/: the weights first, trainer_state.json last) and resumes as
run_qa.py does: transformers' get_last_checkpoint(output_dir), then that checkpoint's trainer_state.json. Its
first attempt saves slowly (a large model on a busy file server)."""
import json, os, sys, time
from transformers.trainer_utils import get_last_checkpoint

out, total = sys.argv[1], int(sys.argv[2])
slow = float(sys.argv[3]) if os.environ.get("HPCQA_ATTEMPT", "0") == "0" else 0.0
if os.environ["RANK"] != "0":   # rank 0 saves, as the Trainer's
    while not os.path.exists(os.path.join(out, f"checkpoint-{total}", "trainer_state.json")):
        time.sleep(0.2)
    sys.exit(0)
os.makedirs(out, exist_ok=True)
step, last = 0, get_last_checkpoint(out)
if last:
    with open(os.path.join(last, "trainer_state.json")) as f:
        step = json.load(f)["global_step"]
    print(f"Resuming training from checkpoint {last}", flush=True)
while step < total:
    step += 1
    ckpt = os.path.join(out, f"checkpoint-{step}")
    os.makedirs(ckpt, exist_ok=True)
    with open(os.path.join(ckpt, "model.safetensors"), "wb") as f:
        f.write(os.urandom(4096))
    time.sleep(slow)
    with open(os.path.join(ckpt, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "max_steps": total, "log_history": []}, f)
'''


def test_a_preemption_during_a_programs_save_resumes_from_the_save_before(slurm, tmp_path):
    """The fault CI met with run_qa.py: the preemption lands while the Trainer writes checkpoint-N (the folder is
    there, trainer_state.json not yet), and the requeued program's own resume picks that folder (the highest
    number) and dies on the missing file. Before the program starts again, hpcqa moves the cut-off folder aside
    (kept) and says so; the program resumes from the checkpoint before it and the job completes. The program
    makes the window wide (its first save is slow); the preemption is Slurm's."""
    work = tmp_path / "prog"
    work.mkdir()
    (work / "saver.py").write_text(SLOW_SAVER)
    home = {**slurm, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    r = run_cli(
        "submit",
        str(ROOT / "configs/quickstart.toml"),
        "--set",
        "cluster.executor=slurm",
        "--set",
        f"job.output_dir={tmp_path / 'logs'}",
        "--set",
        "cluster.time_limit_min=10",
        "--no-wait",
        "--",
        "python",
        "saver.py",
        "out",
        "3",
        "12",
        env=home,
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    folder = Path(wait_state(home, job_id, {"RUNNING"})["folder"])
    out = folder / "work" / "out"
    end = time.time() + 120
    while time.time() < end and not (
        (out / "checkpoint-1" / "trainer_state.json").exists() and (out / "checkpoint-2").is_dir()
    ):
        time.sleep(0.2)
    assert not (out / "checkpoint-2" / "trainer_state.json").exists(), (
        "the save of checkpoint-2 was not slow"
    )
    _preemptor(home)
    _start_requeued_now(home, job_id, timeout=240)
    j = wait_state(home, job_id, {"COMPLETED", "FAILED"}, timeout=300)
    log = (folder / f"{job_id}_0_log.out").read_text(errors="replace")
    err = "".join(p.read_text(errors="replace") for p in sorted(folder.glob(f"{job_id}_*_log.err")))
    assert j["state"] == "COMPLETED", log[-1500:] + err[-2500:]
    assert "Resuming training from checkpoint out/checkpoint-1" in log, log[-1500:]
    aside = folder / "work" / "out.set-aside" / "checkpoint-2.attempt-1"
    assert (aside / "model.safetensors").is_file() and not (
        aside / "trainer_state.json"
    ).exists()  # kept
    assert err.count("checkpoint out/checkpoint-2 set aside (no trainer_state.json") == 1, err[
        -2500:
    ]  # one rank
    assert json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["global_step"] == 3
    text = " ".join(run_cli("status", job_id, env=home).stdout.split())
    assert "out/checkpoint-2 set aside" in text, text
