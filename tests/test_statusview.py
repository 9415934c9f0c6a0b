"""`hpcqa status` as a user sees it on an 80-column terminal, and what it says when Slurm can't be asked."""

import io
import json
import re

import pytest
from rich.console import Console

from hpcqa.cli import statusview
from hpcqa.core import states
from hpcqa.executors import jobs
from hpcqa.executors.slurm import cli as slurmcli
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import registry, status
from hpcqa.record.jobdir import write_json
from hpcqa.record.jobfiles import failure, progress, results
from hpcqa.record.jobfiles import report as report_schema
from hpcqa.record.jobfiles.fields import Damaged
from tests.conftest import typed_view
from tests.test_status import ALL_STATES, FakeRunner, _reg

LONG = "an-uncommonly-long-job-name-for-the-quickstart-sweep-of-learning-rates"


def render(
    views, width=80, source: states.Answer = states.Answer(states.Source.SACCT), **kw
) -> str:
    con = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    statusview.print_list(con, views, source, "/some/registry.sqlite", **kw)
    return con.export_text()


def views():
    out = []
    for i, state in enumerate(ALL_STATES):
        v = typed_view(
            id=str(1000 + i),
            name=LONG if i % 2 else "quickstart",
            executor="slurm" if i % 3 else "local",
            state=state,
            nodes=2,
            world_size=4,
            elapsed="01:02:03",
        )
        if state == "PENDING":
            v.reason = "QOSMaxJobsPerUserLimit"
        if state == "RUNNING":
            v.progress = progress.parse(
                {"step": 120, "total_steps": 400, "loss": 1.23456, "eta_s": 3600}
            )
        if state == "COMPLETED":
            v.results = results.parse({"exact_match": 71.25, "f1": 80.5})
        out.append(v)
    return out


def test_fits_80_columns_and_never_splits_a_word():
    text = render(views())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    words = set(re.findall(r"[A-Za-z_]{3,}", text))
    for state in ALL_STATES:  # every state whole, never "SUBMITT/ED"
        assert state in words, (state, text)
    for part in ("quickstart", "executor", "waiting", "QOSMaxJobsPerUserLimit"):
        assert part in text or part == "executor", (part, text)
    assert "…" in text and LONG not in text  # the long name is cut with an ellipsis, not wrapped
    fragments = [
        w
        for w in words
        if w not in LONG and any(w in s and w != s for s in ALL_STATES) and len(w) > 3
    ]
    assert not fragments, fragments
    assert "EM 71.2 F1 80.5" in text and "120/400" in text


def test_empty_columns_are_hidden_and_wide_shows_everything():
    v = typed_view(id="7", name=LONG, executor="local", state="FAILED", nodes=1, world_size=2)
    narrow = render([v])
    assert "exit" not in narrow and "elapsed" not in narrow and "1 job(s): 1 local" in narrow
    wide = render([v], width=200, wide=True)
    assert LONG in wide and "elapsed" in wide and "exit" in wide


def test_an_unreachable_controller_is_one_line_with_the_fix():
    error = (
        "sacct failed: sacct: error: Problem talking to the database: Connection refused\n"
        "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection\n"
        "sacct: error: Sending PersistInit msg: Connection refused\nsacct: error: ..."
    )
    text = render(
        [typed_view(id="7", name="q", executor="slurm", state="RUNNING", nodes=1, world_size=2)],
        source=states.Answer.failed(slurmcli.first_line(error)),
    )
    warning = [
        line for line in text.splitlines() if "could not be asked" in line or "doctor" in line
    ]
    assert any("hpcqa doctor" in line for line in warning) and "title" not in text
    assert "slurm_persist_conn_open" not in text  # one line: the first error, not all four


RECIPE = {
    "attention": "fused",
    "attention_reason": "auto: the model takes an attention function",
    "attention_kernel": "the fused kernel (avx512, /k/fused-abc)",
    "dropout_masks": "bulk",
    "attention_dropout": 0.1,
    "hidden_dropout": 0.1,
}


