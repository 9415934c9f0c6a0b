"""The training step's attention and dropout, the model's own recipe made cheaper on CPU (model.attention,
model.dropout).

Why: in training, BERT's attention dropout keeps torch's SDPA off its fused CPU kernel: the math path runs, and in
bf16 it upcasts q, k and v to fp32. And every dropout mask comes from `bernoulli_`, one generator call per element
(~5-16 ns each, pytorch issue 138199): a third of a bf16 step was spent drawing random numbers.

- `attention_forward` ("hpcqa"): scores, softmax and both matmuls in the input's dtype (bf16 stays bf16; the CPU
  softmax kernel accumulates in fp32 either way), dropout applied to the probabilities with a bulk-drawn mask and
  its 1/keep scale folded into V (S x D, not S x S). Without dropout (evaluation, or a dropout of 0) it is SDPA,
  whose fused CPU kernel then runs.
- Bulk masks: one 64-bit draw from torch's generator gives four 16-bit uniforms; an element is kept when its
  uniform >= round(p * 65536). The keep probability is the model's to within 2^-17 and the scale is 1 / that
  keep probability exactly, so the expected output is the input, as with torch's dropout. Seeded by the same
  generator (transformers' set_seed).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForQuestionAnswering
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import AttentionInterface
from transformers.models.auto.modeling_auto import MODEL_FOR_QUESTION_ANSWERING_MAPPING

from hpcqa.errors import RankError
from hpcqa.rank.train import fused
from hpcqa.rank.train.facts import cpu_flags

NAME = "hpcqa"
LEVELS = 1 << 16  # the resolution of a bulk-drawn uniform


def keep_threshold(p: float) -> tuple[int, float]:
    """Dropout probability p -> (the 16-bit threshold an element's uniform must reach, the exact keep probability)."""
    threshold = min(max(round(p * LEVELS), 0), LEVELS)
    return threshold, (LEVELS - threshold) / LEVELS


def keep_mask(
    shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, float]:
    """A bool mask of `shape` (True: kept) with keep probability ~1 - p, drawn four elements per 64-bit random
    word. -> (mask, 1 / the exact keep probability)."""
    threshold, keep = keep_threshold(p)
    n = 1
    for d in shape:  # a plain loop: under torch.compile's dynamic shapes the sizes stay symbolic
        n *= d
    # randint over int64's range takes one 64-bit draw per word, as random_() does, and gives that word with its
    # top bit flipped (it adds the low bound): the xor gives the same words back. Unlike random_(), which Dynamo
    # refuses (a graph break at every dropout), torch.compile traces it.
    words = torch.randint(
        -(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=device
    ).bitwise_xor_(-(2**63))
    # int16 reads a uniform 16-bit word shifted by 2^15: u >= t  <=>  (u - 2^15) >= t - 2^15
    mask = words.view(torch.int16)[:n] >= (threshold - LEVELS // 2)
    return mask.view(shape), (1.0 / keep if keep > 0 else 0.0)


class _BulkDropout(torch.autograd.Function):
    """x * mask * scale, saving only the bool mask for the backward (as torch's dropout does)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float) -> torch.Tensor:  # type: ignore[override]
        mask, scale = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return x.mul(mask).mul_(scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        return grad.mul(mask).mul_(ctx.scale), None


def bulk_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return x * 0.0
    return _BulkDropout.apply(x, p)


class BulkDropout(nn.Dropout):
    """nn.Dropout with the same p, its mask drawn in bulk (a drop-in: state dicts and repr unchanged)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            getattr(self, "hpcqa_fused", False)
            and self.training
            and 0.0 < self.p < 1.0
            and x.dtype in (torch.float32, torch.bfloat16)
        ):
            return fused.fused_dropout(x, self.p)  # the same draw, no mask kept
        return bulk_dropout(x, self.p, self.training)


def use_bulk_dropout(model: nn.Module) -> int:
    """Every nn.Dropout of the model becomes a BulkDropout of the same p. -> how many were replaced."""
    n = 0
    for module in model.modules():
        for name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                setattr(module, name, BulkDropout(child.p, child.inplace))
                n += 1
    return n


class _FillMasked(torch.autograd.Function):
    """scores.masked_fill(masked, value), filled in place (the scores are the matmul's fresh output, which its
    backward does not keep), the gradient zeroed there by `where`: torch's masked_fill clones its input forward and
    its gradient backward, an S x S copy each way."""

    @staticmethod
    def forward(ctx: Any, scores: torch.Tensor, masked: torch.Tensor, value: float) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(masked)
        ctx.mark_dirty(scores)
        scores.masked_fill_(masked, value)
        return scores  # the dirty input itself, which Dynamo asks for (torch.compile traces the function)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        (masked,) = ctx.saved_tensors
        return torch.where(masked, 0, grad), None, None


def attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature (q, k, v: [batch, heads, seq, head_dim]) -> ([batch, seq,
    heads, head_dim], None). The mask is sdpa_mask's: bool, True = attend, or None."""
    if not module.training or dropout <= 0.0:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=0.0, **kwargs
        )
    scale = query.size(-1) ** -0.5 if scaling is None else scaling
    if getattr(module, "hpcqa_fused", False) and fused.covers(query, key, value, attention_mask):
        out = fused.fused_attention(query, key, value, attention_mask, scale, dropout)
        return out.transpose(1, 2).contiguous(), None
    scores = torch.matmul(
        query * scale, key.transpose(-1, -2)
    )  # scaled on q: S x D multiplies, not S x S
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = _FillMasked.apply(scores, ~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = torch.softmax(scores, dim=-1)
    bulk = getattr(module, "hpcqa_bulk_dropout", True)
    if bulk and dropout < 1.0:
        mask, inv_keep = keep_mask(probs.shape, dropout, probs.device)
        # where, not probs * mask: a bool operand of a product is first copied into the product's dtype, an
        # S x S pass each way (forward and backward) that `where` does not make; the values are the same
        out = torch.matmul(torch.where(mask, probs, 0), value * inv_keep)
    else:
        out = torch.matmul(nn.functional.dropout(probs, p=dropout, training=True), value)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Make "hpcqa" an attention implementation transformers accepts (attn_implementation="hpcqa"), with the
    masks SDPA gets. Idempotent. -> the name."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


# the config names a model family gives its two dropouts (BERT/RoBERTa/MiniLM, DistilBERT)
DROPOUT_KEYS = {
    "attention": ("attention_probs_dropout_prob", "attention_dropout"),
    "hidden": ("hidden_dropout_prob", "dropout"),
}


def apply_dropouts(config: Any, mc: Any) -> dict[str, float | None]:
    """model.attention_dropout / model.hidden_dropout onto a transformers config (in place). -> what the model
    trains with (None: the model has no such setting)."""
    out: dict[str, float | None] = {}
    for kind in ("attention", "hidden"):
        setting = getattr(mc, f"{kind}_dropout")
        key = next(
            (k for k in DROPOUT_KEYS[kind] if isinstance(getattr(config, k, None), (int, float))),
            None,
        )
        if setting != "model":
            if key is None:
                raise RankError(
                    f"model.{kind}_dropout = {setting}: the {getattr(config, 'model_type', '?')} model "
                    f"has no {kind} dropout of a known name ({', '.join(DROPOUT_KEYS[kind])})",
                    f'set model.{kind}_dropout = "model"',
                )
            setattr(config, key, float(setting))
        out[f"{kind}_dropout"] = float(getattr(config, key)) if key else None
    return out


def takes_attention_function(config: Any) -> bool:
    """Does this config's QA model call transformers' attention interface (so "hpcqa" can be plugged in)?"""
    try:
        cls = MODEL_FOR_QUESTION_ANSWERING_MAPPING[type(config)]
    except (KeyError, ValueError):
        return False
    return bool(getattr(cls, "_supports_attention_backend", False))


def fused_or_why(setting: str, facts: dict) -> bool:
    """Load the fused kernel (built on first use). -> whether it runs; facts say which kernel or why not. Asked for
    by name (model.attention = "fused"), a kernel that cannot load is an error; under auto, hpcqa's runs."""
    ok, what = fused.load(cpu_flags())
    facts["attention_kernel" if ok else "attention_fallback"] = what
    if not ok:
        facts["attention_reason"] += f"; hpcqa's, the fused kernel is not used: {what}"
    if not ok and setting == "fused":
        raise RankError(
            f'model.attention = "fused": the fused kernel cannot be used on this node: {what}',
            'unset HPCQA_FUSED, or set model.attention = "auto"'
            if what == "HPCQA_FUSED=0"
            else 'fix what it says (a C++ compiler and ninja build it), or set model.attention = "auto"',
        )
    return ok


def load_qa_model(
    model_path: str, kwargs: dict, mc: Any, compiled: bool = False
) -> tuple[nn.Module, dict]:
    """The QA model with the step's attention and dropout (model.attention, model.dropout, model.*_dropout).
    -> (model, what was chosen and why, for the rank's report and results)."""
    config = AutoConfig.from_pretrained(model_path, **kwargs)
    facts: dict[str, Any] = apply_dropouts(config, mc)
    takes = takes_attention_function(config)
    attn, facts["attention_reason"] = mc.attention, f"model.attention = {mc.attention}"
    if attn == "auto":
        attn = ("hpcqa" if compiled else "fused") if takes else None
        facts["attention_reason"] = (
            "auto: the model takes an attention function"
            + ("; train.compile: hpcqa's, which Inductor traces" if compiled else "")
            if takes
            else f"auto: the {config.model_type} model takes no attention function: its default"
        )
    if attn in (NAME, "fused"):
        if not takes:
            raise RankError(
                f'model.attention = "{attn}": the {config.model_type} model takes no attention '
                "function",
                'set model.attention = "auto" (the model\'s default)',
            )
        register()
    use_fused = attn == "fused" and fused_or_why(mc.attention, facts)
    attn = NAME if attn == "fused" else attn
    model = AutoModelForQuestionAnswering.from_pretrained(
        model_path, config=config, **({"attn_implementation": attn} if attn else {}), **kwargs
    )
    bulk = mc.dropout in ("auto", "bulk")
    facts["dropout_masks"] = "bulk" if bulk else "torch"
    facts["bulk_dropout_modules"] = use_bulk_dropout(model) if bulk else 0
    for module in model.modules():
        module.hpcqa_bulk_dropout = bulk
        module.hpcqa_fused = use_fused
    impl = getattr(model.config, "_attn_implementation", None) or "default"
    impl = "fused" if use_fused else impl
    # a model that takes no attention function runs its own whatever the implementation's name says
    facts["attention"] = impl if takes else f"{config.model_type}'s own ({impl})"
    facts["attention_type"] = attention_type(model)
    return model, facts


def attention_type(model: Any) -> str | None:
    """BigBird's attention type as the model holds it now: it switches from block_sparse to original_full (for
    good) at the first sequence too short for its blocks. None for models without one."""
    inner = getattr(model, "module", model)
    for module in inner.modules():
        kind = getattr(module, "attention_type", None)
        if isinstance(kind, str):
            return kind
    return None


def switched(model: Any, recipe: dict) -> dict:
    """The recipe with what the model switched to during training (BigBird: block-sparse to full attention)."""
    now = attention_type(model)
    if recipe.get("attention_type") and now != recipe["attention_type"]:
        return {
            **recipe,
            "attention_switched": f"{recipe['attention_type']} -> {now} (sequences too short for its blocks)",
        }
    return recipe
