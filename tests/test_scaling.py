"""The scaling model (pure), the link store, the prediction's inputs from a recorded run, and `hpcqa scaling`'s
answers. The model against real 2-node runs on a shaped link: test_scaling_slurm.py."""

import json
import math

import pytest

from hpcqa.core import scaling
from hpcqa.errors import UsageError
from hpcqa.record import links, registry, scalingruns
from tests.conftest import run_cli_in_process

MB = 1 << 20


def ring_points(bandwidth, latency, q, sizes=(8, 65536, MB, 4 * MB, 16 * MB)):
    return [[s, 2 * (q - 1) * latency + 2 * (q - 1) / q * s / bandwidth] for s in sizes]


@pytest.mark.parametrize("q", [2, 4, 8])
def test_fit_recovers_the_link_that_made_the_timings(q):
    fit = scaling.fit_link(ring_points(117e6, 150e-6, q), q)
    assert fit["bandwidth_Bps"] == pytest.approx(117e6, rel=1e-3)
    assert fit["latency_s"] == pytest.approx(150e-6, rel=1e-2)


def test_fit_needs_two_sizes():
    with pytest.raises(ValueError):
        scaling.fit_link([[8, 1e-4]], 2)


def test_ring_all_reduce_cost():
    assert scaling.ring_allreduce_s([4 * MB], 1, 1e9, 1e-4) == 0.0
    # 2 ranks: each sends and receives the whole gradient once, two latency-bound steps
    assert scaling.ring_allreduce_s([4 * MB], 2, 1e8, 1e-4) == pytest.approx(2e-4 + 4 * MB / 1e8)
    # many ranks: the bytes on each link approach twice the gradient; latency grows with the ranks
    big = scaling.ring_allreduce_s([4 * MB], 64, 1e8, 0.0)
    assert big == pytest.approx(2 * 63 / 64 * 4 * MB / 1e8)
    # more buckets: same bytes, more latency
    one, four = (scaling.ring_allreduce_s(b, 4, 1e8, 1e-3) for b in ([4 * MB], [MB] * 4))
    assert four - one == pytest.approx(3 * 6 * 1e-3)


def results(
    nodes=1,
    world=1,
    sps=120.0,
    step=0.0667,
    exposed=0.0,
    buckets=(2_349_064,),
    allreduce=0.0,
    features=1000,
):
    return {
        "status": "COMPLETED",
        "nodes": nodes,
        "world_size": world,
        "steady_samples_per_second": sps,
        "train_samples_per_second": sps,
        "step_time_s": step,
        "train_features": features,
        "comm": {"exposed_s": exposed, "bucket_bytes": list(buckets), "allreduce_s": allreduce},
    }


def test_profile_from_results_derives_the_batch_and_names_what_is_missing():
    p = scaling.profile_from_results(results(sps=120.0, step=0.0667), epochs=2.0)
    assert p.samples_per_rank_step == pytest.approx(8.0, rel=1e-3) and p.ranks_per_node == 1
    assert p.train_samples * p.epochs == 2000
    with pytest.raises(ValueError, match="step_time_s"):
        scaling.profile_from_results({**results(), "step_time_s": None})
    with pytest.raises(ValueError, match="comm"):
        scaling.profile_from_results({**results(), "comm": {}})


def test_compressed_gradients_put_half_the_bytes_on_the_link_and_the_prediction_follows():
    """train.ddp_compress: the run records the buckets DDP built (fp32) and what it sent; the model prices what
    was sent, so at 100 Mbit/s two nodes lose about half as much time to the all-reduce."""
    assert scaling.on_the_wire([4 * MB, 3], "fp16") == (2 * MB, 1)
    assert scaling.on_the_wire([4 * MB], "bf16") == (2 * MB,)
    assert scaling.on_the_wire([4 * MB], "none") == (4 * MB,)
    plain = results(sps=120.0, step=8 / 120.0)
    sent = {
        **plain,
        "comm": {
            **plain["comm"],
            "compress": "fp16",
            "wire_bucket_bytes": list(scaling.on_the_wire(plain["comm"]["bucket_bytes"], "fp16")),
        },
    }
    link = scaling.Link(95e6 / 8, 200e-6)
    full, half = (
        scaling.Model.from_run(scaling.profile_from_results(r, epochs=1.0), link).predict([1, 2])[1]
        for r in (plain, sent)
    )
    assert half.allreduce_s == pytest.approx(full.allreduce_s / 2, rel=0.05)
    assert half.samples_per_second > 1.3 * full.samples_per_second


