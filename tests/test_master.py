"""bf16 weights with fp32 master weights (hpcqa/rank/train/master.py, train.bf16_weights): the optimizer against
plain fp32 AdamW, its state round trip, the LR scheduler reaching it, the final save; and tiny real runs."""

import json
import os
import subprocess
import sys

import pytest
import torch

from hpcqa.rank.train import master
from tests.conftest import ROOT, free_port, tiny_bert

TINY = [
    "model.name_or_path=builtin:tiny-bert",
    "data.synthetic_train_examples=120",
    "data.synthetic_eval_examples=30",
    "train.num_train_epochs=1",
    "train.logging_steps=2",
    "train.bf16=true",
    "train.do_eval=false",
    "train.comm_probe_steps=0",
    "cluster.sockets_per_node=1",
    "launch.ranks_per_socket=1",
]


def small(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3)
    )


def groups(model: torch.nn.Module) -> list[dict]:
    """The Trainer's split: weight decay on the matrices, none on biases and norms."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


def order(model: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters in the optimizer's order (its groups')."""
    return [p for g in groups(model) for p in g["params"]]


def pair(fused: bool = True):
    """(fp32 model, its AdamW, bf16 model, its MasterAdamW): the same weights, the masters the fp32 ones (as the
    rank's model starts: its fp32 weights, then cast to bf16)."""
    ref = small()
    bf = small()
    wrapped = master.MasterAdamW.wrap(torch.optim.AdamW(groups(bf), lr=1e-2, fused=fused))
    bf.to(torch.bfloat16)
    return ref, torch.optim.AdamW(groups(ref), lr=1e-2, fused=fused), bf, wrapped


def same_grads(ref: torch.nn.Module, bf: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p, q in zip(ref.parameters(), bf.parameters()):
        grad = torch.randn(p.shape, generator=g).to(torch.bfloat16)  # exactly representable in both
        p.grad, q.grad = grad.float(), grad.clone()


@pytest.mark.parametrize("fused", [True, False])
def test_masters_step_as_fp32_adamw_and_the_params_are_them_rounded(fused):
    ref, opt, bf, wrapped = pair(fused)
    for step in range(5):
        same_grads(ref, bf, step)
        opt.step()
        wrapped.step()
        wrapped.zero_grad()
        assert all(p.grad is None for p in bf.parameters())
    for (m, p), r in zip(wrapped.pairs(), order(ref)):
        assert m.dtype == torch.float32 and p.dtype == torch.bfloat16
        torch.testing.assert_close(m, r, rtol=1e-6, atol=1e-7)
        assert torch.equal(p, m.to(torch.bfloat16))
    assert wrapped.matches() and wrapped.defaults["fused"] is fused


def test_a_parameter_without_a_gradient_stays_put():
    _, _, bf, wrapped = pair()
    before = [m.clone() for m, _ in wrapped.pairs()]
    for i, p in enumerate(bf.parameters()):
        p.grad = torch.ones_like(p) if i == 0 else None
    wrapped.step()
    moved = [not torch.equal(b, m) for b, (m, _) in zip(before, wrapped.pairs())]
    assert moved == [True] + [False] * (len(moved) - 1)


def test_state_dict_round_trip_carries_the_masters(tmp_path):
    """Saved as the Trainer saves it (torch.save) and loaded as it loads it (weights_only): a fresh optimizer over
    the rounded bf16 weights continues from the fp32 masters, steps as the original."""
    _, _, bf, wrapped = pair()
    for step in range(3):
        same_grads(small(), bf, step)
        wrapped.step()
    torch.save(wrapped.state_dict(), tmp_path / "optimizer.pt")
    bf2 = small(seed=5).to(torch.bfloat16)
    again = master.MasterAdamW(groups(bf2), lr=1e-2, fused=True)
    again.load_state_dict(torch.load(tmp_path / "optimizer.pt", weights_only=True))
    for (m, p), (m2, p2) in zip(wrapped.pairs(), again.pairs()):
        assert torch.equal(m, m2) and torch.equal(p, p2)
        assert not torch.equal(m2, p2.float())  # the masters, not the rounded weights
    for o in (wrapped, again):
        same_grads(small(), bf if o is wrapped else bf2, 9)
        o.step()
    for (m, _), (m2, _) in zip(wrapped.pairs(), again.pairs()):
        assert torch.equal(m, m2)


def test_an_autocast_checkpoint_without_masters_loads_from_the_params():
    _, opt, bf, wrapped = pair()
    state = torch.optim.AdamW(groups(small()), lr=1e-2).state_dict()
    wrapped.load_state_dict(state)
    for m, p in wrapped.pairs():
        assert torch.equal(m, p.float())


def test_the_schedulers_learning_rate_reaches_the_masters_step():
    from transformers import get_linear_schedule_with_warmup

    _, _, bf, wrapped = pair()
    sched = get_linear_schedule_with_warmup(wrapped, num_warmup_steps=0, num_training_steps=4)
    lrs = []
    for step in range(3):
        lrs.append(wrapped.param_groups[0]["lr"])
        same_grads(small(), bf, step)
        wrapped.step()
        sched.step()
    assert lrs == pytest.approx([1e-2, 7.5e-3, 5e-3])
    before = [m.clone() for m, _ in wrapped.pairs()]
    for g in wrapped.param_groups:
        g["lr"] = 0.0
    for p in bf.parameters():
        p.grad = torch.ones_like(p)
    wrapped.step()
    for b, (m, _) in zip(before, wrapped.pairs()):  # lr 0 and decay scaled by lr: nothing moves
        assert torch.equal(b, m)


def test_clipping_the_bf16_grads_clips_what_the_masters_get():
    _, _, bf, wrapped = pair()
    for p in bf.parameters():
        p.grad = torch.full_like(p, 10.0)
    norm = torch.nn.utils.clip_grad_norm_(bf.parameters(), 1.0)
    assert float(norm) > 1.0
    total = torch.linalg.vector_norm(torch.stack([p.grad.float().norm() for p in bf.parameters()]))
    assert float(total) == pytest.approx(1.0, rel=1e-2)


def test_to_bf16_upcasts_the_qa_logits_and_full_precision_saves_the_masters():
    model = tiny_bert(vocab=50, hidden=16)
    opt = master.MasterAdamW.wrap(torch.optim.AdamW(model.parameters(), lr=1e-2))
    assert master.to_bf16(model).startswith("fp32")
    ids = torch.randint(0, 50, (2, 7))
    out = model(
        input_ids=ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4])
    )
    assert out.start_logits.dtype == torch.float32 and out.loss.dtype == torch.float32
    assert model.bert.embeddings.word_embeddings.weight.dtype == torch.bfloat16
    out.loss.backward()
    opt.step()
    with master.full_precision(model, opt) as what:
        assert what == "fp32 masters"
        for m, p in opt.pairs():
            assert p.dtype == torch.float32 and torch.equal(p, m)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters()) and opt.matches()
    with (
        torch.no_grad()
    ):  # weights not the masters rounded (a best checkpoint's loaded), nothing to load from
        next(model.parameters()).add_(1.0)
    with master.full_precision(model, opt) as what:
        assert what.startswith("bf16 weights upcast")


