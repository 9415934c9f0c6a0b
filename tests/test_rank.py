import json
import os
import subprocess
import sys

import pytest

from hpcqa.core import config, plan
from hpcqa.core.topology import Cpu
from hpcqa.errors import HpcqaError
from hpcqa.rank import wrapper as rank
from tests.conftest import ROOT

TWO = [Cpu(0, 0, 0), Cpu(1, 0, 1)]


def quick_plan(*overrides):
    cfg = config.load(ROOT / "configs/quickstart.toml", list(overrides))
    return plan.build_plan(cfg, plan.HostProbe())


def local_env(rank_, n=2, job="4321"):
    return {
        "SUBMITIT_LOCAL_GLOBALID": str(rank_),
        "SUBMITIT_LOCAL_LOCALID": str(rank_),
        "SUBMITIT_LOCAL_NTASKS": str(n),
        "SUBMITIT_LOCAL_JOB_ID": job,
        "PATH": "/usr/bin",
    }


def test_maps_env_and_binds_as_planned():
    p = quick_plan()
    env, cpus, warnings = rank.rank_environment(p, local_env(1), TWO, "lap")
    assert cpus == [1] and not warnings
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2"
    assert (
        env["MASTER_ADDR"] == "127.0.0.1"
        and env["OMP_NUM_THREADS"] == "1"
        and env["OMP_PLACES"] == "{1}"
    )
    assert env["HPCQA_BOUND_CPUS"] == "1" and env["PATH"] == "/usr/bin"


def test_adjusts_when_the_node_lacks_the_planned_cpus():
    p = quick_plan(
        "cluster.cores_per_socket=8", "launch.ranks_per_socket=2"
    )  # 2 ranks of 4 cores; the node has 2
    env, cpus, warnings = rank.rank_environment(p, local_env(0), TWO, "lap")
    assert cpus == [0] and env["OMP_NUM_THREADS"] == "1"
    assert (
        warnings
        and "re-derived" in warnings[0]
        and "planned r0 0-3; r1 4-7 | this node r0 0" in warnings[0]
    )


def test_world_size_mismatch_is_refused():
    with pytest.raises(HpcqaError) as e:
        rank.rank_environment(quick_plan(), local_env(0, n=3), TWO, "lap")
    assert "plan has 2" in e.value.render()


def test_missing_preload_is_dropped(tmp_path):
    p = (
        quick_plan()
    )  # LD_PRELOAD from the job's environment (launch.env may not set it: hpcqa manages it)
    env, _, warnings = rank.rank_environment(
        p, {**local_env(0), "LD_PRELOAD": f"/nonexistent/libx.so:{sys.executable}"}, TWO, "lap"
    )
    assert env["LD_PRELOAD"] == sys.executable and "not found" in warnings[0]


def test_fixed_master_port():
    env, _, _ = rank.rank_environment(
        quick_plan("launch.master_port=23456"), local_env(0), TWO, "lap"
    )
    assert env["MASTER_PORT"] == "23456"


@pytest.mark.process
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to see a binding")
def test_real_exec_binds_and_exports(tmp_path):
    p = tmp_path / "plan.json"
    p.write_text(quick_plan().dumps())
    probe = (
        "import os, json; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
        "'omp': os.environ['OMP_NUM_THREADS'], 'rank': os.environ['RANK'], "
        "'port': os.environ['MASTER_PORT'], 'digest': os.environ['HPCQA_PLAN_DIGEST'], "
        "'plan': os.environ['HPCQA_PLAN']}))"
    )
    out = []
    for r in (0, 1):
        env = {**os.environ, **local_env(r)}
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "hpcqa.rank",
                "--plan",
                str(p),
                "--",
                sys.executable,
                "-c",
                probe,
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert res.returncode == 0, res.stderr
        out.append(json.loads(res.stdout))
    assert out[0]["cpus"] == [0] and out[1]["cpus"] == [1]
    assert out[0]["omp"] == "1" and out[1]["rank"] == "1" and out[0]["port"] == out[1]["port"]
    assert out[0]["digest"] == out[1]["digest"] == quick_plan().digest and out[0]["plan"] == str(p)