def test_prediction_from_a_one_node_run():
    prof = scaling.profile_from_results(results(sps=120.0, step=8 / 120.0), epochs=1.0)
    fast = scaling.Model.from_run(prof, scaling.Link(1e10 / 8, 20e-6)).predict([1, 2, 4])
    assert fast[0].samples_per_second == pytest.approx(120.0) and fast[0].speedup == 1.0
    assert fast[1].speedup == pytest.approx(2.0, rel=0.05) and fast[2].efficiency > 0.9
    assert fast[0].time_to_train_s == pytest.approx(1000 / 120.0)
    slow = scaling.Model.from_run(prof, scaling.Link(95e6 / 8, 200e-6))
    preds = slow.predict([1, 2, 4])
    # 2.3 MB at 95 Mbit/s: 0.2 s per step against 0.067 s of compute -> two nodes slower than one
    assert preds[1].allreduce_s == pytest.approx(2 * 200e-6 + 2_349_064 / (95e6 / 8), rel=1e-6)
    assert [p.nodes for p in scaling.slower_than_one(preds)] == [2, 4]
    assert slow.overlap == 0.0 and "assumed" in slow.overlap_source


def test_overlap_comes_from_a_multi_node_run_and_not_from_the_link():
    res = results(nodes=2, world=2, sps=150.0, step=16 / 150.0, exposed=0.010, allreduce=0.020)
    m = scaling.Model.from_run(scaling.profile_from_results(res), scaling.Link(95e6 / 8, 200e-6))
    assert m.overlap == pytest.approx(0.5) and "measured on 2 nodes" in m.overlap_source
    (four,) = m.predict([4])
    assert four.exposed_s == pytest.approx(0.5 * four.allreduce_s)
    # one node: nothing to all-reduce over a link, the run's own exposed part is taken out
    (one,) = m.predict([1])
    assert one.step_time_s == pytest.approx(16 / 150.0 - 0.010)


def test_the_best_layout_weighs_compute_against_the_ranks_on_the_link():
    prof = scaling.profile_from_results(results(sps=120.0, step=8 / 120.0))
    m = scaling.Model.from_run(prof, scaling.Link(1e9 / 8, 1e-3))
    # 4 ranks per node compute a step in the same time (4x the samples) but put 4x the ranks on the ring
    best = m.best_layout(8, {1: 8 / 120.0, 4: 8 / 120.0})
    assert best[0] == 4
    # with a huge latency, fewer ranks win
    m2 = scaling.Model.from_run(prof, scaling.Link(1e9 / 8, 0.2))
    assert m2.best_layout(8, {1: 8 / 120.0, 4: 8 / 120.0})[0] == 1


def test_link_store_round_trip_and_keys(tmp_path):
    store = tmp_path / "links.json"
    k = links.key("slurm", "", "gloo")
    assert k == "slurm | partition default | gloo" and links.lookup(k, store) is None
    links.record(
        k, {"bandwidth_Bps": 1e8, "latency_s": 1e-4, "nodes": 2, "points": [[8, 2e-4]]}, "42", store
    )
    assert links.lookup(k, store)["job"] == "42"
    assert links.lookup(links.key("slurm", "cpu", "gloo"), store) is None
    store.write_text("{not json")
    assert links.load(store) == {}


@pytest.mark.parametrize(
    "text,bps", [("10gbit", 1.25e9), ("100mbit", 12.5e6), ("1.5Gbit", 1.875e8), ("117MB/s", 117e6)]
)
def test_parse_rate(text, bps):
    assert scalingruns.parse_rate(text) == pytest.approx(bps)


def test_parse_rate_names_the_fix():
    with pytest.raises(UsageError) as e:
        scalingruns.parse_rate("fast")
    assert "fast" in e.value.render() and "10gbit" in e.value.render()