@pytest.mark.parametrize(
    "weights,attention,said",
    [
        (
            "master",
            {},
            "attention fused, bulk dropout masks; dropout 0.1 on attention, 0.1 on hidden "
            "states; bf16 weights, fp32 masters; allocator tcmalloc",
        ),
        ("autocast", {}, "; fp32 weights, bf16 autocast; allocator"),
        (
            "fp32",
            {"attention": "hpcqa", "attention_fallback": "HPCQA_FUSED=0"},
            "attention hpcqa (not the fused kernel: HPCQA_FUSED=0), bulk dropout masks; dropout 0.1 on "
            "attention, 0.1 on hidden states; fp32 weights; allocator",
        ),
    ],
)
def test_status_says_the_weights_precision_and_the_attention_kernel_that_ran(
    tmp_path, weights, attention, said
):
    """A finished job's results.json (as the rank writes it: bf16_weights beside step_recipe): `status JOB`'s
    recipe row names the weights' precision that ran and, where the fused kernel was not used, why."""
    d = tmp_path / "job"
    write_json(
        d / "results.json",
        {
            "exact_match": 50.0,
            "f1": 60.0,
            "allocator": "tcmalloc",
            "step_recipe": {**RECIPE, **attention},
            "bf16_weights": {
                "mode": weights,
                "reason": "train.bf16_weights = auto",
                "logits": "fp32",
            },
        },
    )
    reg = _reg(tmp_path, ["7"], folder_of=lambda i: str(d))
    # its final state known: sacct is asked for its usage only
    reg.update_states([("7", "COMPLETED", True, "0:0", "00:01:00")])
    f = FakeRunner({"sacct": (0, "7|00:00:30|00:01:00|2|150M\n", "")})
    (v,), source = jobs.collect(reg, Slurm(f), ids=["7"])
    out = io.StringIO()
    statusview.print_detail(Console(file=out, width=300, color_system=None), [v], source)
    (line,) = [ln for ln in out.getvalue().splitlines() if "recipe" in ln]
    assert said in line, line
    assert v.results.bf16_weights.mode == weights and not v.damaged
    assert results.parse(v.results.to_json()).bf16_weights.logits == "fp32"  # it round-trips


def test_the_jobs_own_files_decide_when_the_scheduler_cannot_be_asked(tmp_path):
    done, failed = tmp_path / "done", tmp_path / "failed"
    write_json(done / "results.json", {"exact_match": 50.0, "f1": 60.0})
    (failed / "ranks").mkdir(parents=True)
    write_json(failed / "ranks" / "rank-1.failed", {"rank": 1, "error": "boom", "host": "n1"})
    reg = _reg(
        tmp_path,
        ["1", "2", "3"],
        folder_of=lambda i: str({"1": done, "2": failed}.get(i, tmp_path / "x")),
    )
    f = FakeRunner(
        {
            "sacct": (
                1,
                "",
                "sacct: error: Problem talking to the database: Connection refused\nmore\n",
            )
        }
    )
    got, source = jobs.collect(reg, Slurm(f), all_jobs=True)
    assert (
        not source.answered and source.error.startswith("sacct failed") and "\n" not in source.error
    )
    assert {v.id: v.state for v in got} == {"1": "COMPLETED", "2": "FAILED", "3": "SUBMITTED"}


def test_pending_reason_comes_from_squeue(tmp_path):
    sacct = "5|PENDING|0:0|00:00:00|1|None assigned\n"
    f = FakeRunner({"sacct": (0, sacct, ""), "squeue": (0, "5|PENDING|0:00|1||Dependency\n", "")})
    got, _ = jobs.collect(_reg(tmp_path, ["5"]), Slurm(f), all_jobs=True)
    assert got[0].state == "PENDING" and got[0].reason == "Dependency"
    assert "waiting: Dependency" in render(got)


def test_usage_parsing_and_low_efficiency_warning(tmp_path):
    text = "9|00:00:30|00:01:00|4|\n9.batch|00:00:00.500|00:01:00|4|2000K\n9.0|00:00:29.500|00:00:59|4|150M\n"
    u = slurmcli.parse_usage(text)["9"]
    assert u.total_cpu_s == 30 and u.alloc_cpus == 4 and u.max_rss_bytes == 150 * 2**20
    assert u.cpu_efficiency == pytest.approx(30 / 240)
    done = tmp_path / "done"
    write_json(done / "results.json", {"exact_match": 1.0, "f1": 2.0})
    f = FakeRunner({"sacct": (0, "9|COMPLETED|0:0|00:01:00|1|n1\n" if False else text, "")})
    reg = _reg(tmp_path, ["9"], folder_of=lambda i: str(done))
    reg.update_states([("9", "COMPLETED", True, "0:0", "00:01:00")])
    got, _ = jobs.collect(reg, Slurm(f), ids=["9"])
    assert got[0].usage["cpu_efficiency"] == pytest.approx(0.125)
    assert any("CPU efficiency 12%" in n for n in got[0].notes)
    lines = dict(statusview.detail_lines(got[0]))
    assert "CPU efficiency 12 %" in lines["resource use"] and "150 MiB" in lines["resource use"]


