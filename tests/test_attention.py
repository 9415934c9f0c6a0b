"""hpcqa's training attention and bulk dropout masks (hpcqa.rank.train.attention): the model's recipe, computed
another way. Checked against torch's SDPA and dropout on the same inputs, and on a real (tiny) BERT."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from hpcqa.errors import RankError
from hpcqa.rank.train import attention
from tests.conftest import tiny_bert


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.0, 1e-6])
def test_bulk_masks_keep_the_models_probability(p):
    """The keep rate of a bulk mask is 1 - p to within 2^-17 in expectation and within sampling noise in a draw
    of 4M elements; the scale makes the expected output the input."""
    threshold, keep = attention.keep_threshold(p)
    assert abs(keep - (1 - p)) <= 2**-17
    torch.manual_seed(0)
    mask, scale = attention.keep_mask((1024, 1024), p)
    n = mask.numel()
    rate = mask.float().mean().item()
    sigma = math.sqrt(keep * (1 - keep) / n) + 1e-12
    assert abs(rate - keep) <= 6 * sigma, (rate, keep)
    assert scale == pytest.approx(1 / keep)


def test_bulk_masks_are_uncorrelated_across_the_16_bit_lanes():
    """Four elements come from one 64-bit word: neighbouring elements must still be independent."""
    torch.manual_seed(1)
    mask, _ = attention.keep_mask((1 << 20,), 0.5)
    m = mask.float()
    for lag in (1, 2, 3, 4):
        corr = torch.corrcoef(torch.stack([m[:-lag], m[lag:]]))[0, 1].item()
        assert abs(corr) < 0.005, (lag, corr)


def test_bulk_masks_follow_the_seed():
    torch.manual_seed(7)
    a, _ = attention.keep_mask((1000,), 0.1)
    torch.manual_seed(7)
    b, _ = attention.keep_mask((1000,), 0.1)
    c, _ = attention.keep_mask((1000,), 0.1)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_bulk_masks_are_the_words_random_gives():
    """The words are the generator's 64-bit draws as `random_()` over int64's range gives them (as before
    torch.compile could trace the draw): one draw per word, the same masks for the same seed."""
    torch.manual_seed(11)
    words = torch.empty(250, dtype=torch.int64).random_(-(2**63), None)
    threshold, _ = attention.keep_threshold(0.1)
    torch.manual_seed(11)
    mask, _ = attention.keep_mask((10, 100), 0.1)
    assert torch.equal(mask, (words.view(torch.int16) >= threshold - 2**15).view(10, 100))


def test_the_masks_are_traced_whole_by_torch_compile():
    """Dynamo refuses `Tensor.random_` (under train.compile every dropout of the tiny BERT was a graph break, 17 of
    them). The masks' draw is traced, and so is the padding mask's in-place fill (an autograd.Function): a layer's
    dropouts and its attention compile as one graph (fullgraph: no break) with dynamic shapes, and give eager's
    values and gradients for the same seed."""
    module, mask = nn.Module().train(), _padding_mask()

    def layer(x, q, k, v):
        h = attention.bulk_dropout(x, 0.1)
        return h, attention.attention_forward(module, q, k, v, mask, dropout=0.1)[0]

    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager", dynamic=True)
    runs = []
    for fn in (layer, compiled):
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
        q, k, v = _qkv(4)
        torch.manual_seed(7)
        h, out = fn(x, q, k, v)
        (h.sum() + out.sum()).backward()
        runs.append((h.detach(), out.detach(), x.grad, q.grad, k.grad))
    torch._dynamo.reset()
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    assert not torch.equal(
        runs[0][0], torch.randn(6, 8, generator=torch.Generator().manual_seed(1))
    )


def test_bulk_dropout_matches_a_masked_product_forward_and_backward():
    x = torch.randn(64, 96, requires_grad=True)
    torch.manual_seed(3)
    y = attention.bulk_dropout(x, 0.2)
    torch.manual_seed(3)
    mask, scale = attention.keep_mask(x.shape, 0.2)
    assert torch.allclose(y, x.detach() * mask * scale)
    g = torch.randn_like(y)
    y.backward(g)
    assert torch.allclose(x.grad, g * mask * scale)
    assert torch.equal(attention.bulk_dropout(x, 0.2, training=False), x)


def test_use_bulk_dropout_replaces_every_dropout_with_the_same_p():
    model = nn.Sequential(
        nn.Linear(4, 4), nn.Dropout(0.1), nn.Sequential(nn.Dropout(0.3), nn.ReLU())
    )
    assert attention.use_bulk_dropout(model) == 2
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert [type(m) for m in drops] == [attention.BulkDropout] * 2 and [m.p for m in drops] == [
        0.1,
        0.3,
    ]
    assert set(model.state_dict()) == {"0.weight", "0.bias"}


def _qkv(seed=0, b=2, h=3, s=10, d=8):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=g, requires_grad=True) for _ in range(3)]


def _padding_mask(b=2, s=10):
    keys = torch.ones(b, s, dtype=torch.bool)
    keys[1, 7:] = False
    return keys[:, None, None, :].expand(b, 1, s, s)


def test_attention_without_dropout_is_sdpa():
    """Evaluation (or dropout 0): the same numbers as torch's SDPA, which takes its fused kernel there."""
    q, k, v = _qkv()
    mask = _padding_mask()
    module = nn.Module().train()
    out, _ = attention.attention_forward(module, q, k, v, mask, dropout=0.0)
    ref = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)
    assert torch.allclose(out, ref, atol=1e-6)