def _job(tmp_path, reg, jid, res, nodes=1, task="train", state=None, sweep=None):
    folder = tmp_path / f"job{jid}"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(res))
    from hpcqa.core import config

    cfg = config.load(
        "configs/quickstart.toml",
        [
            "model.name_or_path=builtin:tiny-bert",
            f"job.task={task}",
            f"cluster.nodes={nodes}",
            "cluster.executor=slurm",
        ],
    ).to_dict()
    reg.add(
        id=jid,
        name="q",
        executor="slurm",
        folder=str(folder),
        config=cfg,
        source="configs/quickstart.toml",
        nodes=nodes,
        world_size=res.get("world_size") or 1,
        sweep_id=sweep,
        task_index=int(jid.split("_")[1]) if sweep else None,
        variant={"cluster.nodes": nodes} if sweep else None,
    )
    if state:
        reg.update_states([(jid, state, True, None, None)])


def test_a_multi_node_submit_is_warned_when_the_model_says_slower(tmp_path, monkeypatch):
    from hpcqa.core import config, plan
    from hpcqa.executors import hostprobe

    monkeypatch.setenv("HPCQA_LINK_STORE", str(tmp_path / "links.json"))
    reg = registry.Registry(tmp_path / "r.sqlite")
    overrides = [
        "model.name_or_path=builtin:tiny-bert",
        "cluster.nodes=2",
        "cluster.executor=slurm",
    ]
    p = plan.build_plan(config.load("configs/quickstart.toml", overrides), hostprobe.probe_host())
    assert scalingruns.warnings_for(p, reg) == []  # no link, no run: silent
    links.record(
        links.key("slurm", "", p.backend.resolved),
        {"bandwidth_Bps": 95e6 / 8, "latency_s": 2e-4},
        "7",
    )
    assert scalingruns.warnings_for(p, reg) == []  # a link but no run of this shape
    _job(tmp_path, reg, "8", results(sps=120.0, step=8 / 120.0), state="FAILED")
    assert scalingruns.warnings_for(p, reg) == []  # a failed run is no evidence
    _job(
        tmp_path, reg, "9", results(sps=120.0, step=8 / 120.0)
    )  # registry not yet told: results say done
    (w,) = scalingruns.warnings_for(p, reg)
    assert (
        "predicted slower on 2 nodes than on 1" in w
        and "job 9" in w
        and "hpcqa scaling --predict 9" in w
    )
    links.record(
        links.key("slurm", "", p.backend.resolved),
        {"bandwidth_Bps": 1e10 / 8, "latency_s": 2e-5},
        "10",
    )
    assert scalingruns.warnings_for(p, reg) == []  # a fast link: two nodes pay


def test_scaling_cli(cli, tmp_path):
    reg = registry.Registry(tmp_path / "r.sqlite")
    _job(tmp_path, reg, "9", results(sps=120.0, step=8 / 120.0), state="COMPLETED")
    _job(
        tmp_path,
        reg,
        "11",
        {"status": "COMPLETED", "task": "comm", "link": {}},
        nodes=2,
        task="comm",
        state="COMPLETED",
    )
    env = {
        "HPCQA_REGISTRY": str(tmp_path / "r.sqlite"),
        "HPCQA_LINK_STORE": str(tmp_path / "links.json"),
    }
    r = cli("scaling", "--predict", "9", env=env)
    assert r.returncode == 2 and "no link measured" in r.stderr and "hpcqa tune --comm" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli(
        "scaling",
        "--predict",
        "9",
        "--bandwidth",
        "100mbit",
        "--latency-us",
        "200",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["nodes"] for p in out["predictions"]] == [1, 2, 4, 8, 16] and out[
        "slower_than_one_node"
    ] == [2, 4]  # at 8: 0.33 s of all-reduce, 8x the samples
    r = cli("scaling", "--predict", "9", "--bandwidth", "100mbit", env=env)
    assert r.returncode == 0 and "predicted slower than 1" in " ".join(r.stdout.split())
    for args, says in (
        (["9"], "--predict"),
        (["404", "--predict"], "no job 404"),
        (["9", "--predict", "--nodes", "two"], "--nodes"),
        (["9", "--predict", "--bandwidth", "fast"], "10gbit"),
        (["11", "--predict", "--bandwidth", "1gbit"], "measured a link"),
    ):
        r = cli("scaling", *args, env=env)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (
            args,
            r.stderr,
        )


def test_tune_comm_refuses_one_machine(cli):
    r = cli("tune", "configs/quickstart.toml", "--comm", "--set", "cluster.executor=local")
    assert r.returncode == 2 and "cluster.executor" in r.stderr and "Traceback" not in r.stderr