def test_local_usage_from_the_ranks_own_measurements(tmp_path):
    folder = tmp_path / "job"
    for k, cpu_s in ((0, 90.0), (1, 30.0)):
        write_json(
            folder / "ranks" / f"rank-{k}.json",
            {
                "rank": k,
                "host": "vm",
                "cpus": [k],
                "usage": {
                    "cpu_s": cpu_s,
                    "wall_s": 100.0,
                    "cpus": 1,
                    "max_rss_bytes": (k + 1) * 2**30,
                },
            },
        )
    write_json(folder / "results.json", {"exact_match": 1.0, "f1": 2.0})
    reg = registry.Registry(tmp_path / "r.sqlite")
    reg.add_many(
        [
            dict(
                id="4",
                name="n",
                executor="local",
                folder=str(folder),
                config={},
                source="x",
                nodes=1,
                world_size=2,
            )
        ]
    )
    reg.update_states([("4", "COMPLETED", True, "0:0", "")])
    f = FakeRunner({})
    got, _ = jobs.collect(reg, Slurm(f), ids=["4"])
    assert f.calls == []  # local jobs: nothing asked of Slurm
    u = got[0].usage
    assert (
        u["source"] == "ranks"
        and u["cpu_efficiency"] == pytest.approx(0.3)
        and u["max_rss_bytes"] == 2**31
    )
    lines = dict(statusview.detail_lines(got[0]))
    assert "CPU efficiency 30 %" in lines["rank 1"] and "CPU efficiency 90 %" in lines["rank 0"]
    assert any("30%" in n for n in got[0].notes)
    assert json.dumps(got[0].to_json())  # the JSON view carries it too


def test_a_cancelled_jobs_interrupted_ranks_are_not_its_failure():
    """Cancelling a local job interrupts its ranks (KeyboardInterrupt); that is the cancel, not a failure."""
    v = typed_view(id="7", name="q", executor="local", state="CANCELLED", nodes=1, world_size=2)
    v.failed = [
        failure.parse({"rank": 1, "host": "vm", "error": "KeyboardInterrupt: "}),
        failure.parse({"rank": 0, "host": "vm", "error": "rank process killed by SIGKILL"}),
    ]
    rows = dict(statusview.detail_lines(v))
    assert "first failure" not in rows and rows["stopped"] == "2 rank(s) stopped by the cancel"
    # a real failure before the cancel still shows; and a FAILED job's interrupt is shown as it is
    v.failed = [
        failure.parse({"rank": 1, "host": "vm", "error": "ValueError: bad data"})
    ] + v.failed
    assert dict(statusview.detail_lines(v))["first failure"] == "rank 1 on vm: ValueError: bad data"
    v.state, v.failed = "FAILED", v.failed[1:]
    assert "KeyboardInterrupt" in dict(statusview.detail_lines(v))["first failure"]


def test_the_step_split_and_the_all_reduce_lines():
    res = {
        "step_split_s": {
            "forward_backward": 0.3,
            "compute": 0.1,
            "allreduce_exposed": 0.2,
            "optimizer": 0.0,
            "other": 0.0,
            "data_wait": 0.0,
        },
        "comm": {
            "grad_bytes": 2_349_064,
            "bucket_bytes": [2_349_064],
            "allreduce_s": 0.2,
            "exposed_s": 0.15,
        },
    }
    v = typed_view(
        id="1", name="n", executor="slurm", state="COMPLETED", nodes=2, world_size=2, results=res
    )
    rows = dict(statusview._efficiency_rows(v))
    # forward+backward is not counted twice: its compute and exposed all-reduce stand in for it
    assert rows["step"].startswith("0.300 s: compute 33 %, exposed all-reduce 67 %")
    assert rows["all-reduce"] == (
        "2.3 MB of gradients per step in 1 bucket(s); 0.200 s alone, 0.150 s exposed "
        "(25 % hidden behind the backward)"
    )
    sent = {**res, "comm": {**res["comm"], "compress": "fp16", "wire_bucket_bytes": [1_174_532]}}
    v = typed_view(
        id="1", name="n", executor="slurm", state="COMPLETED", nodes=2, world_size=2, results=sent
    )
    assert dict(statusview._efficiency_rows(v))["all-reduce"].startswith(
        "2.3 MB of gradients per step in 1 bucket(s), sent in fp16 (1.2 MB); 0.200 s alone"
    )
    link = {"link": {"bandwidth_Bps": 95e6 / 8, "latency_s": 2e-4, "nodes": 2}, "backend": "gloo"}
    v = typed_view(
        id="2",
        name="n-comm",
        executor="slurm",
        state="COMPLETED",
        nodes=2,
        world_size=2,
        results=link,
    )
    assert (
        dict(statusview._efficiency_rows(v))["link"]
        == "95.0 Mbit/s, latency 200 us (gloo, all-reduce among 2 nodes)"
    )
    assert status.progress_text(v) == "link 95 Mbit/s, 200 us"


