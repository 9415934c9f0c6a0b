"""Pure parts of status: Slurm text -> states, the state table, local jobs, the registry under concurrency."""

import json
import subprocess
import sys
import time

import pytest

from hpcqa.core import eta, states
from hpcqa.executors import jobs
from hpcqa.executors.local import executor as local
from hpcqa.executors.slurm import cli as slurmcli
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import registry, status
from hpcqa.record.jobdir import JobDir
from tests.conftest import ROOT, typed_view

# recorded from the dev cluster (Slurm 22.05.8), `sacct -X -n -P --format JobID,State,ExitCode,Elapsed,NNodes,NodeList`
SACCT = """\
1|CANCELLED by 0|0:0|00:05:11|1|vm
2|COMPLETED|0:0|00:00:08|1|vm
3|FAILED|1:0|00:00:09|1|node2
12_1|RUNNING|0:0|00:00:03|1|node1
12_[2-5%2]|PENDING|0:0|00:00:00|1|None assigned
14|PREEMPTED|0:0|00:01:00|2|node[1-2]
14|PENDING|0:0|00:00:00|2|None assigned
"""
SQUEUE = "7|RUNNING|0:12|2|node[1-2]\n8_3|PENDING|0:00|1|\n9|COMPLETING|1:02|1|vm\n"

ALL_STATES = [
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "REQUEUED",
    "REQUEUE_HOLD",
    "SUSPENDED",
    "BOOT_FAIL",
    "DEADLINE",
]


def test_parse_sacct():
    recs = slurmcli.parse_sacct(SACCT)
    assert (
        recs["1"].state == "CANCELLED"
        and recs["2"].state == "COMPLETED"
        and recs["3"].exit_code == "1:0"
    )
    assert recs["12_1"].state == "RUNNING"
    assert [recs[f"12_{i}"].state for i in range(2, 6)] == ["PENDING"] * 4
    assert recs["14"].state == "PENDING"  # requeued after preemption: the last line wins


def test_parse_squeue():
    recs = slurmcli.parse_squeue(SQUEUE)
    assert (
        recs["7"].state == "RUNNING" and recs["7"].nodes == "2" and recs["8_3"].state == "PENDING"
    )


@pytest.mark.parametrize("state", ALL_STATES)
def test_every_slurm_state_is_mapped(state):
    assert state in states.STATES
    assert states.outcome(state) in {"pending", "running", "ok", "failed", "cancelled"}


