"""A search's trial preempted for real (a 1-node Slurm with partitions low and high, PreemptMode=REQUEUE, as
tests/test_slurm_preempt.py runs it): a real job in the high partition takes the node while trial 0 trains, Slurm
requeues the trial's array task, and the requeued run goes on with the SAME trial -- its checkpoint, its study
trial (one, COMPLETE, with reports from both runs) -- while the batch's follow-up job (afterany on the array) waits
for the requeued run to end before it tells the study and submits the next batch. Nothing sends a signal by hand."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests import slurm_cluster
from tests.conftest import run_cli
from tests.test_search_slurm import wait_log, wait_trials
from tests.test_slurm import ONE_PER_NODE, TINY, _start_requeued_now, wait_state
from tests.test_slurm_preempt import GRACE_S, _a_second_requeue_runs_nothing, _preemptor

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

EVAL_STEPS = 20
# random, 2 trials, one per batch (a batch of one trial is a plain job, not an array): trial 0 is preempted
# mid-training; trial 1 is the next batch, which the follow-up submits once trial 0 has ended. One rank of the tiny
# model trains ~15 steps a second here with these evaluations (120 steps took 8 s on an idle machine); the
# preemptor is queued once trial 0 has reported its first evaluation (step 20), and the notice lands a scheduling
# pass later (~step 40 idle; under CI's load later, as in tests/test_slurm_preempt.py's PREEMPTED_STEPS): 300
# leaves it ~260 steps.
STEPS = 300
SETS = (
    "cluster.exclusive=false",
    'train.eval_strategy="steps"',
    f"train.eval_steps={EVAL_STEPS}",
    "train.save_steps=100000",  # the only checkpoint is the one the preemption notice makes
    "train.per_device_train_batch_size=8",
    f"train.max_steps={STEPS}",
    'sweep.strategy="random"',
    "sweep.trials=2",
    "sweep.parallelism=1",
    "sweep.seed=6",
    'sweep.pruner="none"',
    "sweep.train.learning_rate=[1e-3, 5e-4]",
)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from slurm_cluster.cluster(
        tmp_path_factory, nodes=1, accounting=True, preempt="requeue", grace_time=GRACE_S
    )


def _submit(env: dict, out: Path) -> subprocess.CompletedProcess:
    a = ["submit", "configs/quickstart.toml", *TINY, *ONE_PER_NODE]
    a += ["--set", f"job.output_dir={json.dumps(str(out))}"]
    for s in SETS:
        a += ["--set", s]
    return run_cli(*a, env=env)


def _reports(journal: Path, number: int) -> dict[str, float]:
    """Trial `number`'s reported evaluations (step -> metric), as the study holds them now."""
    from hpcqa.record import study

    if not journal.exists():
        return {}
    trials = study.dump("quickstart", str(journal)).get("trials", [])
    return next((t["reports"] for t in trials if t["number"] == number), {})


def _first_report(journal: Path, number: int, timeout: float = 240) -> dict[str, float]:
    end = time.time() + timeout
    while time.time() < end:
        got = _reports(journal, number)
        if got:
            return got
        time.sleep(1)
    raise AssertionError(f"trial {number} reported no evaluation to {journal}")


def _trial_job(env: dict, sid: str) -> str:
    """The job of the search's first batch: its one trial's (a plain job: the sweep id itself)."""
    jobs = slurm_cluster.job_states(env, sid)
    assert list(jobs) == [sid], jobs
    return sid


def _ask(env: dict, *argv: str) -> str:
    r = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env, "SLURM_TIME_FORMAT": "%s"},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _runs(env: dict, job: str) -> list[tuple[str, int, int]]:
    """Every run of a job as accounting recorded it (sacct -D: a requeued job's earlier runs too): (state, start,
    end), oldest first."""
    out = _ask(env, "sacct", "-D", "-X", "-n", "-P", "-j", job, "-o", "State,Start,End")
    rows = [ln.split("|") for ln in out.splitlines() if ln.strip()]
    return [
        (s.split()[0], int(a) if a.isdigit() else 0, int(b) if b.isdigit() else 0)
        for s, a, b in rows
    ]