@pytest.mark.parametrize("bulk", [True, False])
def test_attention_with_dropout_is_the_eager_recipe(bulk):
    """Training: softmax(q k^T / sqrt(d) + mask), dropout on the probabilities, times v -- BERT's eager attention,
    the same mask drawn again from the same seed; gradients too."""
    q, k, v = _qkv(1)
    mask = _padding_mask()
    module = nn.Module().train()
    module.hpcqa_bulk_dropout = bulk
    torch.manual_seed(11)
    out, _ = attention.attention_forward(module, q, k, v, mask, dropout=0.1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    probs = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    torch.manual_seed(11)
    if bulk:
        keep, scale = attention.keep_mask(probs.shape, 0.1)
        dropped = probs * keep * scale
    else:
        dropped = nn.functional.dropout(probs, 0.1, training=True)
    ref = (dropped @ v).transpose(1, 2)
    assert torch.allclose(out, ref, atol=1e-5)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    refs = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, refs):
        assert torch.allclose(a, b, atol=1e-5)


def test_attention_in_bf16_copies_no_s_by_s_tensor_and_keeps_its_numbers():
    """The S x S tensors (scores, probabilities, their gradients) are a step's largest: at 12 x 12 x 384^2 one pass
    over one costs more than a layer's dense matmuls on AMX. Neither direction copies one (no clone before the
    padding mask, no cast of the bool dropout mask for a product), and the values are the product formulation's,
    bit for bit, forward and backward."""
    from torch.profiler import ProfilerActivity, profile

    q, k, v = _qkv(3, s=64)
    mask = _padding_mask(s=64)
    module = nn.Module().train()

    def run(fn):
        torch.manual_seed(5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn()
        return out, torch.autograd.grad(out.float().sum(), (q, k, v))

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        out, grads = run(lambda: attention.attention_forward(module, q, k, v, mask, dropout=0.1)[0])
    copies = [
        e.key
        for e in prof.key_averages(group_by_input_shape=True)
        if e.key in ("aten::copy_", "aten::clone", "aten::_to_copy")
        and any(list(s)[-2:] == [64, 64] for s in e.input_shapes if s)
    ]
    assert copies == []

    def product():
        scores = torch.matmul(q * 8**-0.5, k.transpose(-1, -2))
        probs = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
        keep, scale = attention.keep_mask(probs.shape, 0.1)
        return torch.matmul(probs * keep, v * scale).transpose(1, 2).contiguous()

    ref, ref_grads = run(product)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads))


def test_attention_in_bf16_stays_bf16():
    q, k, v = (t.detach().to(torch.bfloat16) for t in _qkv(2))
    out, _ = attention.attention_forward(nn.Module().train(), q, k, v, None, dropout=0.1)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_dropout_settings_reach_the_config_or_are_refused():
    cfg = SimpleNamespace(
        model_type="bert", attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.1
    )
    got = attention.apply_dropouts(
        cfg, SimpleNamespace(attention_dropout=0.0, hidden_dropout="model")
    )
    assert (
        got == {"attention_dropout": 0.0, "hidden_dropout": 0.1}
        and cfg.attention_probs_dropout_prob == 0.0
    )
    distil = SimpleNamespace(model_type="distilbert", attention_dropout=0.1, dropout=0.1)
    assert attention.apply_dropouts(
        distil, SimpleNamespace(attention_dropout="model", hidden_dropout=0.05)
    ) == {"attention_dropout": 0.1, "hidden_dropout": 0.05}
    odd = SimpleNamespace(model_type="odd")
    assert attention.apply_dropouts(
        odd, SimpleNamespace(attention_dropout="model", hidden_dropout="model")
    ) == {"attention_dropout": None, "hidden_dropout": None}
    with pytest.raises(RankError) as e:
        attention.apply_dropouts(
            odd, SimpleNamespace(attention_dropout=0.0, hidden_dropout="model")
        )
    assert (
        "model.attention_dropout" in e.value.message
        and 'model.attention_dropout = "model"' in e.value.hint
    )