def test_weights_choice():
    assert master.weights_choice("auto", False, False)[0] == "fp32"
    assert master.weights_choice("auto", True, False)[0] == "master"
    assert master.weights_choice("master", True, True)[0] == "autocast"  # IPEX keeps its own
    assert master.weights_choice("autocast", True, False)[0] == "autocast"
    # accumulated micro-batches would sum in bf16: auto keeps autocast, master asked for by name is honoured
    mode, why = master.weights_choice("auto", True, False, 4)
    assert mode == "autocast" and "gradient_accumulation_steps = 4" in why
    assert master.weights_choice("master", True, False, 4)[0] == "master"


# ---------------------------------------------------------------------------------- real tiny runs


def run_rank(tmp_path, job, *sets: str) -> subprocess.CompletedProcess:
    """One rank of a tiny job (as tests/test_local_e2e.py's restart test runs it) in the folder `job`."""
    from hpcqa.core import config, plan
    from hpcqa.executors import hostprobe

    cfg = config.load(
        ROOT / "configs/quickstart.toml",
        # a port of its own: the port derived from the job id is the same for every test's folder named "job"
        TINY
        + [
            f"job.output_dir={json.dumps(str(tmp_path))}",
            f"launch.master_port={free_port()}",
            *sets,
        ],
    )
    p = tmp_path / f"plan-{job.name}.json"
    p.write_text(plan.build_plan(cfg, hostprobe.probe_host()).dumps())
    env = {
        **os.environ,
        "HPCQA_JOB_DIR": str(job),
        "HPCQA_CACHE": str(tmp_path.parent / "hpcqa-cache"),
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}",
    }
    py = [sys.executable, "-m"]
    cmd = py + ["hpcqa.rank", "--plan", str(p), "--"] + py + ["hpcqa.rank.train", "--plan", str(p)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.slow
def test_a_tiny_run_with_master_weights_records_it_and_saves_fp32_masters(tmp_path):
    from transformers import AutoModelForQuestionAnswering

    job = tmp_path / "job"
    r = run_rank(
        tmp_path, job, "train.max_steps=4", "train.save_steps=2", "train.bf16_weights=auto"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((job / "results.json").read_text())
    weights = res["bf16_weights"]
    assert weights["mode"] == "master" and weights["saved"] == "fp32 masters", weights
    assert weights["logits"].startswith("fp32")
    assert res["optimizer"]["master_weights"] and res["optimizer"]["fused"]
    assert res["optimizer"]["class"].endswith("MasterAdamW")
    assert res["global_steps"] == 4 and res["train_loss"] > 0
    model = AutoModelForQuestionAnswering.from_pretrained(res["model_dir"])
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    state = torch.load(job / "checkpoints" / "checkpoint-4" / "optimizer.pt", weights_only=True)
    masters = state[master.MASTERS_KEY]
    saved = dict(model.named_parameters())
    # the saved model is the masters, not their bf16 rounding: some weight is off the bf16 grid
    assert any(not torch.equal(p, p.to(torch.bfloat16).float()) for p in saved.values())
    assert sorted(m.numel() for m in masters) == sorted(p.numel() for p in saved.values())


@pytest.mark.slow
def test_a_resume_continues_from_the_masters(tmp_path):
    """Stopped at step 3 (fail_at_step), resumed to 6: the same weights as a run straight to 6 (dropout and the
    batches follow the seed and the step; the masters, not the rounded bf16 weights, carry on)."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    common = ("train.max_steps=6", "train.save_steps=3", "train.bf16_weights=master")
    assert run_rank(tmp_path, straight, *common).returncode == 0
    first = run_rank(tmp_path, broken, *common, "train.fail_at_step=4")
    assert first.returncode != 0 and (broken / "checkpoints" / "checkpoint-3").is_dir(), (
        first.stderr[-2000:]
    )
    again = run_rank(tmp_path, broken, *common)
    assert again.returncode == 0, again.stderr[-3000:]
    a = json.loads((straight / "results.json").read_text())
    b = json.loads((broken / "results.json").read_text())
    assert b["resumed_from"].endswith("checkpoint-3") and b["bf16_weights"]["mode"] == "master"
    assert b["weights_digest"] == a["weights_digest"]