def test_plan_round_trips_typed_and_deep_frozen():
    p = quick_plan('launch.env.X="1"')
    back = plan.LaunchPlan.loads(p.dumps())
    assert back == p and back.digest == p.digest and back.config.launch.env["X"] == "1"
    for mapping in (
        back.ranks[0].env,
        back.local_ranks[0].env,
        back.config.launch.env,
        back.deferred_env,
    ):
        with pytest.raises(TypeError):
            mapping["X"] = "2"
    assert isinstance(back.config.cluster.sbatch_extra, tuple)


@pytest.mark.process
def test_wrapper_bad_plan_exits_2(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "hpcqa.rank", "--plan", str(tmp_path / "none.json"), "--", "true"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert (
        res.returncode == 2 and "cannot read plan" in res.stderr and "Traceback" not in res.stderr
    )


@pytest.mark.torch
def test_a_rank_honours_the_planned_backend_and_never_redecides():
    from hpcqa.errors import RankError
    from hpcqa.rank.train.facts import verify_backend

    def no_ccl(name):
        raise ImportError(f"No module named {name!r}")

    gloo = plan.resolve_backend("auto", ccl_bindings=False)
    assert verify_backend(gloo, importer=no_ccl).startswith("gloo as planned")
    # the plan chose gloo where the submit host had no ccl: a compute node with ccl still runs gloo
    assert verify_backend(gloo, importer=lambda name: object()).startswith("gloo as planned")
    ccl = plan.resolve_backend("auto", ccl_bindings=True)
    assert "imported" in verify_backend(ccl, importer=lambda name: object())
    with pytest.raises(RankError) as e:
        verify_backend(ccl, importer=no_ccl)
    assert (
        e.value.exit_code == 2
        and "does not import" in e.value.message
        and "ddp_backend" in e.value.hint
    )


@pytest.mark.torch
def test_trainer_refuses_a_plan_other_than_the_one_the_wrapper_applied():
    from hpcqa.errors import RankError
    from hpcqa.rank.train.facts import verify_plan

    p = quick_plan()
    verify_plan(p, {"HPCQA_PLAN_DIGEST": p.digest})
    verify_plan(p, {})  # started without the wrapper (tests, by hand): nothing to compare
    with pytest.raises(RankError):
        verify_plan(p, {"HPCQA_PLAN_DIGEST": quick_plan("train.seed=7").digest})


def test_master_interface_first_node_publishes_other_nodes_read(tmp_path):
    from hpcqa.record.jobdir import JobDir

    p = quick_plan("launch.master_interface=ib0")
    jd = JobDir(tmp_path)
    addrs = {"node1": "10.0.0.1", "node2": "10.0.0.2"}
    first = rank.master_address(
        p, {"NODE_RANK": "0", "LOCAL_RANK": "0"}, jd, "node1", lambda i: addrs["node1"]
    )
    other = rank.master_address(
        p, {"NODE_RANK": "1", "LOCAL_RANK": "0"}, jd, "node2", lambda i: addrs["node2"]
    )
    assert first == other == "10.0.0.1"
    # a requeued attempt never reads the address of an earlier one
    with pytest.raises(HpcqaError, match="did not publish"):
        rank.master_address(
            p,
            {"NODE_RANK": "1", "SLURM_RESTART_COUNT": "1"},
            jd,
            "node2",
            lambda i: "10.0.0.2",
            wait_s=0.3,
        )


def test_a_node_waiting_for_the_first_hosts_address_records_when_it_gives_up(tmp_path):
    """The first phase a rank writes: on a node after the first with launch.master_interface, waiting for the first
    host's address with train.ddp_timeout_s in the record (status warns at half of a short one); else starting."""
    from hpcqa.rank.phase import Phases
    from hpcqa.record.jobdir import JobDir

    p = quick_plan("launch.master_interface=ib0", "train.ddp_timeout_s=40")
    jd = JobDir(tmp_path)
    waiting = Phases(jd, 2)
    assert rank.enter_first_phase(waiting, p, {"NODE_RANK": "1"}) is True
    (rec,) = jd.read_phases(3)  # rank 2's, the one written
    assert (rec.phase, rec.detail, rec.timeout_s) == ("address", "of ib0", 40), rec
    for plan_, env in ((p, {"NODE_RANK": "0"}), (quick_plan(), {"NODE_RANK": "1"})):
        first = Phases(None, 0)
        assert rank.enter_first_phase(first, plan_, env) is False
        assert first.record["phase"] == "starting" and "timeout_s" not in first.record


def test_master_interface_missing_on_a_node_names_it():
    p = quick_plan("launch.master_interface=ib0")
    with pytest.raises(HpcqaError) as e:
        rank.master_address(p, {"NODE_RANK": "1"}, None, "node7", lambda i: None)
    text = e.value.render()
    assert "'ib0'" in text and "node7" in text and "launch.master_interface" in text
    assert (
        rank.master_address(quick_plan(), {}, None, "x") is None
    )  # unset: the first host's name stays


def test_master_interface_reads_a_real_interface():
    from hpcqa.rank import netif

    assert (
        netif.ipv4("lo") == "127.0.0.1"
        and "lo" in netif.names()
        and netif.ipv4("no-such-if0") is None
    )
    p = quick_plan("launch.master_interface=lo")
    assert (
        rank.master_address(p, {"NODE_RANK": "0", "LOCAL_RANK": "1"}, None, "here") == "127.0.0.1"
    )


@pytest.mark.process
@pytest.mark.parametrize("tail,code", [("", 0), ("raise RuntimeError('after')", 1)])
def test_a_finished_rank_leaves_without_teardown_unless_an_error_follows(tail, code):
    """exit_without_teardown: status 0 through os._exit once the work is done (gloo's threads can abort the
    interpreter's teardown); an exception that reaches the top after it keeps its own exit."""
    prog = (
        "import threading, time\nfrom hpcqa.rank.exits import exit_without_teardown\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        f"exit_without_teardown()\nprint('done', flush=True)\n{tail}\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", prog], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert r.returncode == code and "done" in r.stdout, r.stderr


@pytest.mark.torch
def test_a_notice_arriving_during_the_agreement_is_agreed_on_at_the_next_call(monkeypatch):
    """The handler of a SIGTERM can run while the rank waits in the all-reduce of STOP.agreed (during evaluation, where
    it agrees after every batch, that is most of the time): that call answers with the reduced flag (the peer had no
    notice, so both say no), and the notice is not overwritten by it -- the next call agrees on it, on every rank."""
    import signal

    import torch
    import torch.distributed as dist

    from hpcqa.rank.train.stop import _Stop

    stop = _Stop()
    seen = []

    def all_reduce(
        t, op=None
    ):  # the peer's flag is 0; this rank's notice lands inside the collective, once
        seen.append(int(t.item()))
        if len(seen) == 1:
            stop._raise_flag(signal.SIGTERM, None)
        t.copy_(torch.tensor([max(int(t.item()), 0)], dtype=torch.int32))

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    assert stop.agreed(2) is False  # what the peer answers too: the reduced flag was 0
    assert stop.agreed(2) is True and seen == [0, stop.TERM] and stop.name == "SIGTERM"


@pytest.mark.parametrize(
    "results,attempt,expected",
    [
        ({"status": "COMPLETED", "attempt": 1}, 2, 1),  # the built-in trainer's results
        ({"task": "command", "exit_code": 0, "requeues": 0}, 1, 0),  # a user command's
        ({"status": "COMPLETED", "attempt": 1}, 1, None),  # this attempt's own (a re-run rank)
        ({"status": "FAILED", "attempt": 0}, 1, None),
        ({"task": "command", "exit_code": 3, "requeues": 0}, 1, None),
        ({"status": "COMPLETED", "attempt": True}, 2, None),  # damaged: not a count
        ({"status": "COMPLETED", "attempt": "0"}, 2, None),
        (["COMPLETED"], 2, None),
    ],
)
def test_a_start_after_the_job_completed_is_recognised_from_its_results(
    tmp_path, results, attempt, expected
):
    """Slurm 24.11 requeues a preempted job once more when its next attempt completes: that start finds results.json
    of an earlier attempt that finished, and runs nothing (RankJob / python -m hpcqa.rank.train)."""
    from hpcqa.record.jobdir import JobDir

    jd = JobDir(tmp_path)
    assert jd.completed_before(attempt) is None  # no results yet
    jd.results.write_text(json.dumps(results))
    assert jd.completed_before(attempt) == expected


def test_only_a_slurm_start_is_skipped_after_completion(tmp_path, monkeypatch):
    from hpcqa.rank.job import already_completed
    from hpcqa.record.jobdir import JobDir

    jd = JobDir(tmp_path)
    jd.results.write_text(json.dumps({"status": "COMPLETED", "attempt": 0}))
    for k in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "HPCQA_ATTEMPT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert already_completed(jd) is False  # not under Slurm
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert already_completed(jd) is True
    monkeypatch.setenv("HPCQA_ATTEMPT", "1")  # a pod script's count: never skipped
    assert already_completed(jd) is False


@pytest.mark.process
def test_a_pod_rank_that_lost_its_peer_without_a_record_is_retryable_by_its_log(tmp_path):
    """A rank that dies of a peer's loss outside the trainer's handler leaves no failure record; the error its log
    ends with (torch's "[rank0]: " prefix and all) still makes the pod's exit the retryable 200, while its own
    error keeps its code (the job fails)."""
    import sys

    from hpcqa.core.kinds import PodExit, Requeue
    from hpcqa.rank.wrapper import supervise
    from hpcqa.record.jobdir import JobDir

    jd = JobDir(tmp_path)
    log = tmp_path / "rank-0.log"
    for line, want in (
        (
            "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
            "closed by peer [10.0.0.7]:29500",
            int(PodExit.LOST_PEER),
        ),
        ("[rank0]: KeyError: 'answers'", 1),
    ):
        log.write_text(
            'step 4\nTraceback (most recent call last):\n  File "x.py", line 1\n' + line + "\n"
        )
        code = supervise(
            [sys.executable, "-c", "raise SystemExit(1)"], dict(os.environ), 0, jd, Requeue.POD
        )
        assert code == want, line


@pytest.mark.process
def test_the_trainer_is_imported_with_the_collector_paused_then_frozen():
    """A training rank imports torch and transformers through load_trainer: the cyclic collector is paused for the
    import (benchmarks/import_bench.py: 1.33x less CPU) and on again after it, with what the import made frozen
    out of later collections. A collector left off would leak every cycle the training makes. A bound rank (as every
    planned rank is) first imports torch to widen its main thread: that import is inside the pause too (it once was
    not, and no collection ran less for it)."""
    code = (
        "import gc, json; from hpcqa.rank.job import load_trainer; from hpcqa.rank import binding; "
        "ran = lambda: sum(s['collections'] for s in gc.get_stats()); before = ran(); run = load_trainer(); "
        "print(json.dumps({'on': gc.isenabled(), 'frozen': gc.get_freeze_count(), 'name': run.__name__, "
        "'torch': 'torch' in __import__('sys').modules, 'collections': ran() - before, "
        "'widened': binding.WIDENED}))"
    )
    import os

    bound = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "HPCQA_BOUND_CPUS": bound, "HPCQA_KEEP_OPENMP_BINDING": ""},
    )
    got = json.loads(r.stdout.splitlines()[-1])
    assert got == {**got, "on": True, "name": "run_rank", "torch": True, "collections": 0}, got
    assert got["frozen"] > 100_000 and got["widened"].startswith("OpenMP had it on"), got