def _tiny_bert(tmp_path):
    tiny_bert(vocab=200, layers=2, heads=4, max_position_embeddings=64).save_pretrained(tmp_path)
    return str(tmp_path)


def _batch():
    """Three sequences of 20 tokens, the last padded from 12 on."""
    ids = torch.randint(5, 200, (3, 20))
    am = torch.ones(3, 20, dtype=torch.long)
    am[2, 12:] = 0
    return ids, am


def _train_step(model, ids, am):
    """One training forward and backward on (ids, am) with fixed answer spans -> the model's output."""
    model.train()
    out = model(
        input_ids=ids,
        attention_mask=am,
        start_positions=torch.tensor([1, 2, 3]),
        end_positions=torch.tensor([2, 3, 4]),
    )
    out.loss.backward()
    return out


def _mc(**kw):
    base = dict(attention="auto", dropout="auto", attention_dropout="model", hidden_dropout="model")
    return SimpleNamespace(**{**base, **kw})


def test_a_bert_model_trains_with_hpcqa_attention_and_evaluates_like_sdpa(tmp_path):
    """auto on a BERT: hpcqa attention and bulk masks; in eval mode its logits are SDPA's; in training its loss
    is finite and its gradients reach every layer."""
    path = _tiny_bert(tmp_path)
    model, facts = attention.load_qa_model(path, {}, _mc(attention="hpcqa"))
    assert (
        facts["attention"] == "hpcqa"
        and facts["dropout_masks"] == "bulk"
        and facts["bulk_dropout_modules"] > 0
    )
    assert facts["attention_dropout"] == facts["hidden_dropout"] == 0.1
    ref, _ = attention.load_qa_model(path, {}, _mc(attention="sdpa", dropout="torch"))
    ids, am = _batch()
    model.eval(), ref.eval()
    with torch.no_grad():
        a, b = model(input_ids=ids, attention_mask=am), ref(input_ids=ids, attention_mask=am)
    assert torch.allclose(a.start_logits, b.start_logits, atol=1e-5)
    out = _train_step(model, ids, am)
    assert torch.isfinite(out.loss)
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for n, p in model.named_parameters()
        if "encoder" in n
    )


def test_dropout_zero_and_torch_masks_are_recorded(tmp_path):
    path = _tiny_bert(tmp_path)
    model, facts = attention.load_qa_model(
        path, {}, _mc(attention="eager", dropout="torch", attention_dropout=0.0)
    )
    assert (
        facts["attention"] == "eager"
        and facts["dropout_masks"] == "torch"
        and facts["bulk_dropout_modules"] == 0
    )
    assert facts["attention_dropout"] == 0.0 and model.config.attention_probs_dropout_prob == 0.0
    assert not any(isinstance(m, attention.BulkDropout) for m in model.modules())


def test_auto_trains_with_the_fused_kernel_and_falls_back_said(tmp_path, monkeypatch):
    """auto on a BERT: the fused kernel where it loads (this machine has a compiler), its gradients reaching every
    layer; with the kernel refused (HPCQA_FUSED=0), hpcqa's attention and the reason in the recipe; asked for by
    name, a refused kernel is an error naming the key."""
    from hpcqa.rank.train import fused

    path = _tiny_bert(tmp_path)
    model, facts = attention.load_qa_model(path, {}, _mc())
    assert facts["attention"] == "fused" and "fused kernel" in facts["attention_kernel"]
    out = _train_step(model, *_batch())
    assert torch.isfinite(out.loss)
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0
        for n, p in model.named_parameters()
        if "encoder" in n and "weight" in n
    )
    _, facts = attention.load_qa_model(
        path, {}, _mc(), compiled=True
    )  # train.compile: what Inductor traces
    assert facts["attention"] == "hpcqa" and "train.compile" in facts["attention_reason"]
    monkeypatch.setenv("HPCQA_FUSED", "0")
    monkeypatch.setattr(fused, "_state", {})
    _, facts = attention.load_qa_model(path, {}, _mc())
    assert facts["attention"] == "hpcqa" and facts["attention_fallback"] == "HPCQA_FUSED=0"
    assert "fused kernel is not used: HPCQA_FUSED=0" in facts["attention_reason"]
    monkeypatch.setattr(fused, "_state", {})
    with pytest.raises(RankError, match='model.attention = "fused"'):
        attention.load_qa_model(path, {}, _mc(attention="fused"))
