"""End to end: `hpcqa submit` of a 2-rank local DDP fine-tune of the tiny model, as a user runs it."""

import json
import os
import re
from pathlib import Path

import pytest

from hpcqa.executors import hostprobe
from tests.conftest import ROOT, as_background, as_foreground

pytestmark = pytest.mark.slow
TINY = [
    "--set",
    "model.name_or_path=builtin:tiny-bert",
    "--set",
    "data.synthetic_train_examples=240",
    "--set",
    "data.synthetic_eval_examples=60",
    "--set",
    "train.num_train_epochs=1",
    "--set",
    "train.save_steps=4",
    "--set",
    "train.logging_steps=2",
    "--set",
    "train.bf16=false",
]


def processes_running(text: str) -> list[str]:
    """Processes whose command line contains `text` (read from /proc; nothing is signalled)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes().replace(b"\0", b" "):
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def job_dirs(out: Path) -> list[Path]:
    return sorted(
        p for p in (out / "quickstart").iterdir() if p.is_dir() and p.name.split("-")[0].isdigit()
    )


@pytest.fixture
def cache_env(tmp_path_factory):
    return {"HPCQA_CACHE": str(tmp_path_factory.getbasetemp() / "hpcqa-cache")}


def test_two_rank_local_ddp(cli, tmp_path, cache_env):
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        *TINY,
        env=cache_env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "COMPLETED" in r.stdout and "EM " in r.stdout
    (job,) = job_dirs(tmp_path)
    reports = [json.loads((job / "ranks" / f"rank-{k}.json").read_text()) for k in (0, 1)]
    cpus = [set(rep["cpus"]) for rep in reports]
    assert cpus[0] and cpus[1] and not cpus[0] & cpus[1], "ranks must run on disjoint CPU sets"
    for rep in reports:
        assert rep["torch_threads"] == int(rep["omp_num_threads"]) == len(rep["cpus"])
        assert rep["world_size"] == 2 and rep["backend"] == "gloo" and not rep["warnings"]
        # a pinned rank's CPU use stays within its CPUs: every thread allowed only there, CPU seconds (children
        # included) at most wall x CPUs (they were once 132 % and 165 %: the wall clock started after the imports)
        u = rep["usage"]
        assert u["threads_outside_cpus"] == [], u
        assert u["cpu_s"] <= u["wall_s"] * u["cpus"] * 1.02, u
    status = cli("status", job.name.split("-")[0], env={**cache_env, "COLUMNS": "200"})
    effs = [int(x) for x in re.findall(r"CPU efficiency (\d+) ?%", status.stdout)]
    assert effs and max(effs) <= 101, status.stdout
    # efficiency in every run: model FLOPs from the model's shapes, each rank's measured peak, MFU -- in
    # results.json, status JOB and the TensorBoard event file
    res = json.loads((job / "results.json").read_text())
    # the ranks' wall time counts from their processes' start, imports included (a trial's node-hours are all it
    # cost): past the report's own span, which starts after torch and transformers were imported
    rep0 = reports[0]
    assert res["wall_time_s"] >= rep0["finished"] - rep0["started"] + 1.0, (
        res["wall_time_s"],
        rep0,
    )
    # the step's recipe as it ran: the fused attention (this machine has a compiler) and bulk dropout masks, the model's own dropouts
    assert (
        res["step_recipe"]["attention"] == "fused" and res["step_recipe"]["dropout_masks"] == "bulk"
    )
    assert res["step_recipe"]["attention_dropout"] == res["step_recipe"]["hidden_dropout"] == 0.1
    assert res["step_recipe"]["bulk_dropout_modules"] > 0
    flat = " ".join(status.stdout.replace("│", " ").split())  # the panel's row, wrapped or not
    assert (
        "recipe attention fused, bulk dropout masks; dropout 0.1 on attention, 0.1 on hidden states; "
        "fp32 weights; allocator glibc-heap" in flat
    ), status.stdout
    assert res["allocator"] == "glibc-heap"  # launch.malloc's default, as the rank's process got it
    eff = res["efficiency"]
    assert len(eff["peak_flops_per_rank"]) == 2 and all(p > 1e8 for p in eff["peak_flops_per_rank"])
    # this machine is shared: another user's load may move the peak during the job, and then the MFU is withheld
    moved = "peak_moved" in eff
    assert (
        eff["mfu"] is None and "moved from" in eff["mfu_unreliable"]["why"]
        if moved
        else 0 < eff["mfu"] < 1
    ) and eff["precision"] == "fp32"
    assert len(eff["peak_provenance"]) == 2 and all(
        p["end"]["flops"] > 0 for p in eff["peak_provenance"]
    )
    split = res["step_split_s"]
    assert set(split) == {
        "forward_backward",
        "compute",
        "allreduce_exposed",
        "optimizer",
        "other",
        "data_wait",
    } and all(x is not None and x >= 0 for x in split.values()), split
    # the parts of a step add up to no more than the step (the data wait falls between steps); forward+backward
    # is its compute and the all-reduce the backward did not hide (timed with and without no_sync())
    inside = split["forward_backward"] + split["optimizer"] + split["other"]
    assert split["forward_backward"] > split["optimizer"] and inside <= res["step_time_s"] * 1.01
    assert split["compute"] + split["allreduce_exposed"] == pytest.approx(split["forward_backward"])
    comm = res["comm"]
    assert (
        comm["probe_steps"] == 3
        and comm["synced_s"] > 0
        and comm["nosync_s"] > 0
        and comm["allreduce_s"] > 0
    )
    assert comm["exposed_s"] == pytest.approx(max(comm["synced_s"] - comm["nosync_s"], 0))
    assert (
        sum(comm["bucket_bytes"]) == comm["grad_bytes"] > 1e6
    )  # tiny-bert: 2.3 MB of fp32 gradients
    assert re.search(r"step\s+[\d.]+ s: compute \d+ %, exposed all-reduce \d+ %", status.stdout), (
        status.stdout
    )
    assert re.search(r"all-reduce\s+2\.3 MB of gradients per step in 1 bucket", status.stdout), (
        status.stdout
    )
    rate = res["steady_samples_per_second"] or res["train_samples_per_second"]
    assert (
        abs(eff["achieved_flops"] - eff["model_flops_per_sample"] * rate)
        < 1e-6 * eff["achieved_flops"]
    )
    assert re.search(
        r"MFU not given: the peak moved from"
        if moved
        else r"MFU on text tokens \d+\.\d %: [\d.]+ of [\d.]+ GFLOP/s \(fp32 matmul peak measured on 2 "
        r"rank\(s\)",
        " ".join(status.stdout.split()),
    ), status.stdout
    assert re.search(r"peak\s+1024x1024 fp32 matmuls", status.stdout), status.stdout
    # dynamic padding, length-grouped: the MFU on all tokens counts the little padding left, the counts add up
    tokens = eff["tokens"]
    assert (
        0 <= tokens["padding_share"] < 0.15
        and tokens["text_per_sample"] <= tokens["all_per_sample"]
    )
    assert "measured" in eff["peak_method"]
    if moved:
        assert "MFU not given: the peak moved from" in " ".join(r.stdout.split()), r.stdout
    else:
        assert eff["mfu"] <= eff["mfu_all_tokens"]
        assert re.search(
            r"MFU \d+\.\d % on text tokens, \d+\.\d % on all tokens \(\d+ % padding\)", r.stdout
        ), r.stdout
        assert re.search(
            r"achieved [\d.]+ GFLOP/s of [\d.]+, the measured fp32 matmul peak", r.stdout
        ), r.stdout
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(job / "tensorboard"))
    board.Reload()
    assert {"hpcqa/step_s/compute", "hpcqa/step_s/allreduce_exposed"} | (
        set() if moved else {"hpcqa/mfu"}
    ) <= set(board.Tags()["scalars"])
    if not moved:  # a withheld MFU is not written as a curve either
        assert abs(board.Scalars("hpcqa/mfu")[-1].value - eff["mfu"]) < 1e-6
    # `hpcqa topology` shows what the ranks really bound (the same function, on the same node)
    topo = cli("topology", "configs/quickstart.toml", "--json")
    assert topo.returncode == 0, topo.stderr
    for rep, view in zip(reports, json.loads(topo.stdout)["ranks"]):
        assert (
            rep["cpus"] == view["cpus"]
            and rep["sockets"] == view["socket"]
            and rep["numa"] == view["numa"]
        )
        assert rep["membind"].startswith("not bound") and rep["plan_digest"]
    # DDP synchronised the gradients: both ranks end with bit-identical weights
    assert reports[0]["weights_digest"] == reports[1]["weights_digest"]
    res = json.loads((job / "results.json").read_text())
    assert res["world_size"] == 2 and res["backend"] == "gloo"
    assert (
        0 <= res["exact_match"] <= 100
        and 0 <= res["f1"] <= 100
        and res["train_samples_per_second"] > 0
    )
    assert res["weights_digest"] == reports[0]["weights_digest"]
    job_id, submission = job.name.split("-")
    assert (
        len(submission) == 6 and int(submission, 16) >= 0
    )  # <job id>-<submission>: ids may repeat, this doesn't
    assert (job / f"{job_id}_0_log.err").exists() and (job / f"{job_id}_1_log.err").exists()
    # run_qa.py's evaluation outputs (v1 data: no null odds), and TensorBoard curves in the job folder
    answers = json.loads((job / "eval_predictions.json").read_text())
    nbest = json.loads((job / "eval_nbest_predictions.json").read_text())
    assert len(answers) == res["eval_examples"] == 60 and set(nbest) == set(answers)
    assert not (job / "eval_null_odds.json").exists() and res["rules"] == "squad-v1.1"
    assert (
        res["tensorboard"] == str(job / "tensorboard")
        and f"tensorboard --logdir {job / 'tensorboard'}" in r.stdout
    )
    assert "train/loss" in tensorboard_scalars(job / "tensorboard")
    # the product: the trained model and its tokenizer, kept (76 steps is no multiple of save_steps: no checkpoint
    # would hold it), loaded back as a user loads it, answering as the job's own evaluation answered
    assert res["model_dir"] == str(job / "model") and (job / "model" / "config.json").is_file()
    assert f"trained model (from_pretrained): {job / 'model'}" in r.stdout
    assert not list(job.glob(".model-*"))  # the partial folder was renamed into place
    dev = synth_examples(60, 42 + 100003)  # train.seed's validation split
    assert answers_of(job / "model", dev) == answers
    js = json.loads(cli("status", job_id, "--json", env=cache_env).stdout)[0]
    assert js["outputs"]["trained model"] == str(job / "model")


def synth_examples(n: int, seed: int, negatives: bool = False) -> list[dict]:
    """The synthetic data set's examples as flat rows (id, context, question, answers)."""
    from hpcqa.core import squadfile
    from hpcqa.rank.train import synth

    _, rows = squadfile.parse(json.dumps(synth.squad_json(n, seed, negatives)))
    return [squadfile.normalise(row) for row in rows]