SQUEUE_STANDIN = """#!/bin/sh
# squeue -h -j ID -o %T, as Slurm answers it: the state the test wrote, or no answer at all
[ -f "$STATE_FILE" ] || exit 1
cat "$STATE_FILE"
"""


@pytest.mark.process
def test_after_its_checkpoint_a_slurm_rank_leaves_only_once_slurm_has_ended_the_job(tmp_path):
    """wait_for_slurms_end, the rule a rank follows after its SIGTERM checkpoint (the real preemptions are in
    tests/test_slurm_preempt.py): it asks squeue at once and at each later SIGTERM. No answer and RUNNING (the grace
    time: a second notice) keep it waiting; once Slurm shows the job otherwise (the grace time's end) it leaves at
    once, by SIGTERM, saying so -- not KillWait later by Slurm's SIGKILL."""
    import signal
    import time

    (tmp_path / "squeue").write_text(SQUEUE_STANDIN)
    (tmp_path / "squeue").chmod(0o755)
    state = tmp_path / "state"
    env = {
        **os.environ,
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "77",
        "STATE_FILE": str(state),
    }
    prog = (
        "import sys\nfrom hpcqa.rank.exits import wait_for_slurms_end\n"
        "print('waiting', flush=True)\n"
        "wait_for_slurms_end(lambda line: print(line, file=sys.stderr, flush=True), 60)\n"
        "print('waited it out', flush=True)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", prog],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert p.stdout.readline() == "waiting\n"
        for answer in (None, "RUNNING\n"):  # squeue has no answer; then the job still runs
            if answer:
                state.write_text(answer)
            time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert p.poll() is None, p.communicate()
        state.write_text("COMPLETING\n")  # the grace time ended: Slurm is ending the job
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGTERM and "waited it out" not in out, err
    assert "Slurm shows the job COMPLETING: this rank leaves now" in err