def test_leaders_and_planned_buckets():
    import torch

    from hpcqa.rank.train import commbench

    assert commbench.leaders([0, 0, 1, 1, 2, 2]) == [0, 2, 4] and commbench.leaders(
        [1, 0, 1, 0]
    ) == [1, 0]
    m = torch.nn.Sequential(
        torch.nn.Embedding(4096, 128), torch.nn.Linear(128, 4096)
    )  # 2 MiB + 2 MiB + 16 KiB
    b = commbench.planned_buckets(m, cap_bytes=3 * MB)
    assert b["grad_bytes"] == sum(p.numel() * 4 for p in m.parameters())
    # reverse order: the bias (16 KiB) and the Linear weight (2 MiB) close the 1 MiB first bucket, the embedding next
    assert b["bucket_bytes"] == [4096 * 4 + 128 * 4096 * 4, 4096 * 128 * 4]
    assert math.isclose(sum(b["bucket_bytes"]), b["grad_bytes"])


# one node leader of a 2-rank gloo group; its clock runs FAST times as fast (its own view of `seconds` ends early)
_LEADER = """
import json, sys, time, types
import torch.distributed as dist
from hpcqa.rank.train import commbench
rank, store, fast = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
t0 = time.perf_counter()
commbench.time = types.SimpleNamespace(perf_counter=lambda: t0 + (time.perf_counter() - t0) * fast)
calls = []
real = dist.all_reduce
commbench.dist.all_reduce = lambda t, *a, **k: (calls.append(t.numel()), real(t, *a, **k))[1]
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2,
                        timeout=__import__("datetime").timedelta(seconds=30))
out = commbench.measure_link(rank, sizes=(8, 65536), seconds=0.3)
print(json.dumps({"calls": calls, "points": out["points"]}))
dist.destroy_process_group()
"""


@pytest.mark.process
@pytest.mark.torch
def test_link_leaders_run_the_same_all_reduces_whatever_their_clocks_say(tmp_path):
    """measure_link times each size for about `seconds`: a count of repetitions each leader took from its own clock
    differed now and then, and gloo aborted the job on the mismatched all-reduce (seen in a 2-node `tune --comm`).
    Here one leader's clock runs 4x fast: both still run the same all-reduces, and agree on every point."""
    import subprocess
    import sys

    store = tmp_path / "store"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _LEADER, str(rank), str(store), str(fast)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, fast in ((0, 1.0), (1, 4.0))
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    a, b = (json.loads(o.splitlines()[-1]) for o, _ in outs)
    assert a["calls"] == b["calls"] and len(a["calls"]) >= 2 * 4, (a["calls"], b["calls"])
    assert a["points"] == b["points"] and [p[0] for p in a["points"]] == [8, 65536]