def answers_of(model_dir: Path, examples: list[dict], max_len: int = 128, stride: int = 32) -> dict:
    """What a saved model answers, loaded as a user loads it (the Auto classes, nothing of hpcqa's model code), its
    logits post-processed by run_qa's rule (hpcqa's postprocess)."""
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from hpcqa.rank.train import postprocess

    model = AutoModelForQuestionAnswering.from_pretrained(str(model_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    enc = tokenizer(
        [e["question"].lstrip() for e in examples],
        [e["context"] for e in examples],
        truncation="only_second",
        max_length=max_len,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=True,
        return_tensors="pt",
    )
    features = [
        {
            "example_id": examples[int(i)]["id"],
            "offset_mapping": [
                o.tolist() if enc.sequence_ids(k)[j] == 1 else None
                for j, o in enumerate(enc["offset_mapping"][k])
            ],
        }
        for k, i in enumerate(enc["overflow_to_sample_mapping"])
    ]
    with torch.no_grad():
        out = model(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            **({"token_type_ids": enc["token_type_ids"]} if "token_type_ids" in enc else {}),
        )
    got = postprocess.postprocess(
        [{"id": e["id"], "context": e["context"]} for e in examples],
        features,
        out.start_logits.numpy(),
        out.end_logits.numpy(),
        n_best_size=20,
        max_answer_length=30,
    )
    return got.answers


def tensorboard_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert list(logdir.glob("events.out.tfevents.*")), f"no event file in {logdir}"
    ea = EventAccumulator(str(logdir))
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


def test_v2_test_split_predictions_and_best_checkpoint(cli, tmp_path, cache_env):
    """run_qa.py's options: SQuAD v2, a test split (do_predict), evaluation during training keeping the best
    checkpoint, dynamic padding, tokenising in worker processes. The written files rescore, through the
    official v2.0 rules (tests/squad_reference.py), to exactly the scores in results.json."""
    from hpcqa.rank.train import synth
    from tests import squad_reference as ref

    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        *TINY,
        "--set",
        "data.version_2_with_negative=true",
        "--set",
        "train.do_predict=true",
        "--set",
        "train.eval_strategy=steps",
        "--set",
        "train.eval_steps=4",
        "--set",
        "train.save_total_limit=1",
        "--set",
        "train.load_best_model_at_end=true",
        "--set",
        "data.pad_to_max_length=false",
        "--set",
        "data.preprocessing_num_workers=2",
        env=cache_env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (job,) = job_dirs(tmp_path)
    res = json.loads((job / "results.json").read_text())
    seed = 42  # train.seed: the synthetic splits are generated from it
    test = synth.squad_json(60, seed + 200003, True)["data"]
    test_ids = {q["id"] for a in test for p in a["paragraphs"] for q in p["qas"]}
    predicted = json.loads((job / "predict_predictions.json").read_text())
    assert set(predicted) == test_ids and res["predict"]["examples"] == 60
    assert set(json.loads((job / "predict_nbest_predictions.json").read_text())) == test_ids
    assert set(json.loads((job / "predict_null_odds.json").read_text())) == test_ids
    # evaluation: rescore the written predictions and null odds with the official v2.0 rules
    dev = synth.squad_json(60, seed + 100003, True)["data"]
    preds = json.loads((job / "eval_predictions.json").read_text())
    odds = json.loads((job / "eval_null_odds.json").read_text())
    want, _ = ref.v2_evaluate(
        dev, preds, odds, na_prob_thresh=0.0
    )  # train.null_score_diff_threshold
    got = {
        "exact": res["exact_match"],
        "f1": res["f1"],
        "total": res["count"],
        **{k: res[k] for k in want if k not in ("exact", "f1", "total")},
    }
    assert (
        got == dict(want)
        and res["rules"] == "squad-v2.0"
        and "HasAns_total" in res
        and "NoAns_total" in res
    )
    # evaluated at steps 4 and 8; the best by eval f1 was kept (save_total_limit=1 keeps it) and ended with
    curves = tensorboard_scalars(job / "tensorboard")
    evals = dict(curves["eval/f1"])
    assert sorted(evals) == [4, 8]
    best_step = max(evals, key=lambda s: (evals[s], -s))
    assert (
        res["best_checkpoint"].endswith(f"checkpoint-{best_step}")
        and Path(res["best_checkpoint"]).is_dir()
    )
    assert abs(res["best_metric"] - evals[best_step]) < 1e-4
    # `hpcqa status JOB` says where the curves and the files are
    st = cli("status", job.name.split("-")[0], env=cache_env)
    assert st.returncode == 0, st.stderr
    assert f"tensorboard --logdir {job / 'tensorboard'}" in st.stdout
    js = json.loads(cli("status", job.name.split("-")[0], "--json", env=cache_env).stdout)[0]
    assert js["outputs"]["predict null odds"] == str(job / "predict_null_odds.json")
    # the detail view names the folder once, and the files in it by name
    assert re.search(r"predict null odds +predict_null_odds\.json", st.stdout), st.stdout
    # v2: answerable and unanswerable questions apart, and the threshold that would have scored best, in the
    # summary and status JOB, as the official script's numbers
    for text in (" ".join(r.stdout.split()), " ".join(st.stdout.split())):
        for key, label in (("HasAns", "answerable"), ("NoAns", "unanswerable")):
            line = f"{label}: EM {want[key + '_exact']:.2f} F1 {want[key + '_f1']:.2f} ({want[key + '_total']} questions)"
            assert line in text, (line, text)
        assert (
            f"best train.null_score_diff_threshold {want['best_f1_thresh']:.4g}: F1 {want['best_f1']:.2f}"
            in text
        )
    # load_best_model_at_end: the model kept is the best checkpoint's
    from safetensors.torch import load_file

    kept, best = (
        load_file(str(p / "model.safetensors"))
        for p in (job / "model", Path(res["best_checkpoint"]))
    )
    assert kept.keys() == best.keys() and all(kept[k].equal(best[k]) for k in kept)


def test_failing_rank_fails_the_job(cli, tmp_path, cache_env):
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        *TINY,
        "--set",
        "train.fail_at_step=2",
        "--set",
        "train.save_steps=1",
        env=cache_env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED" in r.stderr and "rank 1" in r.stderr and "fail_at_step" in r.stderr
    assert "Traceback" not in r.stderr
    (job,) = job_dirs(tmp_path)
    assert not (job / "results.json").exists()
    # the checkpoint saved before the failure outlives it, whole (train.resume_from can continue from it)
    saved = job / "checkpoints" / "checkpoint-1"
    assert (saved / "trainer_state.json").is_file() and (saved / "hpcqa-complete.json").is_file()


def one_rank_plan(tmp_path: Path, *extra: str) -> Path:
    """One rank of the tiny quickstart, 6 steps, a checkpoint every 3, its output in tmp_path, plus `extra`
    overrides: its plan written to tmp_path/plan.json (the file a rendered script's ranks read)."""
    from hpcqa.core import config, plan

    sets = [a for a in TINY if a != "--set"] + [f"job.output_dir={json.dumps(str(tmp_path))}"]
    sets += ["cluster.sockets_per_node=1", "launch.ranks_per_socket=1", "train.max_steps=6"]
    cfg = config.load(ROOT / "configs/quickstart.toml", [*sets, "train.save_steps=3", *extra])
    p = tmp_path / "plan.json"
    p.write_text(plan.build_plan(cfg, hostprobe.probe_host()).dumps())
    return p


def test_restart_resumes_from_checkpoint(tmp_path, cache_env):
    """A rank restarted in the same job folder picks up the last checkpoint (what a requeue does)."""
    import subprocess
    import sys

    p = one_rank_plan(tmp_path)
    job = tmp_path / "job"
    env = {**os.environ, **cache_env, "HPCQA_JOB_DIR": str(job)}
    cmd = [
        sys.executable,
        "-m",
        "hpcqa.rank",
        "--plan",
        str(p),
        "--",
        sys.executable,
        "-m",
        "hpcqa.rank.train",
        "--plan",
        str(p),
    ]
    assert subprocess.run(cmd, env=env, capture_output=True, cwd=ROOT).returncode == 0
    first = json.loads((job / "results.json").read_text())
    assert first["resumed_from"] is None and first["global_steps"] == 6
    env["HPCQA_JOB_DIR"] = str(job)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    again = json.loads((job / "results.json").read_text())
    assert again["resumed_from"].endswith("checkpoint-6")


@pytest.mark.parametrize("started", ["from a terminal", "from a background job"])
def test_local_job_in_registry_status_and_cancel(tmp_path, cache_env, started):
    """A --no-wait job is listed, running, and `hpcqa cancel` stops it -- by the SIGINT its controller hears, well
    within the 10 s after which cancel kills what is left: also when submit ran in a background job (`nohup ... &`
    in a script), which starts commands with SIGINT ignored."""
    import subprocess
    import sys
    import time

    env = {**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    out, err = tmp_path / "submit.out", tmp_path / "submit.err"
    with (
        open(out, "w") as f,
        open(err, "w") as e,
    ):  # the background controller inherits them: no pipes
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "hpcqa",
                "submit",
                "configs/quickstart.toml",
                *TINY,
                "--set",
                "train.max_steps=100000",
                "--set",
                f"job.output_dir={json.dumps(str(tmp_path))}",
                "--no-wait",
            ],
            stdout=f,
            stderr=e,
            env=env,
            cwd=ROOT,
            timeout=60,
            preexec_fn=as_background if started == "from a background job" else as_foreground,
        )
    assert r.returncode == 0, err.read_text()
    job_id = out.read_text().strip()

    def state():
        s = subprocess.run(
            [sys.executable, "-m", "hpcqa", "status", "--json", job_id],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        return json.loads(s.stdout)[0]

    end = time.time() + 60
    while state()["state"] != "RUNNING" and time.time() < end:
        time.sleep(1)
    assert state()["state"] == "RUNNING" and state()["executor"] == "local"
    while (
        len(list(tmp_path.glob("quickstart/*/ranks/rank-*.phase.json"))) < 2 and time.time() < end
    ):
        time.sleep(0.5)  # both ranks in hpcqa's code: Python hears SIGINT from here on
    c = subprocess.run(
        [sys.executable, "-m", "hpcqa", "cancel", job_id],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert c.returncode == 0, c.stderr
    end = time.time() + 30
    while time.time() < end:
        try:
            os.kill(int(job_id), 0)
            time.sleep(0.5)
        except ProcessLookupError:
            break
    else:
        raise AssertionError("the local controller survived hpcqa cancel")
    assert state()["state"] == "CANCELLED"
    # the ranks heard the SIGINT (Python's KeyboardInterrupt, wherever it found them), not the SIGKILL cancel
    # sends what is left after 10 s (which leaves no trace in their logs)
    (folder,) = job_dirs(tmp_path)
    for log in sorted(folder.glob(f"{job_id}_[01]_log.err")):
        assert "KeyboardInterrupt" in log.read_text(), (
            f"{log.name}: the SIGINT was not heard\n" + log.read_text()[-1500:]
        )
    assert not processes_running(f"submitit.core._submit {tmp_path}"), (
        "rank processes survived the cancel"
    )
    assert not list((tmp_path / "quickstart").glob("%j-*")), (
        "submitit's staging folder was left behind"
    )


@pytest.mark.parametrize(
    "how", ["SIGINT to the group", "SIGTERM", "SIGHUP", "SIGHUP under nohup, then SIGTERM"]
)
def test_ctrl_c_stops_every_rank_cleanly(tmp_path, cache_env, how):
    """Ctrl-C as a terminal sends it (SIGINT to the foreground process group, ours, made for the test); a CI
    runner stopping the command (SIGTERM) or a closed terminal (SIGHUP), to the hpcqa process alone, do the same.
    Under `nohup` (SIGHUP ignored, SIGINT too, as `nohup cmd &` leaves them) a closed terminal stops nothing: the
    job trains on, and the SIGTERM after it stops every rank -- though the ranks inherited nothing that hears it."""
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    nohup = how.startswith("SIGHUP under nohup")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpcqa",
            "submit",
            "configs/quickstart.toml",
            *TINY,
            "--set",
            "train.max_steps=100000",
            "--set",
            f"job.output_dir={json.dumps(str(tmp_path))}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
        preexec_fn=as_background if nohup else as_foreground,
    )
    end = time.time() + 120
    while time.time() < end and not list(tmp_path.glob("quickstart/*/progress.json")):
        time.sleep(0.5)
    if nohup:
        (progress,) = tmp_path.glob("quickstart/*/progress.json")
        os.kill(p.pid, signal.SIGHUP)
        step = json.loads(progress.read_text())["step"]
        end = time.time() + 60
        while time.time() < end and json.loads(progress.read_text())["step"] < step + 4:
            time.sleep(0.5)
        assert p.poll() is None and json.loads(progress.read_text())["step"] >= step + 4, (
            "nohup's job stopped"
        )
        os.kill(p.pid, signal.SIGTERM)
    elif how == "SIGINT to the group":
        os.killpg(p.pid, signal.SIGINT)
    else:
        os.kill(p.pid, getattr(signal, how))
    t0 = time.time()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and time.time() - t0 < 15, err
    assert "Traceback" not in err and "cancelled" in err
    (job,) = job_dirs(tmp_path)
    assert sorted(d.name for d in (tmp_path / "quickstart").iterdir()) == sorted(
        ["code", "plans", job.name]
    )  # the snapshot of hpcqa the ranks imported
    st = subprocess.run(
        [sys.executable, "-m", "hpcqa", "status", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert [j["state"] for j in json.loads(st.stdout)] == ["CANCELLED"]
    end = time.time() + 15
    while time.time() < end and os.path.exists(f"/proc/{job.name.split('-')[0]}"):
        time.sleep(0.5)
    assert not os.path.exists(f"/proc/{job.name.split('-')[0]}"), (
        "the local controller survived Ctrl-C"
    )


def test_a_killed_rank_is_named_with_its_signal(tmp_path, cache_env):
    """kill -9 of one rank: it writes nothing itself; its wrapper records it, the job fails within
    seconds, and the report and `hpcqa logs` name that rank and the signal, not the survivor's error."""
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpcqa",
            "submit",
            "configs/quickstart.toml",
            *TINY,
            "--set",
            "train.max_steps=100000",
            "--set",
            f"job.output_dir={json.dumps(str(tmp_path))}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    end = time.time() + 120
    while time.time() < end and not list(tmp_path.glob("quickstart/*/progress.json")):
        time.sleep(0.5)
    (job,) = job_dirs(tmp_path)
    victim = json.loads((job / "ranks" / "rank-1.json").read_text())[
        "pid"
    ]  # the training process of rank 1
    os.kill(victim, signal.SIGKILL)
    t0 = time.time()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1 and time.time() - t0 < 10, err
    first = err.split("FAILED", 1)[1].splitlines()[1]
    assert "rank 1" in first and "SIGKILL" in first, err
    logs = subprocess.run(
        [sys.executable, "-m", "hpcqa", "logs", job.name.split("-")[0]],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert (
        logs.returncode == 0 and "first failure: rank 1" in logs.stderr and "SIGKILL" in logs.stderr
    )


def test_a_second_local_job_avoids_or_refuses_busy_cores(tmp_path, cache_env):
    import subprocess
    import sys
    import time

    env = {**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    one_core = ["--set", "cluster.cores_per_socket=1", "--set", "launch.ranks_per_socket=1"]

    def submit(out, *extra, wait=True):
        args = [
            sys.executable,
            "-m",
            "hpcqa",
            "submit",
            "configs/quickstart.toml",
            *TINY,
            *one_core,
            "--set",
            f"job.output_dir={json.dumps(str(out))}",
            *extra,
            *([] if wait else ["--no-wait"]),
        ]
        with open(tmp_path / "a.out", "w") as o, open(tmp_path / "a.err", "w") as e:
            if not wait:  # the background controller inherits them: files, not pipes
                return subprocess.run(args, stdout=o, stderr=e, env=env, cwd=ROOT, timeout=120)
        return subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)

    a = submit(tmp_path / "a", "--set", "train.max_steps=100000", wait=False)
    assert a.returncode == 0, (tmp_path / "a.err").read_text()
    a_id = (tmp_path / "a.out").read_text().strip()
    try:
        end = time.time() + 60
        while time.time() < end and not list(
            (tmp_path / "a").glob("quickstart/*/ranks/rank-0.json")
        ):
            time.sleep(0.5)
        refused = submit(tmp_path / "b", "--set", 'launch.on_busy_cores="refuse"')
        assert refused.returncode == 2 and f"pinned by job {a_id} on 0" in refused.stderr, (
            refused.stderr
        )
        assert "Traceback" not in refused.stderr
        moved = submit(tmp_path / "c", "--set", "train.max_steps=3", "--set", "train.do_eval=false")
        assert moved.returncode == 0 and "runs on the free CPUs 1" in moved.stderr, moved.stderr
        (job,) = job_dirs(tmp_path / "c")
        assert json.loads((job / "ranks" / "rank-0.json").read_text())["cpus"] == [1]
    finally:
        subprocess.run(
            [sys.executable, "-m", "hpcqa", "cancel", a_id], env=env, cwd=ROOT, capture_output=True
        )


def test_a_job_on_cores_another_process_keeps_busy_is_told_so(tmp_path, cache_env):
    """A one-rank job sharing its core with a process that spins on it (launch.on_busy_cores = "share"): its CPU
    efficiency is low because the core was busy, and `status JOB` says that -- the rank's own schedstat -- instead of
    pointing at the pinning."""
    import subprocess
    import sys

    env = {**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    hog = subprocess.Popen(
        [sys.executable, "-c", "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"]
    )
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "hpcqa",
                "submit",
                "configs/quickstart.toml",
                *TINY,
                "--set",
                "cluster.cores_per_socket=1",
                "--set",
                "launch.ranks_per_socket=1",
                "--set",
                "train.max_steps=3",
                "--set",
                "train.do_eval=false",
                "--set",
                'launch.on_busy_cores="share"',
                "--set",
                f"job.output_dir={json.dumps(str(tmp_path))}",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=600,
        )
    finally:
        hog.kill()
        hog.wait()
    assert r.returncode == 0, r.stderr
    (job,) = job_dirs(tmp_path)
    usage = json.loads((job / "ranks" / "rank-0.json").read_text())["usage"]
    assert usage["cpus"] == 1 and usage["run_delay_s"] >= 0.2 * usage["wall_s"], usage
    st = subprocess.run(
        [sys.executable, "-m", "hpcqa", "status", job.name.split("-")[0]],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "300"},
        cwd=ROOT,
        timeout=60,
    )
    said = " ".join(st.stdout.split())
    assert (
        "the ranks were ready to run but waited for their cores" in said and "busy node" in said
    ), st.stdout


def test_one_node_mpirun_script_runs_here(cli, tmp_path, cache_env):
    """The plain-machine mpirun script on this one host: Intel MPI's hydra starts 2 ranks (no ssh for the
    local host), each bound by the wrapper to its own core, and the job completes."""
    import shutil
    import socket
    import subprocess
    import sys

    assert shutil.which("mpirun"), (
        "Intel MPI (pip install impi-rt) is needed: scripts/test.sh installs it"
    )
    script = tmp_path / "run.sh"
    r = cli(
        "render",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        *TINY,
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
        env=cache_env,
    )
    assert r.returncode == 0, r.stderr
    run = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, **cache_env},
    )
    (folder,) = [
        p
        for p in (tmp_path / "quickstart").iterdir()
        if p.name.startswith(socket.gethostname().split(".")[0])
    ]
    assert run.returncode == 0, run.stderr[-2000:]
    reports = [json.loads((folder / "ranks" / f"rank-{k}.json").read_text()) for k in (0, 1)]
    assert [rep["env_source"] for rep in reports] == ["intel-mpi", "intel-mpi"]
    assert reports[0]["cpus"] != reports[1]["cpus"] and all(
        rep["bind_note"] == "as planned" for rep in reports
    )
    assert not any(rep["warnings"] for rep in reports)
    assert json.loads((folder / "results.json").read_text())["world_size"] == 2


def test_the_api_example_runs(tmp_path, cache_env):
    """examples/api_quickstart.py as a user runs it (from a directory with the configs): a job watched to the end
    through the API, then a local sweep narrowed to 2 variants (a grid point and the hand-picked one)."""
    import subprocess
    import sys

    (tmp_path / "configs").symlink_to(ROOT / "configs")
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "api_quickstart.py")],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=900,
        env={**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "registry.sqlite")},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks on 1 node(s), executor local" in r.stdout and '"f1"' in r.stdout
    assert re.search(r"Sweep\('local-\d+', 2 tasks\) \{('\d+': 'COMPLETED'(, )?){2}\}", r.stdout), (
        r.stdout[-2000:]
    )
    assert len(list((tmp_path / "logs" / "sweep-quickstart").glob("*/results.json"))) == 2