JOB_LINE = (
    "JobId=77 JobName=quickstart UserId=u(1) JobState=RUNNING Reason=None Requeue={requeue} Restarts=0 "
    "PreemptEligibleTime=2026-11-29T03:04:00 PreemptTime={preempt} Partition={partition} Command=/a b/c.sh"
)
CONFIG = "PreemptExemptTime       = 00:00:00\nPreemptMode             = REQUEUE\nPreemptType             = {kind}\n"
PARTITION = "PartitionName=low GraceTime=5 Hidden=NO PreemptMode={mode} State=UP TotalCPUs=2"


@pytest.mark.parametrize(
    "preempt, requeue, kind, mode, partition, requeues",
    [
        ("2026-11-29T03:04:20", "1", "preempt/partition_prio", "REQUEUE", "low", True),
        ("2026-11-29T03:04:20", "1", "preempt/partition_prio", "GANG,REQUEUE", "low,high", True),
        ("None", "1", "preempt/partition_prio", "REQUEUE", "low", False),  # scancel, time limit
        (
            "2026-11-29T03:04:20",
            "0",
            "preempt/partition_prio",
            "REQUEUE",
            "low",
            False,
        ),  # --no-requeue
        ("2026-11-29T03:04:20", "1", "preempt/partition_prio", "CANCEL", "low", False),
        (
            "2026-11-29T03:04:20",
            "1",
            "preempt/qos",
            "REQUEUE",
            "low",
            False,
        ),  # the preemptor's QOS decides
    ],
)
def test_a_rank_requeues_a_preemption_only_when_slurm_would(
    monkeypatch, preempt, requeue, kind, mode, partition, requeues
):
    """preempted_to_requeue reads what Slurm shows (the real preemptions, REQUEUE and CANCEL, are in
    tests/test_slurm_preempt.py): a PreemptTime, Requeue=1, partition_prio and the job's partition's mode."""
    from hpcqa.executors.slurm import node as slurm_node

    asked = []

    def answer(argv):
        asked.append(argv)
        if argv[:3] == ["scontrol", "show", "job"]:
            return JOB_LINE.format(requeue=requeue, preempt=preempt, partition=partition)
        if argv[:3] == ["scontrol", "show", "config"]:
            return CONFIG.format(kind=kind)
        if argv[:3] == ["scontrol", "show", "partition"]:
            assert argv[-1] == "low"
            return PARTITION.format(mode=mode)
        raise AssertionError(argv)

    monkeypatch.setattr(slurm_node, "_slurm_words", answer)
    why = slurm_node.preempted_to_requeue("77")
    assert bool(why) == requeues, (why, asked)
    if requeues:
        assert why.startswith(f"preempted at {preempt}, partition low: PreemptMode={mode}")
    monkeypatch.setattr(
        slurm_node, "_slurm_words", lambda argv: None
    )  # Slurm not answering: wait as before
    assert slurm_node.preempted_to_requeue("77") is None