def test_a_programs_stderr_tail_reads_error_first():
    from hpcqa.record import failures

    tail = [
        "Traceback (most recent call last):",
        '  File "run_qa.py", line 300, in main',
        "    model = AutoModel.from_pretrained(args.model)",
        "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "",
        "OSError: no-such-model is not a local folder",
        "hpcqa: rank 0 exited with 1",
    ]
    assert failures.error_first(tail) == [tail[5], *tail[:3], tail[6]]
    assert failures.error_first(["plain", "lines"]) == ["plain", "lines"]  # no exception: as it was
    assert failures.error_first(["a", "   ~~~^^^", "b"]) == ["a", "b"]
    nested = ["torch.distributed.DistBackendError: NCCL", "x", "ValueError: last one wins"]
    assert failures.error_first(nested)[0] == "ValueError: last one wins"


def test_a_programs_trainer_files_are_read_as_data(tmp_path):
    """trainer_state.json / *_results.json from a program's folder: the newest regular file, any field may be wrong;
    a FIFO or a link of that name is passed over (reading a FIFO would block the rank for ever)."""
    import json
    import os

    from hpcqa.record import trainerfiles

    ck = tmp_path / "out" / "checkpoint-2"
    ck.mkdir(parents=True)
    (ck / "trainer_state.json").write_text(
        json.dumps(
            {
                "global_step": 2,
                "max_steps": 4,
                "epoch": 0.5,
                "log_history": [{"loss": 3.5}, {"loss": True}, "x"],
            }
        )
    )
    got = trainerfiles.progress([tmp_path])
    assert (got["step"], got["total_steps"], got["loss"]) == (2, 4, 3.5)
    os.mkfifo(tmp_path / "out" / "trainer_state.json")
    (tmp_path / "all_results.json").symlink_to("/etc/hostname")
    assert trainerfiles.progress([tmp_path])["step"] == 2  # the FIFO is not read
    assert trainerfiles.metrics([tmp_path]) is None  # the link is not followed
    (ck / "trainer_state.json").write_text(json.dumps({"global_step": "2"}))
    assert trainerfiles.progress([tmp_path]) is None


@pytest.mark.parametrize(
    "line, peer",
    [
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for "
            "recv operation to complete",
            True,
        ),
        (
            "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
            True,
        ),
        ("torch.distributed.DistNetworkError: Connection reset by peer", True),
        # a peer that never arrived, before the process group formed (the lines torch 2.13 printed with 2 of 3 ranks)
        (
            "torch.distributed.DistStoreError: wait timeout after 8000ms, keys: /default_pg/0//cpu//0/0",
            True,
        ),
        (
            "torch.distributed.DistNetworkError: The client socket has timed out after 8000ms while trying to connect to "
            "(127.0.0.1, 29734).",
            True,
        ),
        (
            "RankError: the rendezvous at node1:23456 did not complete in 180 s (fix: check that every rank started)",
            True,
        ),
        # the store's host gave up first and left: the others' next store read (CI saw this race once)
        (
            "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote "
            "server shutdown or crash?",
            True,
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4242",
            True,
        ),
        # the rank's own errors: retrying them would only fail again
        (
            "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out.",
            False,
        ),
        ("TimeoutError: timed out", False),
        ("subprocess.TimeoutExpired: Command '['tokenize']' timed out after 30 seconds", False),
        ("ValueError: broken input", False),
    ],
)
def test_only_an_error_that_names_a_lost_peer_counts_as_one(tmp_path, line, peer):
    from hpcqa.record import failures

    log = tmp_path / "rank.log"
    log.write_text(
        f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n[rank1]: {line}\n'
    )
    assert failures.lost_peer_in_log(log) is peer
    assert failures.consequence(line) == (2 if peer else 1)


