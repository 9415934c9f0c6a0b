"""train.bf16_weights = "master" with train.compile = true: the config check lets the pair through unchanged (no rule
refuses or rewrites it: only the fused attention is kept from Inductor), so a rank must train it -- bf16 weights in
the compiled model, the fp32 masters in MasterAdamW outside it. Its own module, importing no torch at collection, so
the test can run `alone`: a cold Inductor compile takes both cores for a minute."""

import json
import math

import pytest


@pytest.mark.slow
@pytest.mark.alone  # a cold Inductor compile of the bf16 graphs: 127 s of its 217 here (40 s warm)
def test_master_weights_train_compiled_as_they_train_eager(tmp_path):
    """A few real steps, compiled and eager, from the same seed: both ran master weights (not silently autocast),
    the compiled one through Inductor with hpcqa's attention (the fused kernel is not traced, and the recipe says
    why), the loss the eager run's with the same attention to rounding (4e-6 apart here), the saved model the fp32
    masters."""
    import torch
    from transformers import AutoModelForQuestionAnswering

    from hpcqa.core import config
    from tests.conftest import ROOT
    from tests.test_master import TINY, run_rank

    sets = ("train.max_steps=4", "train.bf16_weights=master")
    cfg = config.load(ROOT / "configs/quickstart.toml", [*TINY, *sets, "train.compile=true"])
    assert (cfg.train.compile, cfg.train.bf16_weights, cfg.model.attention) == (
        True,
        "master",
        "auto",
    )
    res = {}
    for flag in ("true", "false"):
        job = tmp_path / f"compile-{flag}"
        # the eager run with the attention compile picks (hpcqa's, the same dropout masks): one model, two ways
        same = [] if flag == "true" else ['model.attention="hpcqa"']
        r = run_rank(tmp_path, job, *sets, f"train.compile={flag}", *same)
        assert r.returncode == 0, r.stderr[-3000:]
        res[flag] = json.loads((job / "results.json").read_text())
    compiled, eager = res["true"], res["false"]
    for run in (compiled, eager):
        weights = run["bf16_weights"]
        assert weights["mode"] == "master" and weights["saved"] == "fp32 masters", weights
        assert run["optimizer"]["master_weights"] and run["global_steps"] == 4, run["optimizer"]
    c = compiled["compile"]
    assert c["backend"] == "inductor" and c["graphs"] >= 1, c
    assert eager["compile"] is None
    recipe = compiled["step_recipe"]
    assert recipe["attention"] == "hpcqa" and "train.compile" in recipe["attention_reason"], recipe
    assert eager["step_recipe"]["attention"] == "hpcqa"
    losses = (compiled["train_loss"], eager["train_loss"])
    assert all(math.isfinite(x) and x > 0 for x in losses) and losses[0] == pytest.approx(
        losses[1], rel=1e-3
    ), losses
    model = AutoModelForQuestionAnswering.from_pretrained(compiled["model_dir"])
    saved = dict(model.named_parameters())
    assert {p.dtype for p in saved.values()} == {torch.float32}
    # the masters, not their bf16 rounding: some weight is off the bf16 grid
    assert any(not torch.equal(p, p.to(torch.bfloat16).float()) for p in saved.values())