def test_rank_0_requeues_only_once_every_rank_of_this_attempt_has_saved(tmp_path):
    from hpcqa.rank.exits import all_ranks_stopped
    from hpcqa.record.jobdir import JobDir, write_json

    jd = JobDir(tmp_path)
    jd.ranks.mkdir()
    write_json(jd.rank_report(0), {"rank": 0, "notice": {"attempt": 1}})
    assert not all_ranks_stopped(jd, 2, 1)  # rank 1 has not reported
    write_json(jd.rank_report(1), {"rank": 1, "notice": {"attempt": 0}})
    assert not all_ranks_stopped(jd, 2, 1)  # its report is the attempt before's
    jd.rank_report(1).write_text("[1, 2]")
    assert not all_ranks_stopped(jd, 2, 1)  # damaged
    for planted in (True, 1.0, "1"):  # equal to 1 to Python, not an attempt a rank writes
        write_json(jd.rank_report(1), {"rank": 1, "notice": {"attempt": planted}})
        assert not all_ranks_stopped(jd, 2, 1), planted
    write_json(jd.rank_report(1), {"rank": 0, "notice": {"attempt": 1}})
    assert not all_ranks_stopped(jd, 2, 1)  # rank 0's report where rank 1's goes: not rank 1's
    write_json(jd.rank_report(1), {"rank": 1, "notice": {"attempt": 1}})
    assert all_ranks_stopped(jd, 2, 1)