def test_job_files_that_are_not_what_hpcqa_writes_are_passed_over(tmp_path):
    """A job's program can leave anything in its folder: a FIFO, a link, a huge or non-object or non-finite
    results.json. Each is read as missing -- never blocking, never a traceback -- and the rest of the job shows."""
    import os
    import signal

    from hpcqa.record import jobdir
    from hpcqa.record.jobfiles import reader as jsonfiles

    d = tmp_path / "job"
    (d / "ranks").mkdir(parents=True)
    os.mkfifo(d / "results.json")  # a read would block for ever
    (d / "progress.json").write_text('"x"')  # valid JSON, not an object
    (d / "ranks" / "rank-0.json").write_text("[null]")
    (d / "ranks" / "rank-1.json").write_text('{"step": NaN}')
    (tmp_path / "secret.json").write_text('{"rank": 1, "host": "elsewhere"}')
    (d / "ranks" / "rank-1.phase.json").symlink_to(tmp_path / "secret.json")  # not followed
    with open(tmp_path / "big.json", "wb") as f:
        f.truncate(jsonfiles.MAX_JSON_BYTES + 10)
    signal.alarm(10)  # a FIFO that blocked would fail the test, not hang it
    try:
        for name in (
            "results.json",
            "progress.json",
            "ranks/rank-0.json",
            "ranks/rank-1.json",
            "ranks/rank-1.phase.json",
        ):
            assert jobdir.read_json(d / name) is None, name
        assert jobdir.read_json(tmp_path / "big.json") is None
        assert jobdir.read_json(tmp_path / "secret.json") == {"rank": 1, "host": "elsewhere"}
        assert jobdir.read_json(tmp_path / "missing.json") is None
        write_json(d / "ranks" / "rank-0.json", {"rank": 0, "host": "vm", "cpus": [0]})
        reg = _reg(tmp_path, ["7"], folder_of=lambda i: str(d))
        f = FakeRunner({"sacct": (0, "7|RUNNING|0:0|00:01:00|1|vm\n", ""), "squeue": (0, "", "")})
        got, _ = jobs.collect(reg, Slurm(f), ids=["7"])
        assert got[0].state == "RUNNING" and got[0].results is None
        # one row per file that is there and was not used, naming it and why; the readable report is not one
        damaged = dict(row.split(": ", 1) for row in got[0].damaged)
        assert damaged == {
            "results.json": "not a regular file",
            "progress.json": "JSON, but a str, not an object",
            "ranks/rank-1.json": "a number that is not finite (NaN, Infinity or 1e999)",
        }, got[0].damaged
        rows = [text for label, text in statusview.detail_lines(got[0]) if label == "damaged"]
        assert rows == [f"{row}: not used" for row in got[0].damaged]
        assert got[0].to_json()["damaged"] == got[0].damaged
    finally:
        signal.alarm(0)


@pytest.mark.parametrize(
    "field, value",
    [
        ("step", 1e308),
        ("step", -1),
        ("step", 2.5),
        ("step", "8"),
        ("total_steps", 10**13),
        ("eta_s", 1e308),
        ("eta_s", -5.0),
        ("updated", True),
        ("loss", "low"),
        ("phase", 3),
    ],
)
def test_progress_numbers_out_of_range_are_a_damaged_file_not_a_bar(tmp_path, field, value):
    """progress.json with a number no rank writes (a step of 1e308 made the bar's int() overflow): the job shows
    without progress and one row names the file and the field."""
    from hpcqa.record import jobdir

    d = tmp_path / "job"
    d.mkdir()
    good = {
        "phase": "training step",
        "step": 4,
        "total_steps": 8,
        "epoch": 0.5,
        "loss": 2.5,
        "eta_s": 3.0,
        "updated": 1795802219.6,
        "started": 1795802210.1,
        "attempt": 0,
    }
    write_json(d / "progress.json", good)
    got = jobdir.JobDir(d).read_progress()
    assert got is not None and got.to_json() == good and jobdir.JobDir(d).damaged(1) == []
    write_json(d / "progress.json", {**good, field: value})
    reg = _reg(tmp_path, ["7"], folder_of=lambda i: str(d))
    f = FakeRunner({"sacct": (0, "7|RUNNING|0:0|00:01:00|1|vm\n", ""), "squeue": (0, "", "")})
    (v,), _ = jobs.collect(reg, Slurm(f), ids=["7"])
    assert v.progress is None
    (row,) = v.damaged
    assert row.startswith(f"progress.json: {field} "), row
    rows = dict(statusview.detail_lines(v))
    assert "progress" not in rows and rows["damaged"] == row + ": not used"
    listed, _ = jobs.collect(reg, Slurm(f))
    assert listed[0].progress is None and "RUNNING" in render(listed)