def test_finished_states_are_final():
    final = {s for s in ALL_STATES if states.is_final(s)}
    assert final == {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
    assert not states.is_final("RUNNING") and not states.is_final("WHATEVER")


@pytest.mark.parametrize(
    "raw,norm",
    [
        ("CANCELLED by 1000", "CANCELLED"),
        ("RUNNING", "RUNNING"),
        ("COMPLETED+", "COMPLETED"),
        ("", "UNKNOWN"),
    ],
)
def test_normalise_state(raw, norm):
    assert slurmcli.normalise_state(raw) == norm


class FakeRunner:
    """Stands in for the scheduler in pure tests: answers from recorded text, counts calls."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        rc, out, err = self.answers[argv[0]]
        return subprocess.CompletedProcess(argv, rc, out, err)


@pytest.fixture
def fake():
    return FakeRunner


def _reg(tmp_path, ids, folder_of=lambda i: "/nonexistent", executor="slurm"):
    reg = registry.Registry(tmp_path / "r.sqlite")
    reg.add_many(
        dict(
            id=i,
            name="n",
            executor=executor,
            folder=folder_of(i),
            config={},
            source="x",
            nodes=1,
            world_size=2,
        )
        for i in ids
    )
    return reg


def test_one_sacct_call_and_final_states_are_cached(tmp_path, fake):
    f = fake({"sacct": (0, SACCT, ""), "squeue": (0, "", "")})
    reg = _reg(tmp_path, ["1", "2", "3", "12_1"])
    views, source = jobs.collect(reg, Slurm(f), all_jobs=True)
    assert source.source is states.Source.SACCT and [c[0] for c in f.calls] == ["sacct"]
    assert {v.id: v.state for v in views} == {
        "1": "CANCELLED",
        "2": "COMPLETED",
        "3": "FAILED",
        "12_1": "RUNNING",
    }
    f.calls.clear()
    jobs.collect(reg, Slurm(f), all_jobs=True)
    assert f.calls[0][-1] == "12_1"  # only the unfinished job is asked about again


def test_without_accounting_squeue_and_files_decide(tmp_path, fake):
    done = tmp_path / "done"
    (done).mkdir()
    (done / "results.json").write_text(json.dumps({"exact_match": 50.0, "f1": 60.0}))
    failed = tmp_path / "failed"
    (failed / "ranks").mkdir(parents=True)
    (failed / "ranks" / "rank-1.failed").write_text("{}")
    folders = {
        "7": str(tmp_path / "running"),
        "20": str(done),
        "21": str(failed),
        "22": str(tmp_path / "gone"),
    }
    f = fake(
        {
            "sacct": (1, "", "sacct: error: Slurm accounting storage is disabled\n"),
            "squeue": (0, SQUEUE, ""),
        }
    )
    reg = _reg(tmp_path, list(folders), folders.get)
    views, source = jobs.collect(reg, Slurm(f), all_jobs=True)
    assert source.source is states.Source.SQUEUE and [c[0] for c in f.calls] == ["sacct", "squeue"]
    got = {v.id: v.state for v in views}
    assert got == {"7": "RUNNING", "20": "COMPLETED", "21": "FAILED", "22": "FAILED"}
    assert status.progress_text(next(v for v in views if v.id == "20")) == "EM 50.0 F1 60.0"


def test_local_job_states(tmp_path):
    d = tmp_path / "j"
    (d / "ranks").mkdir(parents=True)
    local_state = lambda jid, d, pid_alive: local.local_state(jid, JobDir(d), pid_alive)  # noqa: E731
    assert local_state("123", d, pid_alive=lambda p: True) == "RUNNING"
    assert local_state("123", d, pid_alive=lambda p: False) == "FAILED"
    (d / "results.json").write_text("{}")
    assert local_state("123", d, pid_alive=lambda p: False) == "COMPLETED"
    (d / "cancelled").write_text("")
    assert local_state("123", d, pid_alive=lambda p: True) == "CANCELLED"


def test_progress_text_while_running():
    v = typed_view(
        id="1",
        name="n",
        executor="slurm",
        state="RUNNING",
        nodes=1,
        world_size=2,
        progress={"step": 30, "total_steps": 120, "loss": 1.23456, "eta_s": 95},
    )
    assert status.progress_text(v) == "30/120 loss 1.235 ETA 1:35"


def test_concurrent_submits_all_land(tmp_path):
    code = (
        "import sys; from hpcqa.record import registry; r = registry.Registry(sys.argv[1]); "
        "[r.add(id=f'{sys.argv[2]}-{i}', name='n', executor='local', folder='/x', config={}, source='s', "
        "nodes=1, world_size=1) for i in range(50)]"
    )
    db = tmp_path / "r.sqlite"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(db), str(k)], cwd=ROOT) for k in range(6)
    ]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    assert len(registry.Registry(db).jobs()) == 300


def test_status_cli_on_missing_registry_and_unknown_job(cli, tmp_path):
    r = cli("status", "--registry", str(tmp_path / "none.sqlite"))
    assert r.returncode == 0 and "no jobs" in r.stdout
    r = cli("logs", "42", "--registry", str(tmp_path / "none.sqlite"))
    assert r.returncode == 2 and "no job 42 in" in r.stderr


def test_node_fail_and_preemption_are_final_only_when_slurm_no_longer_has_the_job():
    sacct = "40|NODE_FAIL|0:0|00:01:00|2|node[1-2]\n41|NODE_FAIL|0:0|00:01:00|2|node[1-2]\n42|PREEMPTED|0:0|00:00:30|1|node1\n"
    f = FakeRunner(
        {
            "sacct": (0, sacct, ""),
            "squeue": (0, "40|PENDING|0:00|2|\n42|RUNNING|0:03|1|node1\n", ""),
        }
    )
    recs, source = Slurm(f).query(["40", "41", "42"])
    assert {i: r.state for i, r in recs.items()} == {
        "40": "PENDING",
        "41": "NODE_FAIL",
        "42": "RUNNING",
    }
    assert [c[0] for c in f.calls] == ["sacct", "squeue"]  # one extra call for the lot
    assert not states.is_final(recs["40"].state) and states.is_final(recs["41"].state)


def test_submissions_never_share_a_folder_even_when_job_ids_repeat(tmp_path):
    from hpcqa.record.jobdir import JobRoot

    root = JobRoot.of(str(tmp_path), "quickstart")
    a, b = (str(root.folder_pattern(root.new_submission())).replace("%j", "1") for _ in range(2))
    assert a != b and a.startswith(str(tmp_path / "quickstart" / "1-"))


def test_a_restarted_rank_moves_its_earlier_attempt_aside(tmp_path):
    jd = JobDir(tmp_path)
    jd.ranks.mkdir()
    jd.rank_report(1).write_text(json.dumps({"rank": 1, "attempt": 0}))
    jd.rank_failed(1).write_text(json.dumps({"rank": 1, "error": "lost its peer"}))
    assert jd.state_from_files() == "FAILED"
    jd.begin_attempt(1, 0)  # same attempt: nothing moves
    assert jd.rank_failed(1).exists()
    jd.begin_attempt(1, 1)
    assert not jd.rank_failed(1).exists() and (jd.attempt_dir(0) / "rank-1.failed").exists()
    assert jd.state_from_files() is None and jd.attempts() == [0] and jd.failed_ranks() == []


def test_attempt_folders_and_numbers_a_rank_did_not_write_are_passed_over(tmp_path):
    """ranks/ is in the job's folder, where the program runs: `attempt--1`, `attempt-x`, a non-ASCII digit, a 40-digit
    number, a file or a link of that name are not attempts (`attempt--1` was a ValueError in status, logs and cancel);
    a report whose attempt is text, a bool or a float is replaced, not compared (a TypeError at the rank's start)."""
    jd = JobDir(tmp_path)
    jd.ranks.mkdir()
    for name in (
        "attempt-2",
        "attempt--1",
        "attempt-x",
        "attempt-\u0663",
        "attempt-" + "9" * 40,
        "attempt-03",
    ):
        (jd.ranks / name).mkdir()
    (jd.ranks / "attempt-5").write_text("a file")
    (jd.ranks / "attempt-6").symlink_to("/")
    assert jd.attempts() == [2]
    for planted in ("1", True, 0.0, [0], None):
        jd.rank_report(0).write_text(json.dumps({"rank": 0, "attempt": planted}))
        jd.begin_attempt(0, 1)  # passed over: the new report replaces it
        assert jd.rank_report(0).exists() and not (jd.attempt_dir(0) / "rank-0.json").exists()
    jd.rank_report(0).write_text(json.dumps({"attempt": 0}))  # no rank: not a rank's report
    jd.begin_attempt(0, 1)
    assert not (jd.attempt_dir(0) / "rank-0.json").exists()
    jd.rank_report(0).write_text(json.dumps({"rank": 0, "attempt": 0}))
    jd.begin_attempt(0, 1)
    assert (jd.attempt_dir(0) / "rank-0.json").exists() and jd.attempts() == [0, 2]


def test_logs_start_at_the_current_attempt():
    import io

    from hpcqa.record import logtail

    def start(text, **kw):
        b = text.encode()
        return b[logtail.start_offset(io.BytesIO(b), **kw) :].decode()

    text = "warn\n[hpcqa rank 0] attempt 0 starts\nold\n[hpcqa rank 0] attempt 1 starts\nnew\n"
    assert start(text) == "[hpcqa rank 0] attempt 1 starts\nnew\n"
    assert start(text, all_attempts=True) == text
    assert (
        start("pre\n[hpcqa rank 0] attempt 0 starts\nonly\n")
        == "pre\n[hpcqa rank 0] attempt 0 starts\nonly\n"
    )
    assert (
        start(text, lines=1) == "new\n"
        and start(text, lines=99) == "[hpcqa rank 0] attempt 1 starts\nnew\n"
    )
    assert (
        start("a\nb\nc", lines=2) == "b\nc"
        and start("", lines=3) == ""
        and start("x\n", lines=5) == "x\n"
    )
    assert (
        start("[x] attempt 1 startsnot\n[x] attempt 2 starts\n")
        == "[x] attempt 1 startsnot\n[x] attempt 2 starts\n"
    )


class CountingFile:
    """A sparse file's reads, counted: what logtail holds at once and reads in all."""

    def __init__(self, f):
        self.f, self.largest, self.total = f, 0, 0

    def read(self, n=-1):
        b = self.f.read(n)
        self.largest, self.total = max(self.largest, len(b)), self.total + len(b)
        return b

    def seek(self, *a):
        return self.f.seek(*a)

    def tell(self):
        return self.f.tell()


def sparse_log(path, head: bytes, tail: bytes):
    """A 2 GiB log that takes no disk: `head`, NULs up to 2 GiB, then `tail`."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(2 << 30)
        f.seek(0, 2)
        f.write(tail)
    return path


def test_the_tail_of_a_huge_log_reads_only_its_end(tmp_path):
    """A 2 GiB log (sparse: its first 2 GiB are NULs, then two attempts and a few lines): the first byte to print is
    found from the end, one block in memory at a time, a few blocks read -- not the file."""
    from hpcqa.record import logtail

    log = sparse_log(
        tmp_path / "rank-0.log",
        b"",
        b"\n[hpcqa rank 0] attempt 0 starts\nold\n[hpcqa rank 0] attempt 1 starts\n"
        + b"".join(b"line %d\n" % i for i in range(5000)),
    )
    with open(log, "rb") as raw:
        f = CountingFile(raw)
        off = logtail.start_offset(f, lines=3)
        assert f.largest <= logtail.BLOCK + logtail.MARKER_TAIL and f.total < 8 * logtail.BLOCK
        raw.seek(off)
        assert raw.read() == b"line 4997\nline 4998\nline 4999\n"
        f = CountingFile(raw)
        off = logtail.start_offset(f)
        raw.seek(off)
        assert raw.read(32) == b"[hpcqa rank 0] attempt 1 starts\n" and f.total < 8 * logtail.BLOCK


def test_the_tail_of_a_long_attempt_or_after_a_long_attempt_reads_only_its_end(tmp_path):
    """The layouts a real 2 GiB log has: one attempt whose marker is at the top (2 GiB of steps after it), and a
    requeued job whose first attempt wrote 2 GiB before the second started. `logs -n 3` and `logs` (the current
    attempt) read a few blocks of either, not the 2 GiB between the markers or after the first (sparse files: the
    steps are NULs)."""
    from hpcqa.record import logtail

    one = sparse_log(
        tmp_path / "one.log",
        b"import warning\n[hpcqa rank 0] attempt 0 starts\n",
        b"\nstep 1\nstep 2\nstep 3\n",
    )
    two = sparse_log(
        tmp_path / "two.log",
        b"[hpcqa rank 0] attempt 0 starts\n",
        b"\n[hpcqa rank 0] attempt 1 starts\nresumed\nstep 9\n",
    )
    for log, kw, want in (
        (one, {"lines": 3}, b"step 1\nstep 2\nstep 3\n"),
        (two, {"lines": 3}, b"[hpcqa rank 0] attempt 1 starts\nresumed\nstep 9\n"),
        (two, {"lines": 2}, b"resumed\nstep 9\n"),
        (two, {}, b"[hpcqa rank 0] attempt 1 starts\nresumed\nstep 9\n"),
    ):
        with open(log, "rb") as raw:
            f = CountingFile(raw)
            off = logtail.start_offset(f, **kw)
            assert f.total < 8 * logtail.BLOCK, (log.name, kw, f.total)
            raw.seek(off)
            assert raw.read() == want, (log.name, kw)


def test_a_marker_cut_by_a_block_edge_is_found(tmp_path):
    from hpcqa.record import logtail

    for cut in range(-40, 40, 3):
        pad = logtail.BLOCK + cut
        data = (
            b"x" * 10 + b"\n[r] attempt 0 starts\n" + b"y" * pad + b"\n[r] attempt 12 starts\nz\n"
        )
        import io

        f = io.BytesIO(data)
        assert data[logtail.start_offset(f) :] == b"[r] attempt 12 starts\nz\n", cut


def test_busy_cores_policy():
    from hpcqa.errors import PlanError

    busy = {"111": {0, 1}}
    assert local.choose_cpus({2, 3}, set(range(8)), busy, 2, "refuse") == (None, "")  # no clash
    cpus, msg = local.choose_cpus({0, 1}, set(range(8)), busy, 2, "other-cores")
    assert cpus == set(range(2, 8)) and "job 111 on 0-1" in msg
    assert local.choose_cpus({0, 1}, set(range(8)), busy, 2, "wait") == (None, "wait")
    assert "OVERSUBSCRIBED" in local.choose_cpus({0, 1}, set(range(8)), busy, 2, "share")[1]
    with pytest.raises(PlanError) as e:
        local.choose_cpus({0, 1}, set(range(8)), busy, 2, "refuse")
    assert "job 111" in e.value.message and "on_busy_cores" in e.value.hint
    with pytest.raises(PlanError) as e:
        local.choose_cpus({0, 1}, {0, 1, 2}, busy, 2, "other-cores")  # 1 free CPU for 2 ranks
    assert "can't give 2 ranks" in e.value.message


def test_the_cause_is_named_before_its_consequences(tmp_path):
    jd = JobDir(tmp_path)
    jd.ranks.mkdir()
    jd.rank_failed(2).write_text(
        json.dumps(
            {
                "rank": 2,
                "host": "n2",
                "time": 10.0,
                "error": "RuntimeError: [gloo/pair.cc] Connection closed by peer",
            }
        )
    )
    jd.rank_exit(3).write_text(
        json.dumps(
            {
                "rank": 3,
                "host": "n2",
                "time": 10.001,
                "exit_code": -9,
                "error": "rank process killed by SIGKILL",
            }
        )
    )
    jd.rank_failed(0).write_text(
        json.dumps({"rank": 0, "host": "n1", "time": 10.5, "error": "ValueError: bad"})
    )
    assert [f.rank for f in jd.failed_ranks()] == [3, 0, 2]


def test_a_rank_killed_by_the_teardown_another_ranks_error_began_is_not_the_cause(tmp_path):
    """What a CI run met under load (Slurm 22.05): rank 1's program exited 5; Slurm ended the step, SIGTERM then
    SIGKILL after KillWait, and rank 0, slow to stop, was recorded killed by SIGKILL 5 s later. The detail view
    named that SIGKILL as the first failure; the cause is rank 1's exit. A hard signal recorded within a second
    of a peer's error still comes first (the OOM killer's victim is found a moment after its peers fail)."""
    jd = JobDir(tmp_path)
    jd.ranks.mkdir()
    own = {"rank": 1, "host": "node2", "time": 505.65, "error": "the command exited with code 5"}
    jd.rank_failed(1).write_text(json.dumps({**own, "exit_code": 5}))
    jd.rank_exit(1).write_text(
        json.dumps({**own, "time": 505.81, "error": "rank process exited with code 1"})
    )
    kill = {"rank": 0, "host": "node1", "exit_code": -9, "error": "rank process killed by SIGKILL"}
    jd.rank_exit(0).write_text(json.dumps({**kill, "time": 510.94}))
    first = jd.failed_ranks()[0]
    assert (first.rank, first.error) == (1, "the command exited with code 5")
    jd.rank_exit(0).write_text(
        json.dumps({**kill, "time": 506.2})
    )  # within the second: the kill was first
    assert [f.rank for f in jd.failed_ranks()] == [0, 1]


def test_a_missing_slurm_conf_fails_at_once(monkeypatch, tmp_path):
    import time

    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))
    t0 = time.monotonic()
    r = slurmcli.run_command(["sinfo", "-h"])
    assert r.returncode == 1 and "gone.conf: no such file" in r.stderr and time.monotonic() - t0 < 1
    ok, said = Slurm().ping()
    assert not ok and "SLURM_CONF" in said


def test_squeue_asks_only_for_hpcqas_jobs_and_none_left_is_not_an_error():
    """squeue -j with the ids asked about (a busy cluster's every job is not read each round); Slurm answers a -j
    of only vanished jobs with "Invalid job id specified" and exit 1: no records, not a failure."""
    import subprocess

    from hpcqa.executors.slurm.cli import Slurm, squeue_argv

    assert squeue_argv(["12", "13_4", "12"])[-2:] == ["-j", "12,13_4"]
    calls = []

    def runner(argv):
        calls.append(argv)
        if argv[0] == "sacct":
            return subprocess.CompletedProcess(argv, 1, "", "Slurm accounting storage is disabled")
        return subprocess.CompletedProcess(
            argv, 1, "", "slurm_load_jobs error: Invalid job id specified"
        )

    recs, source = Slurm(runner).query(["77"])
    assert recs == {} and source.source is states.Source.SQUEUE and calls[-1][-2:] == ["-j", "77"]


@pytest.mark.parametrize(
    "comm",
    [
        {"grad_bytes": "x", "bucket_bytes": [1]},
        {"grad_bytes": 1, "bucket_bytes": [1], "compress": "fp16", "wire_bucket_bytes": ["a"]},
    ],
)
def test_a_results_file_with_values_of_the_wrong_type_is_one_row_not_a_traceback(tmp_path, comm):
    """A hand-edited or damaged results.json in a shared job folder: `status JOB` shows what is certain (state, job,
    folder) and one row naming the file and the field, exit 0; it was a TypeError traceback (then a catch-all row
    that named no field)."""
    from tests.conftest import run_cli

    job = tmp_path / "job"
    job.mkdir()
    (job / "results.json").write_text(
        json.dumps({"status": "COMPLETED", "wall_time_s": 3.0, "comm": comm})
    )
    reg = registry.Registry(tmp_path / "r.sqlite")
    reg.add_many(
        [
            dict(
                id="7",
                name="n",
                executor="local",
                folder=str(job),
                config={},
                source="x",
                nodes=1,
                world_size=2,
            )
        ]
    )
    r = run_cli("status", "7", "--registry", str(tmp_path / "r.sqlite"), env={"COLUMNS": "200"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    text = " ".join(r.stdout.split())
    bad = "comm.grad_bytes" if comm["grad_bytes"] == "x" else "comm.wire_bucket_bytes[0]"
    assert "COMPLETED" in text and str(job) in text, text
    assert f"damaged results.json: {bad} " in text and "is not a number: not used" in text, text


def test_a_registry_row_with_terminal_control_characters_is_damaged_not_printed(tmp_path):
    """A row hpcqa did not write (another tool, an old or hand-edited registry) whose name holds an escape or OSC
    sequence or a bidi override is a damaged row -- named by its rowid -- never text sent to a terminal."""
    reg = _reg(tmp_path, ["1", "2", "3"])
    reg.db.execute("UPDATE jobs SET name = ? WHERE id = '2'", ("x\x1b]0;pwned\x07\x1b[2J",))
    reg.db.execute("UPDATE jobs SET source = ? WHERE id = '3'", ("evil\u202etxt.toml",))
    rows = reg.jobs()
    assert [r.id for r in rows] == ["1"]
    assert len(reg.damaged) == 2 and all("control character" in d for d in reg.damaged), reg.damaged
    assert not any("\x1b" in d or "\u202e" in d for d in reg.damaged)


def test_a_bidi_override_in_a_config_value_is_refused():
    from hpcqa.core import config
    from hpcqa.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs" / "quickstart.toml", ['job.output_dir="logs\u202egnp.x"'])
    assert "control character" in e.value.message and "\\u202e" in e.value.message


# ------------------------------------------------------------------------------ issue 54, item 5


def test_a_low_cpu_efficiency_on_busy_cores_blames_the_node_not_the_pinning():
    """The note for a job whose cores sat idle: when the ranks' own schedstat says they were ready to run but had no
    CPU for a fifth of their core time or more, the node was busy; otherwise the old advice (pinning, data)."""
    from hpcqa.record.jobfiles import report
    from hpcqa.record.jobfiles.fields import Damaged

    def rep(d):  # a rank's report as the job folder's reader gives it
        return report.parse({"rank": 0, **d} if isinstance(d, dict) else d)

    busy = rep({"usage": {"cpu_s": 1.0, "run_delay_s": 30.0, "wall_s": 100.0, "cpus": 1}})
    quiet = rep({"usage": {"cpu_s": 1.0, "run_delay_s": 1.0, "wall_s": 100.0, "cpus": 2}})
    assert jobs.run_queue_share([quiet, busy]) == 0.3 and jobs.run_queue_share([quiet]) == 0.005
    for junk in (
        {"usage": {"cpu_s": 1, "run_delay_s": "x", "wall_s": 1, "cpus": 1}},
        {"usage": {"cpu_s": 1, "run_delay_s": float("nan"), "wall_s": 1, "cpus": 1}},
        {"usage": {"cpu_s": 1, "run_delay_s": 1, "wall_s": 0, "cpus": 1}},
        {"usage": [1]},
        [2],
        {"usage": {"cpu_s": 1, "wall_s": 1, "cpus": 1}},
    ):
        got = rep(junk)  # damaged (not used), or a report that cannot say
        assert isinstance(got, Damaged) or jobs.run_queue_share([got]) is None, junk
    said = jobs.low_efficiency_note(0.45, 0.3)
    assert said.startswith(
        "CPU efficiency 45% (< 60%): the ranks were ready to run but waited for their cores 30%"
    )
    assert "busy node" in said and "pinning" not in said
    for share in (0.05, None):
        assert "check the pinning" in jobs.low_efficiency_note(0.45, share)


def test_run_delay_counts_the_time_another_process_had_the_core():
    """The kernel's own count, as a rank reads it: a process spinning for 1 s on a CPU that a second spinning process
    shares waits for it about half the time (more if the machine is busier; never near none)."""
    spin = "import os, time\nos.sched_setaffinity(0, {0})\nt = time.time()\nwhile time.time() - t < %s: pass\n"
    hog = subprocess.Popen([sys.executable, "-c", spin % 30])
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                spin % 1.0 + "from hpcqa.rank.binding import run_delay_s\nprint(run_delay_s())",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        hog.kill()
        hog.wait()
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) >= 0.3, r.stdout


def test_a_local_job_is_timed_from_its_files(tmp_path, fake, monkeypatch):
    """A local job has no scheduler to time it: status (its table and --json) says its ranks' wall time once it has
    results, the time since its ranks started while it runs, as sacct says a Slurm job's."""
    assert eta.sacct_clock(77.9) == "00:01:17" and eta.sacct_clock(90061) == "1-01:01:01"
    done, running = tmp_path / "101", tmp_path / "102"
    for d in (done, running):
        (d / "ranks").mkdir(parents=True)
    (done / "results.json").write_text(json.dumps({"status": "COMPLETED", "wall_time_s": 77.9}))
    started = time.time() - 65
    (running / "progress.json").write_text(json.dumps({"started": started, "step": 3}))
    folders = {"101": str(done), "102": str(running)}
    reg = _reg(tmp_path, list(folders), folders.get, executor="local")
    monkeypatch.setattr(local, "controller_alive", lambda pid, jd: pid == 102)
    views, _ = jobs.collect(reg, Slurm(fake({})), all_jobs=True)
    got = {v.id: (v.state, v.elapsed) for v in views}
    assert got["101"] == ("COMPLETED", "00:01:17"), got
    assert got["102"][0] == "RUNNING" and got["102"][1] in ("00:01:05", "00:01:06"), got