def submit_no_wait(env: dict, tmp_path, *sets: str) -> tuple[str, str]:
    """`hpcqa submit` of the tiny quickstart with --no-wait (and these --set values) -> (the job id, its stderr)."""
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcqa",
            "submit",
            "configs/quickstart.toml",
            *TINY,
            *(a for v in sets for a in ("--set", v)),
            "--set",
            f"job.output_dir={json.dumps(str(tmp_path))}",
            "--no-wait",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1], r.stderr


def test_a_job_stuck_at_the_rendezvous_says_where_and_for_how_long(tmp_path, cache_env):
    """The fault as users meet it: a MASTER_ADDR the ranks cannot resolve (here a stale one in the submitting shell,
    which the ranks inherit). The scheduler shows RUNNING; status shows each rank waiting at the rendezvous, and after
    half of train.ddp_timeout_s (90 s here; a minute for timeouts over two) a warning naming the ranks, the address
    and when they give up. Real ranks, real c10d rendezvous."""
    import subprocess
    import sys
    import time

    env = {
        **os.environ,
        **cache_env,
        "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite"),
        "MASTER_ADDR": "rendezvous.invalid",
    }
    job_id, said = submit_no_wait(env, tmp_path, "train.ddp_timeout_s=90")

    def status(*extra):
        s = subprocess.run(
            [sys.executable, "-m", "hpcqa", "status", *extra, job_id],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        assert s.returncode == 0, s.stderr
        return s.stdout

    try:
        assert "MASTER_ADDR=rendezvous.invalid is set where you submit" in " ".join(said.split()), (
            said
        )
        end, view = time.time() + 150, {}
        while time.time() < end:
            view = json.loads(status("--json"))[0]
            if any("rank(s) 0, 1 have waited" in n for n in view["notes"]):  # both past 45 s
                break
            time.sleep(3)
        assert view["state"] == "RUNNING"
        assert sorted(p["rank"] for p in view["phases"]) == [0, 1], view["phases"]
        assert {p["phase"] for p in view["phases"]} == {"rendezvous"}
        assert all(p["detail"].startswith("rendezvous.invalid:") for p in view["phases"])
        stuck = next(n for n in view["notes"] if "have waited" in n)
        waited = stuck.removeprefix("rank(s) 0, 1 have waited ").split()[0]  # the longest: M:SS
        assert re.fullmatch(r"[01]:\d\d", waited) and "rendezvous.invalid:" in stuck, stuck
        # past half of 90 s (the ranks arrive seconds apart: this is the first's), not past 90 s
        assert 45 <= int(waited[0]) * 60 + int(waited[2:]) < 90, stuck
        assert stuck.endswith("give up after train.ddp_timeout_s (1:30)"), stuck
        text = " ".join(status().split())
        assert (
            "waiting at the rendezvous (rendezvous.invalid:" in text
            and "does not resolve on this node" in text
        ), text
    finally:
        subprocess.run(
            [sys.executable, "-m", "hpcqa", "cancel", job_id],
            capture_output=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
    end = time.time() + 60
    while time.time() < end and json.loads(status("--json"))[0]["state"] == "RUNNING":
        time.sleep(1)
    after = json.loads(status("--json"))[0]
    assert after["state"] == "CANCELLED" and not after["phases"], after


def test_logs_follow_streams_a_running_job_to_its_last_line(tmp_path, cache_env):
    """`hpcqa logs JOB -f` started right after submit: it waits for the log, prints lines as the rank writes them, and
    ends when the job does -- with the lines written just before the end (rank 0's "done: EM ..."), not without."""
    import subprocess
    import sys
    import time

    env = {**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    job_id, _ = submit_no_wait(env, tmp_path, "train.max_steps=8")
    follow = subprocess.Popen(
        [sys.executable, "-m", "hpcqa", "logs", job_id, "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    seen: list[tuple[float, str]] = []
    for line in follow.stdout:
        seen.append((time.time(), line.rstrip("\n")))
    assert follow.wait(timeout=300) == 0, follow.stderr.read()
    text = "\n".join(line for _, line in seen)
    assert "attempt 0 starts" in text and "rank 0/2" in text, text
    assert re.search(r"done: EM \d+\.\d\d\s+F1 \d+\.\d\d", text), text[-2000:]
    assert any("done: EM" in line for _, line in seen[-5:]), text[
        -2000:
    ]  # the last lines, read after the end
    # streamed: the first line was printed while rank 0 still trained, well before the last one; a follow that only
    # found a finished log prints every line in one burst (under 0.1 s apart, measured)
    first = next(t for t, line in seen if "attempt 0 starts" in line)
    done = next(t for t, line in seen if "done: EM" in line)
    assert done - first > 1.0, (
        f"nothing was printed until the job had ended ({done - first:.2f} s apart)"
    )
    again = subprocess.run(
        [sys.executable, "-m", "hpcqa", "logs", job_id],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert again.stdout.splitlines() == [line for _, line in seen], (
        "-f printed something other than the log"
    )


def test_an_unresolvable_master_addr_fails_the_job_in_ddp_timeout_with_its_reason(
    tmp_path, cache_env
):
    """torch's store retries a name that does not resolve long past its timeout (12 minutes with 120 s, measured): each
    rank checks the name itself, and after train.ddp_timeout_s the job FAILS, saying which name and what to do."""
    import subprocess
    import sys
    import time

    env = {
        **os.environ,
        **cache_env,
        "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite"),
        "MASTER_ADDR": "rendezvous.invalid",
    }
    t0 = time.time()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcqa",
            "submit",
            "configs/quickstart.toml",
            *TINY,
            "--set",
            "train.ddp_timeout_s=15",
            "--set",
            f"job.output_dir={json.dumps(str(tmp_path))}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode != 0 and time.time() - t0 < 120, r.stderr[-3000:]
    job_id = next(w for w in r.stderr.split() if w.rstrip(":").isdigit()).rstrip(":")
    s = subprocess.run(
        [sys.executable, "-m", "hpcqa", "status", job_id],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "400"},
        cwd=ROOT,
        timeout=60,
    )
    text = " ".join(s.stdout.split())
    assert "FAILED" in text and "MASTER_ADDR 'rendezvous.invalid' does not resolve" in text, text
    assert "unset a stale MASTER_ADDR" in text, text


def tiny_results(cli, out: Path, env: dict, *sets: str) -> dict:
    """A finished tiny quickstart job (no evaluation) with these --set values, written under `out` -> its results."""
    r = cli(
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        "train.do_eval=false",
        *(a for v in sets for a in ("--set", v)),
        "--set",
        f"job.output_dir={json.dumps(str(out))}",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (job,) = job_dirs(out)
    return json.loads((job / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.alone  # a cold compile: ~65 CPU-s, 29 g++ runs; beside 3 workers it took 113-157 s, alone ~60 s
def test_train_compile_runs_the_compiled_model_and_reports_its_cost(cli, tmp_path, cache_env):
    """train.compile = true: the Trainer's torch.compile with Inductor's C++ kernels (a real compile: g++ runs), with
    dynamic shapes from the start and the encoder's layers compiled once. The results say what compiling cost and
    how many graphs Dynamo made; the loss is the eager run's to float rounding (compiled kernels sum in another
    order), never another model. One rank: compiling is each rank's own work (a second rank on this machine's two
    cores compiles the same graphs again, ~70 s of CPU), and what this holds is compiling, not DDP. The eager job
    runs beside the compiled one (two local jobs at once, as a user may start them): it is done long before.
    `alone`: the suite's dearest test in CPU, so it runs where it does not share the two cores with three workers."""
    from concurrent.futures import ThreadPoolExecutor

    def run(flag: str) -> dict:
        return tiny_results(
            cli,
            tmp_path / flag,
            {**cache_env, "TORCH_LOGS": "dynamo"} if flag == "true" else cache_env,
            "train.max_steps=8",
            "train.comm_probe_steps=0",
            "launch.ranks_per_socket=1",
            f"train.compile={flag}",
        )

    with ThreadPoolExecutor(2) as pool:
        res = dict(zip(("false", "true"), pool.map(run, ("false", "true"))))
    assert res["false"]["world_size"] == res["true"]["world_size"] == 1
    assert res["false"]["compile"] is None
    c = res["true"]["compile"]
    assert c["backend"] == "inductor" and c["graphs"] >= 1 and c["compile_s"] > 1, c
    losses = {flag: r["train_loss"] for flag, r in res.items()}
    assert abs(losses["true"] - losses["false"]) <= 1e-3 * abs(losses["false"]), losses
    # each graph traced once: no float setting of a module left symbolic, traced, compiled in part, thrown away
    # and traced again (torch's default under dynamic shapes; Dynamo's own log, which the rank's stderr holds)
    compiled = Path(res["true"]["job_dir"])
    log = "".join(p.read_text(errors="replace") for p in compiled.glob("*_log.err"))
    assert "torchdynamo done tracing" in log, compiled
    assert "Restarting analysis" not in log, [ln for ln in log.splitlines() if "Restarting" in ln]


def test_ddp_compress_sends_the_gradients_in_16_bits_and_says_so(cli, tmp_path, cache_env):
    """train.ddp_compress = "fp16" / "bf16" on 2 real gloo ranks: a compression hook is registered (accelerate's
    fp16 one; hpcqa's own bf16 one, since torch refuses its stock bf16 hook on a build without CUDA/NCCL), so the
    gradients are rounded to 16 bits before they are summed (the weights are not the fp32 run's, the loss is close
    to it, and bf16 rounds differently from fp16); the results say what was sent and the probe's all-reduce alone
    is timed in 16 bits."""
    res = {
        mode: tiny_results(
            cli,
            tmp_path / mode,
            cache_env,
            "train.max_steps=6",
            "train.comm_probe_steps=2",
            f"train.ddp_compress={mode}",
        )
        for mode in ("none", "fp16", "bf16")
    }
    plain = res["none"]["comm"]
    assert plain["compress"] == "none" and plain["wire_bucket_bytes"] == plain["bucket_bytes"]
    for mode in ("fp16", "bf16"):
        sent = res[mode]["comm"]
        assert sent["compress"] == mode and sent["wire_bucket_bytes"] == [
            b // 2 for b in sent["bucket_bytes"]
        ]
        assert res["none"]["weights_digest"] != res[mode]["weights_digest"]
        assert res[mode]["train_loss"] == pytest.approx(res["none"]["train_loss"], rel=1e-2)
    assert res["fp16"]["weights_digest"] != res["bf16"]["weights_digest"]


def test_train_compile_without_a_cpp_compiler_stops_with_the_fix(cli, tmp_path, cache_env):
    """A node without g++ (the rendered Dockerfile's image has none): train.compile = true stops every rank before
    training with one line naming the host and the fix, not Inductor's traceback from the first step."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name in ("g++", "c++", "clang++") or (bare / name).exists():
                continue
            (bare / name).symlink_to(Path(d) / name)
    import shutil

    assert shutil.which("g++", path=str(bare)) is None and shutil.which("python3", path=str(bare))
    env = {**cache_env, "PATH": str(bare), "CXX": ""}
    r = cli(
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        "train.compile=true",
        "--set",
        "train.max_steps=2",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    text = " ".join(r.stderr.split())
    assert (
        "has no C++ compiler" in text
        and "apt-get install g++" in text
        and "train.compile = false" in text
    ), text
    assert "Traceback" not in r.stderr
    (job,) = job_dirs(tmp_path / "out")
    assert not (job / "results.json").exists()


def test_save_model_false_keeps_scores_only(cli, tmp_path, cache_env):
    """train.save_model = false (a sweep that wants scores only): no model folder, results.json says none."""
    res = tiny_results(cli, tmp_path, cache_env, "train.save_model=false", "train.max_steps=2")
    (job,) = job_dirs(tmp_path)
    assert (
        res["model_dir"] is None and not (job / "model").exists() and not list(job.glob(".model-*"))
    )