# ------------------------------------------------------------------------------ issue 52: a held-out re-test
# Probes the earlier corpus did not try, on a finished job's folder (each was a traceback, a hang or raw escape
# sequences on the terminal before the fix).


def test_results_whose_scores_are_not_numbers_are_a_damaged_file(tmp_path):
    """results.json with an EM that is text (a format code then raised ValueError in the job list)."""
    d = tmp_path / "job"
    d.mkdir()
    write_json(d / "results.json", {"exact_match": "\x1b]0;x\x07", "f1": 5.0})
    reg = _reg(tmp_path, ["7"], folder_of=lambda i: str(d))
    f = FakeRunner({"sacct": (0, "7|RUNNING|0:0|00:01:00|1|vm\n", ""), "squeue": (0, "", "")})
    (v,), _ = jobs.collect(reg, Slurm(f), ids=["7"])
    assert v.results is None and v.damaged == [
        'results.json: exact_match "\\u001b]0;x\\u0007" is not a number'
    ]
    listed, _ = jobs.collect(reg, Slurm(f))
    assert "RUNNING" in render(listed) and "\x1b" not in render(listed)


def test_rank_reports_with_usage_of_the_wrong_types_are_left_out_of_the_usage(tmp_path):
    from hpcqa.executors.local import executor as local

    good = {"rank": 1, "usage": {"cpu_s": 5.0, "wall_s": 10.0, "cpus": 1, "max_rss_bytes": 100}}
    for junk in (
        {"rank": 0, "usage": {"cpu_s": "x", "wall_s": 0, "cpus": 0, "max_rss_bytes": "y"}},
        {"rank": [0], "usage": good["usage"]},
        {"usage": good["usage"]},
        {"rank": 0, "usage": {**good["usage"], "max_rss_bytes": True}},
        {"rank": 0, "usage": {**good["usage"], "cpu_s": float("inf")}},
        {"rank": 0, "usage": {**good["usage"], "wall_s": -1.0}},
    ):
        v = typed_view(
            id="5",
            name="n",
            executor="local",
            state="COMPLETED",
            nodes=1,
            world_size=2,
            ranks=[junk, good],
        )
        got = local.LocalJobs().usage([v])["5"]
        assert list(got["per_rank"]) == [1] and got["cpu_efficiency"] == 0.5, junk


def test_escape_sequences_in_a_rank_report_are_spelled_out_in_the_detail_view(tmp_path):
    """A rank report's host and error hold OSC 8 (a hyperlink) and a clear-screen: shown as text, not sent. Another's
    rank "number" is OSC 52 (a clipboard write, once in the row's label): that report is damaged and not shown."""
    v = typed_view(
        id="5",
        name="n",
        executor="local",
        state="FAILED",
        nodes=1,
        world_size=1,
        folder=str(tmp_path),
        ranks=[
            {
                "rank": 0,
                "host": "\x1b]8;;http://evil\x07link\x1b]8;;\x07",
                "cpus": [0],
                "status": "failed",
                "error": "\x1b[2J boom",
            },
            {"rank": "\x1b]52;c;aGk=\x07[bold]", "host": "h"},
        ],
        notes=["warning from a file \x1b[2J"],
    )
    out = io.StringIO()
    statusview.print_detail(Console(file=out, width=200), [v], states.Answer(states.Source.SACCT))
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert "\\x1b]8;;http://evil\\x07link" in text and "\\x1b[2J" in text
    # a rank that is not a whole number breaks the report's schema: not used, so no label can carry it
    assert "aGk=" not in text and "rank 0" in text, text
    assert "rank" in str(report_schema.parse({"rank": "\x1b]52;c;aGk=\x07[bold]"}))


def test_a_log_that_is_a_link_or_a_folder_is_refused_not_read(tmp_path):
    """A program can make its log a link to /dev/zero (read for ever) or a folder: `hpcqa logs` opens only the regular
    file a job writes, without following a link."""
    import signal

    from hpcqa.record import logtail

    (tmp_path / "log.err").write_bytes(b"line\n")
    with logtail.open_log(tmp_path / "log.err") as f:
        assert f.read() == b"line\n"
    (tmp_path / "zero.err").symlink_to("/dev/zero")
    (tmp_path / "dir.err").mkdir()
    os_fifo = tmp_path / "fifo.err"
    import os

    os.mkfifo(os_fifo)
    signal.alarm(10)
    try:
        for name, why in (
            ("zero.err", "a link"),
            ("dir.err", "not a regular file"),
            ("fifo.err", "not a regular"),
        ):
            with pytest.raises(OSError) as e:
                logtail.open_log(tmp_path / name)
            assert why in e.value.strerror, name
    finally:
        signal.alarm(0)