def _peer_report(jd, k, attempt=0, finished=True, notice=None):
    from hpcqa.record.jobdir import write_json

    jd.ranks.mkdir(parents=True, exist_ok=True)
    report = {"rank": k, "attempt": attempt, "world_size": 3}
    if finished:
        report.update(exit_code=0, finished=1.0)
    if notice is not None:
        report["notice"] = notice
    write_json(jd.rank_report(k), report)


NAMES = frozenset({"SIGUSR2", "SIGTERM"})


def test_rank_0_takes_a_notice_only_another_rank_heard_from_its_report(tmp_path):
    """A program whose ranks agree to stop ends on rank 0 with 0 when Slurm's notice reached another node first
    (seen on a 2-node rendered script: rank 0 wrote complete results, the job was never requeued). Rank 0 reads the
    other ranks' reports of this attempt once they have finished: a notice one of them recorded is rank 0's."""
    import signal
    import threading
    import time

    from hpcqa.rank.command import _peers_notice
    from hpcqa.record.jobdir import JobDir

    jd = JobDir(tmp_path / "job")
    _peer_report(jd, 1)
    _peer_report(jd, 2, notice={"signal": "SIGUSR2", "attempt": 0})
    assert _peers_notice(jd, 3, 0, NAMES) == signal.SIGUSR2
    # every rank finished without one: done, at once (no wait)
    _peer_report(jd, 2)
    t = time.monotonic()
    assert _peers_notice(jd, 3, 0, NAMES, wait_s=30) is None and time.monotonic() - t < 5
    # what a report cannot make a notice: another attempt's, a signal that is no notice, a bool attempt, a non-object
    for bad in (
        {"signal": "SIGUSR2", "attempt": 1},
        {"signal": "SIGKILL", "attempt": 0},
        {"signal": "SIGUSR2", "attempt": False},
        ["SIGUSR2", 0],
        {"signal": "__class__", "attempt": 0},
    ):
        _peer_report(jd, 2, notice=bad)
        assert _peers_notice(jd, 3, 0, NAMES, wait_s=0.2) is None, bad
    # a report of an earlier attempt is not this one's: waited for, then no notice
    _peer_report(jd, 2, attempt=1, notice={"signal": "SIGTERM", "attempt": 1})
    assert _peers_notice(jd, 3, 2, NAMES, wait_s=0.3) is None
    # a rank still running is waited for, and its notice taken when its report says it finished
    _peer_report(jd, 2, finished=False)
    later = threading.Timer(
        0.5, _peer_report, (jd, 2), {"notice": {"signal": "SIGTERM", "attempt": 0}}
    )
    later.start()
    try:
        assert _peers_notice(jd, 3, 0, NAMES, wait_s=20) == signal.SIGTERM
    finally:
        later.join()


@pytest.mark.process
def test_a_notice_after_the_rank_decided_is_ignored_not_fatal_at_exit():
    """Python puts a handler back to the default as the interpreter exits: a notice reaching the node late (after
    the rank decided how its program ended) killed the rank then. ignore_at_exit, in a process of its own (an
    ignored signal is inherited by every process started after it, as a test worker's children would be)."""
    code = (
        "import os, signal; from hpcqa.rank.exits import ignore_at_exit; "
        "signal.signal(signal.SIGUSR2, lambda *a: None); ignore_at_exit([signal.SIGUSR2, signal.SIGTERM]); "
        "assert signal.getsignal(signal.SIGUSR2) == signal.getsignal(signal.SIGTERM) == signal.SIG_IGN; "
        "os.kill(os.getpid(), signal.SIGUSR2); os.kill(os.getpid(), signal.SIGTERM); print('alive')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout == "alive\n", r.stderr
    from hpcqa.rank.command import _Notices

    assert _Notices("USR2").names() == {"SIGUSR2", "SIGTERM"}
