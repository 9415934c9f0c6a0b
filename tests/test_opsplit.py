"""benchmarks/opsplit.py: a training step's aten ops attributed by context (the module they ran for, forward or
backward), never by their names. One step of a tiny BERT, and of a toy attention with a custom op, under the split:
the contexts of specific ops are asserted, not their timings."""

import sys

import pytest
import torch
from torch import nn

from hpcqa.rank.train import attention
from tests.conftest import ROOT, tiny_bert

sys.path.insert(0, str(ROOT / "benchmarks"))
import opsplit  # noqa: E402

ATTN, ATTN_DROP, HIDDEN_DROP = opsplit.ATTENTION, opsplit.ATTENTION_DROPOUT, opsplit.HIDDEN_DROPOUT


def tiny_step(attn: str, bulk: bool, distil: bool = False) -> opsplit.OpSplit:
    """One training step (forward, backward, fused AdamW) of a 1-layer BERT/DistilBERT with padding, split."""
    from transformers import DistilBertConfig, DistilBertForQuestionAnswering

    attention.register()
    if distil:
        torch.manual_seed(0)
        cfg = DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64)
        model = DistilBertForQuestionAnswering._from_config(cfg, attn_implementation=attn)
    else:
        model = tiny_bert(attn)
    if bulk:
        attention.use_bulk_dropout(model)
    for m in model.modules():
        m.hpcqa_bulk_dropout = bulk
    model.train()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0  # padding: the attention's masked fill
    batch = {
        "input_ids": torch.randint(5, 100, (2, 16)),
        "attention_mask": mask,
        "start_positions": torch.tensor([1, 2]),
        "end_positions": torch.tensor([3, 4]),
    }
    split = opsplit.OpSplit(model)
    with split:
        model(**batch).loss.backward()
        opt.step()
    return split


@pytest.fixture(scope="module")
def default_step():
    return tiny_step("hpcqa", bulk=True)


def test_gelu_and_its_backward_are_the_activation(default_step):
    act = "activation (GELU)"
    assert default_step.contexts_of("aten.gelu.default", "forward") == {act}
    assert default_step.contexts_of("aten.gelu_backward.default", "backward") == {act}


def test_the_padding_fill_is_attention_not_dropout(default_step):
    """The padding mask's in-place fill (hpcqa's _FillMasked) and its backward `where` are the attention's."""
    assert default_step.contexts_of("aten.masked_fill_.Scalar") == {ATTN}
    # backward: the fill's where (attention) and the dropout mask's where (attention dropout), nothing else
    assert default_step.contexts_of("aten.where.self", "backward") == {ATTN, ATTN_DROP}


def test_bulk_masks_are_the_dropout_they_are_drawn_for(default_step):
    """Inside the attention the bulk mask's randint, xor and the `where` applying it are attention dropout; in the
    BulkDropout modules the same ops are hidden dropout, as are the products applying the mask, both ways."""
    for op in ("aten.randint.low", "aten.bitwise_xor_.Scalar"):
        assert default_step.contexts_of(op, "forward") == {ATTN_DROP, HIDDEN_DROP}, op
    assert default_step.contexts_of("aten.where.self", "forward") == {ATTN_DROP}
    # hidden dropout: x.mul(mask).mul_(scale), and its backward (a custom autograd Function's)
    assert HIDDEN_DROP in default_step.contexts_of("aten.mul.Tensor", "forward")
    assert default_step.contexts_of("aten.mul_.Tensor", "forward") == {HIDDEN_DROP}
    assert default_step.contexts_of("aten.mul_.Tensor", "backward") == {HIDDEN_DROP}
    # the masks' draws are counted under no other context: 1 attention + 3 hidden dropouts (1 layer)
    drawn = [c for op, c, p in default_step.log if op == "aten.randint.low"]
    assert sorted(drawn) == [ATTN_DROP] + [HIDDEN_DROP] * 3


def test_the_other_parts_of_the_step(default_step):
    s = default_step
    assert s.contexts_of("aten.addmm.default", "forward") == {"dense (Linear)", "loss / QA head"}
    assert s.contexts_of("aten.native_layer_norm_backward.default") == {"layernorm"}
    assert s.contexts_of("aten.embedding_dense_backward.default") == {"embeddings"}
    assert s.contexts_of("aten.nll_loss_backward.default") == {"loss / QA head"}
    assert s.contexts_of("aten._fused_adamw_.default") == {"optimizer step"}
    assert s.contexts_of("aten._softmax_backward_data.default") == {ATTN}
    assert {c for _, c, _ in s.log} <= set(opsplit.CONTEXTS)


@pytest.mark.parametrize("attn", ["sdpa", "eager", "hpcqa"])
def test_torch_dropout_inside_the_attention_is_attention_dropout(attn):
    """torch's dropout masks (bernoulli_), drawn by SDPA's math path, the eager function or hpcqa's: the draw
    and the product applying it are attention dropout, its backward too; the modules' draws hidden dropout."""
    s = tiny_step(attn, bulk=False)
    drawn = sorted(c for op, c, p in s.log if op == "aten.bernoulli_.float")
    assert drawn == [ATTN_DROP] + [HIDDEN_DROP] * 3
    assert s.contexts_of("aten.mul.Tensor", "backward") >= {ATTN_DROP, HIDDEN_DROP}


def test_distilbert_splits_the_same():
    s = tiny_step("hpcqa", bulk=True, distil=True)
    assert s.contexts_of("aten.where.self", "forward") == {ATTN_DROP}
    assert s.contexts_of("aten.gelu_backward.default") == {"activation (GELU)"}
    assert s.contexts_of("aten.masked_fill_.Scalar") == {ATTN}


class _ToyAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(torch.ops.opsplit_test.fused(x))


class _Toy(nn.Module):
    _can_record_outputs = {"attentions": _ToyAttention}

    def __init__(self) -> None:
        super().__init__()
        self.attn = _ToyAttention()

    def forward(self, x):
        return self.attn(x).sum()


def _register_fused():
    if hasattr(torch.ops.opsplit_test, "fused"):
        return

    @torch.library.custom_op("opsplit_test::fused", mutates_args=())
    def fused(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * (1 - torch.tanh(x) ** 2)

    fused.register_autograd(
        backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs)
    )


def test_a_custom_op_in_the_attention_is_the_attention_both_ways():
    """Whatever an op of the attention module is called (a fused kernel as a custom op with its own autograd), it
    and its backward's ops are the attention's; the Linear beside it stays dense."""
    _register_fused()
    model = _Toy()
    x = torch.randn(4, 8, requires_grad=True)
    split = opsplit.OpSplit(model)
    with split:
        model(x).backward()
    assert split.contexts_of("opsplit_test.fused.default", "forward") == {ATTN}
    assert split.contexts_of("aten.tanh.default", "backward") == {ATTN}
    assert split.contexts_of("aten.addmm.default") == {"dense (Linear)"}


def test_the_patches_are_undone_and_the_shares_sum_to_the_step():
    keep_mask, dropout = attention.keep_mask, nn.functional.dropout
    s = tiny_step("hpcqa", bulk=True)
    assert (attention.keep_mask, nn.functional.dropout) == (keep_mask, dropout)
    step_ns = s.timed_ns() * 2  # as if half the step ran between ops
    share = s.shares(step_ns)
    assert sum(share.values()) == pytest.approx(1)
    assert share[opsplit.UNTIMED] == pytest.approx(0.5)
    assert set(share) <= {*opsplit.CONTEXTS, opsplit.UNTIMED}
    assert f"{share[ATTN]:.1%}" in s.table(step_ns)