def test_a_programs_folder_record_that_is_not_an_object_is_passed_over():
    """A user command's job: results.json and the rank report both may hold "work" (where the program ran), and the
    program may have written either. A "work" that is not an object is not read as one: the view shows the command
    and the next record that is an object (an AttributeError before). A record whose "work" is not an object breaks
    its schema and is not used at all (the reader names it as damaged)."""
    ran = {"dir": "/home/u/prog", "snapshot": "abc123"}
    assert isinstance(report_schema.parse({"rank": 0, "work": "x"}), Damaged)
    assert "work" in str(results.parse({"work": [1]}))
    for res, report, where in (
        (None, {}, "in the image default folder"),
        ({"work": [1]}, {"work": ran}, "in a copy of /home/u/prog (snapshot abc123, verified)"),
        (
            {"work": ran, "command": ["python", "a.py"]},
            {"work": 7},
            "in a copy of /home/u/prog (snapshot abc123, verified)",
        ),
    ):
        v = typed_view(
            id="7",
            name="q",
            executor="local",
            state="COMPLETED",
            nodes=1,
            world_size=1,
            results=res,
            ranks=[{"rank": 0, "command": ["python", "a.py"], **report}],
        )
        text = " ".join(t for _, t in statusview.detail_lines(v))
        assert "python a.py" in text and where in text, text


@pytest.mark.parametrize(
    "file, field, value",
    [
        ("results.json", "requeues", "[/]"),  # rich markup: a MarkupError in the list
        ("results.json", "requeues", "\x1b]52;c;aGk=\x07"),  # was sent raw in the list
        ("results.json", "best_checkpoint", 7),  # Path(7): TypeError
        ("results.json", "best_checkpoint", "x" * 5000),  # exists(): ENAMETOOLONG
        ("results.json", "f1", None),  # format(None): TypeError
        ("results.json", "link", {"bandwidth_Bps": 1e8}),  # no latency: KeyError
        ("results.json", "link", [1]),
        ("results.json", "notices", 7),
        ("results.json", "resumed_from_step", "[bold]"),
        ("ranks/rank-0.json", "warnings", 7),  # iterated: TypeError
    ],
)
def test_a_finished_jobs_records_with_fields_of_the_wrong_type_still_show(
    tmp_path, file, field, value
):
    """A finished job's results.json or rank report with one field rewritten (the folder is the program's too): the
    list, the detail view and --json all still show the job, nothing raw reaches the terminal, and the bad field
    is not shown as if it were good. Each case was a traceback or a raw escape sequence (2,484- and 8,000-case
    mutation runs over real job folders)."""
    d = tmp_path / "job"
    (d / "ranks").mkdir(parents=True)
    results = {
        "exact_match": 40.0,
        "f1": 50.0,
        "requeues": 1,
        "resumed_from_step": 3,
        "status": "COMPLETED",
    }
    if field == "link":  # a link measurement's results hold no scores (the list shows scores first)
        results = {"status": "COMPLETED"}
    report = {"rank": 0, "host": "vm", "cpus": [0], "status": "trained"}
    write_json(d / "results.json", {**results, field: value} if file == "results.json" else results)
    write_json(
        d / "ranks/rank-0.json", {**report, field: value} if file != "results.json" else report
    )
    reg = _reg(tmp_path, ["7"], folder_of=lambda i: str(d))
    f = FakeRunner({"sacct": (0, "7|COMPLETED|0:0|00:01:00|1|vm\n", ""), "squeue": (0, "", "")})
    listed, source = jobs.collect(reg, Slurm(f))
    # the state is final and kept now; the detail view asks sacct only for usage, which this job has none of
    (one,), _ = jobs.collect(reg, Slurm(FakeRunner({"sacct": (0, "", "")})), ids=["7"])
    text = render(listed, wide=True) + render(listed)
    out = io.StringIO()
    statusview.print_detail(Console(file=out, width=200), [one], source)
    text += out.getvalue() + json.dumps(one.to_json())
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert "7" in text and "COMPLETED" in text, text
    if field == "requeues":
        assert "requeued" not in text, text  # a count that is not a whole number is not a count
    if field == "resumed_from_step":  # the file breaks its schema: not used, and said so by field
        assert "resumed from step" not in text, text
        assert "results.json: resumed_from_step" in text, text