def test_scaling_imports_no_torch(tmp_path):
    import subprocess
    import sys

    reg = registry.Registry(tmp_path / "r.sqlite")
    _job(tmp_path, reg, "9", results(sps=120.0, step=8 / 120.0), state="COMPLETED")
    code = (
        "import sys, io, contextlib\nfrom hpcqa.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main(['scaling', '--predict', '9', '--bandwidth', '1gbit', '--registry', {str(tmp_path / 'r.sqlite')!r}])\n"
        "print(rc, [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["0", "[]"], r.stdout + r.stderr


def test_a_sweep_over_nodes_prints_measured_next_to_predicted(cli, tmp_path):
    reg = registry.Registry(tmp_path / "r.sqlite")
    _job(tmp_path, reg, "70_0", results(sps=120.0, step=8 / 120.0), state="COMPLETED", sweep="70")
    _job(
        tmp_path,
        reg,
        "70_1",
        results(nodes=2, world=2, sps=56.0, step=16 / 56.0, exposed=0.19, allreduce=0.2),
        nodes=2,
        state="COMPLETED",
        sweep="70",
    )
    env = {
        "HPCQA_REGISTRY": str(tmp_path / "r.sqlite"),
        "HPCQA_LINK_STORE": str(tmp_path / "links.json"),
    }
    r = cli("scaling", "70", "--json", env=env)
    assert r.returncode == 0, r.stderr
    rows = {x["nodes"]: x for x in json.loads(r.stdout)["rows"]}
    assert rows[2]["measured"] == 56.0 and rows[2]["predicted"] is None
    links.record(
        links.key("slurm", "", "gloo"),
        {"bandwidth_Bps": 95e6 / 8, "latency_s": 2e-4},
        "69",
        tmp_path / "links.json",
    )
    r = cli("scaling", "70", "--predict", "--json", env=env)
    rows = {x["nodes"]: x for x in json.loads(r.stdout)["rows"]}
    # from the 1-node run: 0.0667 s + 0.2 s of all-reduce for 16 samples
    assert rows[1]["ratio"] == pytest.approx(1.0) and rows[2]["predicted"] == pytest.approx(
        16 / (8 / 120 + 0.1987), rel=0.01
    )
    assert rows[2]["ratio"] == pytest.approx(56.0 / rows[2]["predicted"])
    # the existing scaling study (`hpcqa results`) gains the predicted column
    r = cli("results", "70", env={**env, "COLUMNS": "150"})
    assert r.returncode == 0, r.stderr
    line = next(
        x for x in r.stdout.splitlines() if x.strip().startswith(("│ 2 ", "| 2 ")) and "x" in x
    )
    assert f"{rows[2]['predicted']:.2f}" in line, r.stdout


def test_the_prediction_names_the_best_measured_layout(cli, tmp_path):
    from hpcqa.core import config
    from hpcqa.record import tuned

    reg = registry.Registry(tmp_path / "r.sqlite")
    _job(tmp_path, reg, "9", results(sps=120.0, step=8 / 120.0), state="COMPLETED")
    cfg = config.load(
        "configs/quickstart.toml",
        ["model.name_or_path=builtin:tiny-bert", "cluster.nodes=1", "cluster.executor=slurm"],
    )
    per_node = cfg.domains_per_node
    tuned.record(
        cfg, {1: 120.0 / per_node, cfg.cores_per_domain: 300.0}, "vm", 0.0, tmp_path / "tuned.json"
    )
    env = {
        "HPCQA_REGISTRY": str(tmp_path / "r.sqlite"),
        "HPCQA_TUNE_STORE": str(tmp_path / "tuned.json"),
    }
    r = cli(
        "scaling",
        "--predict",
        "9",
        "--bandwidth",
        "100gbit",
        "--latency-us",
        "1",
        "--nodes",
        "1,4",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    best = json.loads(r.stdout)["best_layout"]
    assert best["4"]["ranks_per_node"] == cfg.cores_per_domain * per_node


def test_time_to_train_follows_epochs_or_max_steps():
    by_epochs = scaling.profile_from_results(
        results(sps=120.0, step=8 / 120.0, features=1200), epochs=2.0
    )
    by_steps = scaling.profile_from_results(results(sps=120.0, step=8 / 120.0), max_steps=300)
    link = scaling.Link(1e10 / 8, 1e-5)
    one, two = scaling.Model.from_run(by_epochs, link).predict([1, 2])
    assert one.time_to_train_s == pytest.approx(
        2400 / 120.0
    ) and two.time_to_train_s == pytest.approx(2400 / two.samples_per_second)
    one, two = scaling.Model.from_run(by_steps, link).predict([1, 2])
    assert one.time_to_train_s == pytest.approx(
        300 * 8 / 120.0
    ) and two.time_to_train_s == pytest.approx(300 * two.step_time_s)


def test_the_link_for_an_efficiency_target_is_the_one_that_gives_it():
    prof = scaling.profile_from_reference(2, 12, 88729, 26 * 60, [25 * MB] * 10)
    assert (
        prof.step_time_s == pytest.approx(1560 / math.ceil(88729 / 24))
        and prof.train_samples == 88729
    )
    link = scaling.Link(1.0, 20e-6)
    need = scaling.Model(prof, link).bandwidth_for(4, 0.9)
    (four,) = scaling.Model(prof, scaling.Link(need, 20e-6)).predict([4])
    assert four.efficiency == pytest.approx(0.9)
    (faster,) = scaling.Model(prof, scaling.Link(need * 1.5, 20e-6)).predict([4])
    assert faster.efficiency > 0.9
    slow = scaling.Model(
        prof, scaling.Link(1.0, 0.05)
    )  # 50 ms a hop: latency alone is over the budget
    assert slow.bandwidth_for(4, 0.9) is None and slow.bandwidth_for(1, 0.9) == 0.0


def test_a_prediction_from_a_config_and_a_time_measured_elsewhere(tmp_path):
    """Intel's published Sapphire Rapids run as input: DistilBERT (its shapes from transformers' documented
    DistilBertConfig defaults, which are distilbert-base-uncased's), 2 ranks per node, batch 12, 26 min per epoch
    of SQuAD v1.1 on one node. The model is built on the meta device: its 66 M parameters give the buckets.
    The CLI runs in this process (run_cli_in_process): each call imports transformers, which this test has already
    imported; as processes, its seven calls took ~20 s of CPU (test_scaling_cli runs `scaling` as a process)."""
    from transformers import DistilBertConfig

    cli = run_cli_in_process
    model = tmp_path / "distilbert"
    model.mkdir()
    DistilBertConfig(architectures=["DistilBertForQuestionAnswering"]).to_json_file(
        str(model / "config.json")
    )
    base = [
        "scaling",
        "--predict",
        "configs/squad_spr.toml",
        "--set",
        "train.per_device_train_batch_size=12",
        "--nodes",
        "1,2,4",
        "--bandwidth",
        "100gbit",
        "--latency-us",
        "20",
    ]
    env = {"HPCQA_LINK_STORE": str(tmp_path / "links.json")}
    r = cli(
        *base,
        "--epoch-time",
        "26m",
        "--features",
        "88729",
        "--set",
        f"model.name_or_path={model}",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    one, two, four = out["predictions"]
    assert one["time_to_train_s"] == pytest.approx(1560, rel=0.01) and 3.0 < four["speedup"] < 4.0
    assert (
        "distilbert, 66.4 M parameters" in out["gradients"]
        and out["profile"]["ranks_per_node"] == 2
    )
    assert (
        out["profile"]["samples_per_rank_step"] == 12
        and 10e9 / 8 < out["bandwidth_needed_Bps"]["4"] < 400e9 / 8
    )
    r = cli(
        *base,
        "--epoch-time",
        "26m",
        "--features",
        "88729",
        "--set",
        f"model.name_or_path={model}",
        env=env,
    )
    assert r.returncode == 0 and "90 % of linear at 4 nodes needs a link of" in " ".join(
        r.stdout.split()
    )
    for extra, says in (
        ([], "--epoch-time 26m --features"),
        (["--epoch-time", "soon", "--features", "9"], "7m30s"),
        (["--epoch-time", "26m", "--features", "-5"], "--features -5"),
        (["--epoch-time", "26m", "--features", "9", "--efficiency", "0"], "--efficiency 0"),
        (
            [
                "--epoch-time",
                "26m",
                "--features",
                "88729",
                "--set",
                f"model.name_or_path={tmp_path / 'absent'}",
            ],
            "model.name_or_path",
        ),
    ):
        r = cli(*base, *extra, env={**env, "HF_HUB_OFFLINE": "1"})
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (
            extra,
            r.stderr,
        )


def test_a_layout_other_than_the_references_is_predicted_and_inverted():
    """The published run: one process of batch 32 on one node, 2 x 32 per node on four. Each rank of the new layout
    gets its share of the node's rate; bandwidth_for_step inverts predict_layout; the published inputs give the
    ~22 Gbit/s the benchmark reports (265 MB of gradients, 7 buckets)."""
    from hpcqa.core import scaling

    buckets = [1 << 20] + [int((265e6 - (1 << 20)) / 6)] * 6
    ref = scaling.profile_from_reference(1, 32, 88729, 26 * 60, buckets)
    assert ref.step_time_s == pytest.approx(26 * 60 / 2773)
    link = scaling.Link(25e9 / 8, 20e-6)
    m = scaling.Model(ref, link)
    assert m.node_rate() == pytest.approx(32 / ref.step_time_s)
    pred = m.predict_layout(4, 2, 32)
    compute = 64 / m.node_rate()
    assert pred.step_time_s == pytest.approx(
        compute + scaling.ring_allreduce_s(buckets, 8, link.bandwidth_Bps, link.latency_s)
    )
    assert m.bandwidth_for_step(4, 2, 32, pred.step_time_s) == pytest.approx(link.bandwidth_Bps)
    published = (7 * 60 + 30) / 347
    assert m.bandwidth_for_step(4, 2, 32, published) * 8 / 1e9 == pytest.approx(21.9, abs=0.3)
    hidden = scaling.Model(ref, link, overlap=0.3)
    assert hidden.bandwidth_for_step(4, 2, 32, published) < m.bandwidth_for_step(
        4, 2, 32, published
    )
    assert (
        m.bandwidth_for_step(4, 2, 32, compute * 0.99) is None
    )  # faster than the compute alone: no link does it