@slurm_cluster.EACH_RELEASE
def test_a_preempted_trial_is_requeued_and_continues_its_trial(slurm, tmp_path):
    got = _submit(slurm, tmp_path)
    assert got.returncode == 0, got.stderr
    sid = got.stdout.strip()
    follow = re.search(r"follow-up job (\d+) tells the study", got.stderr)
    assert follow, got.stderr
    follow_id = follow.group(1)
    job = _trial_job(slurm, sid)
    folder = Path(wait_state(slurm, job, {"RUNNING"}, timeout=240)["folder"])
    journal = tmp_path / "quickstart" / "search" / "study.journal"
    # trial 0 has evaluated (and told its study) before the preemption
    assert _first_report(journal, 0)
    _preemptor(slurm)
    # Slurm requeues the trial's job (PENDING, BeginTime); once the node is idle it is started now, not at its
    # begin time (as tests/test_slurm_preempt.py does)
    _start_requeued_now(slurm, job, timeout=240)
    # the requeued trial runs again: the batch's follow-up still waits for it (afterany did not fire on the requeue)
    waits = _ask(slurm, "squeue", "-h", "-j", follow_id, "-o", "%T %r").split()
    assert waits == ["PENDING", "Dependency"], waits
    j = wait_state(slurm, job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=480)
    assert j["state"] == "COMPLETED", j
    res = json.loads((folder / "results.json").read_text())
    assert res["global_steps"] == STEPS and res["requeues"] == 1, (
        f"no preemption before step {STEPS}: notices {res.get('notices')}"
    )
    _a_second_requeue_runs_nothing(folder / f"{job}_0_log.err")
    (notice, *_) = res["notices"]
    step = notice["step"]
    # the requeued run resumed from the notice's checkpoint, in the same folder, and finished the same trial
    assert notice["signal"] == "SIGTERM" and res["resumed_from_step"] == step
    assert res["trial"]["number"] == 0 and res["trial"]["state"] == "COMPLETED", res["trial"]
    assert j["attempts"].startswith("requeued 1x"), j["attempts"]
    # accounting: the same job id, an earlier run ended by the preemption, the last one COMPLETED
    runs = _runs(slurm, job)
    assert (
        len(runs) >= 2 and runs[0][0] in ("PREEMPTED", "REQUEUED") and runs[-1][0] == "COMPLETED"
    ), runs
    _the_search_goes_on(slurm, tmp_path, sid, follow_id, runs[-1][2], step)


def _the_search_goes_on(
    slurm, tmp_path, sid: str, follow_id: str, trial_end: int, step: int
) -> None:
    """After trial 0's requeued run: the follow-up told the study once, trial 0 COMPLETE; the next batch ran."""
    rows = wait_trials(slurm, sid, 2)
    by = {r["trial"]: r for r in rows}
    assert sorted(by) == [0, 1] and all(r["state"] == "COMPLETED" for r in rows), rows
    # no extra trial for the preempted one; batch 2 is a job of its own
    assert by[0]["id"] == sid and by[1]["id"] != sid, rows
    # the first follow-up started only once trial 0's last run had ended, and said so
    ((state, started, _),) = _runs(slurm, follow_id)
    assert state == "COMPLETED" and started >= trial_end, (state, started, trial_end)
    log = wait_log(tmp_path / "quickstart" / "search" / "follow-up.log", "2 complete")
    assert f"trial 0 (job {sid}): COMPLETE" in log and "stopped" not in log, log
    assert "2 complete" in log, log
    st = json.loads(run_cli("results", sid, "--json", env=slurm).stdout)["study"]
    assert [(t["number"], t["state"]) for t in st["trials"]] == [
        (0, "COMPLETE"),
        (1, "COMPLETE"),
    ], st
    t0 = st["trials"][0]
    steps = sorted(int(k) for k in t0["reports"])
    # reports from both runs of the trial: before the notice's step, after it, up to the last step
    assert steps[0] <= step < steps[-1] == STEPS, (step, steps)
    assert all(s % EVAL_STEPS == 0 for s in steps) and t0["value"] is not None, t0
    status = run_cli("status", sid, env={**slurm, "COLUMNS": "200"}).stdout
    assert "2 COMPLETED" in status, status