def test_the_lists_notes_quote_job_files_spelled_out_and_usage_that_underflows_is_no_usage():
    """A blind re-test's findings: the list printed a job's notes raw (a rank's phase detail with OSC 0, a
    clear-screen and U+202E reached the terminal; rich took "[bold]" as markup), and a rank's usage whose wall x
    CPUs underflows to 0 was a ZeroDivisionError in `status JOB` (an overflow, an "inf %" and bare Infinity in
    --json)."""
    from hpcqa.executors.local import executor as local

    now = __import__("time").time()
    v = typed_view(
        id="7",
        name="n",
        executor="local",
        state="RUNNING",
        nodes=1,
        world_size=1,
        phases=[
            {
                "rank": 0,
                "phase": "rendezvous",
                "since": now - 3600,
                "detail": "\x1b]0;pwned\x07\x1b[2J[bold]x[/]\u202eevil",
            }
        ],
    )
    v.notes.append(jobs.phases.stuck_at_rendezvous(v.phases))
    out = io.StringIO()
    statusview.print_list(Console(file=out, width=200), [v], states.NOBODY, "r.sqlite")
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text)
    assert "[bold]x[/]" in text and "\\x1b]0;pwned" in text, text
    for usage in (
        {"cpu_s": 1, "wall_s": 1e-200, "cpus": 1, "max_rss_bytes": 1},
        {"cpu_s": 1e308, "wall_s": 1e-10, "cpus": 1, "max_rss_bytes": 1},
    ):
        w = typed_view(
            id="5",
            name="n",
            executor="local",
            state="COMPLETED",
            nodes=1,
            world_size=1,
            ranks=[{"rank": 0, "usage": usage}],
        )
        got = local.LocalJobs().usage([w])["5"]
        assert got["cpu_efficiency"] is None or got["cpu_efficiency"] < float("inf"), got
        json.dumps(got, allow_nan=False)  # valid JSON, as --json prints it


def test_a_searchs_run_without_results_is_named_as_its_trial():
    """status SWEEP: a search's cancelled run (no results.json) is 'trial N' as its siblings are, not 'variant N'
    (a blind re-test saw both in one search); a grid's tasks stay variants."""

    def task(i, trial=None, state="COMPLETED"):
        res = (
            {"f1": 1.0, "trial": {"number": trial, "state": "COMPLETED", "metric": "f1"}}
            if trial is not None
            else None
        )
        return typed_view(
            nodes=1,
            world_size=1,
            id=f"9_{i}",
            name="n",
            executor="local",
            state=state,
            results=res,
            sweep_id="9",
            task_index=i,
            variant={"train.learning_rate": 1e-4},
        )

    search = [task(0, 0), task(1, state="CANCELLED")]
    names = [r[1].strip() for r in statusview._rows(search, expand=True)[1:]]
    assert names == ["trial 0", "trial 1"], names
    grid = [task(0), task(1, state="CANCELLED")]
    assert [r[1].strip() for r in statusview._rows(grid, expand=True)[1:]] == [
        "variant 0",
        "variant 1",
    ]


def test_results_of_a_trials_own_job_id_names_its_sweep(tmp_path):
    """hpcqa results JOB, where JOB is a task of a sweep (a blind re-test gave a trial's job id): the sweep is
    named with the command that shows it, not 'no sweep JOB'."""
    from tests.conftest import run_cli_in_process

    reg = registry.Registry(tmp_path / "r.sqlite")
    row = dict(
        name="n",
        executor="local",
        folder="/nonexistent",
        config={},
        source="x",
        nodes=1,
        world_size=1,
    )
    reg.add_many([dict(row, id="17382", sweep_id="local-17382"), dict(row, id="17400")])
    env = {"HPCQA_REGISTRY": str(tmp_path / "r.sqlite")}
    r = run_cli_in_process("results", "17382", env=env)
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "17382 is a job of sweep local-17382, not a sweep" in said, said
    assert "fix: hpcqa results local-17382" in said, said
    alone = run_cli_in_process("results", "17400", env=env)
    assert alone.returncode == 2 and "no sweep 17400" in alone.stderr, alone.stderr
