"""bf16 weights with an fp32 master copy (train.bf16_weights = "master"): the model's parameters and activations
are bf16 (no autocast: no per-step cast of every weight, no fp32 residual stream that every Linear casts again),
and the optimizer keeps the fp32 weights.

- `MasterAdamW`: AdamW (fused where the Trainer asked for it) over fp32 copies of the bf16 parameters. step()
  takes the model's bf16 gradients as fp32, steps the masters and copies them back, rounded, into the parameters;
  zero_grad() clears the model's gradients; its param_groups are the ones the Trainer's LR scheduler drives; its
  state_dict carries the masters, so a resume continues from them, not from the rounded weights.
- `to_bf16`: the model in bf16 (after the masters were taken from its fp32 weights), its QA logits upcast to
  fp32 (the cross-entropy and the post-processing in fp32).
- `full_precision`: the model back in its own dtype with the masters as its weights, for the final save.
"""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any, Iterator

import torch

MASTERS_KEY = "hpcqa_masters"


def weights_choice(setting: str, bf16: bool, ipex: bool, accumulation: int = 1) -> tuple[str, str]:
    """train.bf16_weights for a run whose bf16 choice is `bf16` -> (mode: "fp32" | "autocast" | "master", why).
    Under auto, gradient accumulation keeps autocast: master mode would sum the micro-batches' grads in bf16."""
    if not bf16:
        return "fp32", "bf16 is off: fp32 weights and activations"
    if ipex:
        return (
            "autocast",
            "train.ipex: IPEX's optimize keeps its own bf16 weights and fp32 master copy",
        )
    if setting == "auto" and accumulation > 1:
        return (
            "autocast",
            f"train.gradient_accumulation_steps = {accumulation}: autocast, whose fp32 weights sum the "
            "micro-batches' grads in fp32 (bf16 weights would sum them in bf16)",
        )
    if setting == "autocast":
        return (
            "autocast",
            "train.bf16_weights = autocast: fp32 weights, each step under bf16 autocast",
        )
    return (
        "master",
        f"train.bf16_weights = {setting}: bf16 weights and activations, fp32 master weights",
    )


class MasterAdamW(torch.optim.AdamW):
    """AdamW over fp32 master copies of (bf16) model parameters; see the module's docstring."""

    def __init__(self, params: Any, **defaults: Any) -> None:
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.model_params: list[list[torch.Tensor]] = []
        master_groups = []
        for g in groups:
            model_params = list(g["params"])
            masters = [p.detach().to(torch.float32, copy=True) for p in model_params]
            self.model_params.append(model_params)
            master_groups.append({**g, "params": masters})
        super().__init__(master_groups, **defaults)

    @classmethod
    def wrap(cls, optimizer: torch.optim.Optimizer) -> MasterAdamW:
        """The same param groups and settings (the Trainer's weight decay split, fused or not) over masters."""
        accepted = set(inspect.signature(torch.optim.AdamW.__init__).parameters) - {
            "self",
            "params",
        }
        defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
        return cls([dict(g) for g in optimizer.param_groups], **defaults)

    def pairs(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(master, model parameter) for every parameter."""
        for group, model_params in zip(self.param_groups, self.model_params):
            yield from zip(group["params"], model_params)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        into, grads = [], []
        for master, p in self.pairs():
            if p.grad is None:
                master.grad = None
                continue
            if master.grad is None:
                master.grad = torch.empty_like(master)
            into.append(master.grad)
            grads.append(p.grad)
        if into:
            torch._foreach_copy_(into, grads)
        super().step()
        self.round_into_params()
        return loss

    @torch.no_grad()
    def round_into_params(self) -> None:
        params, masters = [], []
        for master, p in self.pairs():
            params.append(p)
            masters.append(master)
        torch._foreach_copy_(params, masters)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, p in self.pairs():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out[MASTERS_KEY] = [master.detach() for master, _ in self.pairs()]
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """AdamW's state; the masters from the checkpoint (one without them, an autocast run's: the parameters
        as loaded), then rounded into the parameters."""
        state_dict = dict(state_dict)
        masters = state_dict.pop(MASTERS_KEY, None)
        super().load_state_dict(state_dict)
        with torch.no_grad():
            for i, (master, p) in enumerate(self.pairs()):
                saved = p if masters is None else masters[i]
                if saved.shape != master.shape:
                    raise ValueError(
                        f"master weight {i}: {tuple(saved.shape)} saved, {tuple(master.shape)} here"
                    )
                master.copy_(saved)
        self.round_into_params()

    def matches(self) -> bool:
        """The parameters are the masters rounded (not, e.g., a best checkpoint's weights loaded since)."""
        return all(torch.equal(p, master.to(p.dtype)) for master, p in self.pairs())


def _upcast(module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
    return output.float()


def to_bf16(model: torch.nn.Module) -> str:
    """The model's parameters in bf16 (its own dtype kept as model.hpcqa_weights_dtype), the QA head's logits
    upcast to fp32 (the loss's cross-entropy and the post-processing in fp32). -> what the logits are."""
    setattr(model, "hpcqa_weights_dtype", next(model.parameters()).dtype)  # a plain attribute: mypy
    model.to(torch.bfloat16)
    head = getattr(model, "qa_outputs", None)
    if isinstance(head, torch.nn.Module):
        head.register_forward_hook(_upcast)
        return "fp32 (qa_outputs upcast)"
    return "bf16 (no qa_outputs head to upcast)"


def master_of(optimizer: Any) -> MasterAdamW | None:
    """The MasterAdamW inside the Trainer's (accelerate's) optimizer wrapper, or None."""
    inner = getattr(optimizer, "optimizer", optimizer)
    return inner if isinstance(inner, MasterAdamW) else None


@contextlib.contextmanager
def full_precision(model: Any, optimizer: Any, best_checkpoint: str | None = None) -> Iterator[str]:
    """Inside: the model in its own dtype (fp32) with the fp32 masters as its weights -- what a user loads --, and
    back in bf16 after. When the weights are no longer the masters rounded (load_best_model_at_end loaded the best
    checkpoint's), the masters come from that checkpoint's optimizer state. -> what the weights are."""
    opt = master_of(optimizer)
    inner = getattr(model, "module", model)
    if opt is None:
        yield "as trained"
        return
    if not opt.matches() and best_checkpoint and Path(best_checkpoint, "optimizer.pt").is_file():
        state = torch.load(
            str(Path(best_checkpoint, "optimizer.pt")), map_location="cpu", weights_only=True
        )
        opt.load_state_dict(state)
    exact = opt.matches()
    inner.to(getattr(inner, "hpcqa_weights_dtype", torch.float32))
    if exact:
        with torch.no_grad():
            for master, p in opt.pairs():
                p.copy_(master)
    try:
        yield "fp32 masters" if exact else "bf16 weights upcast (no master copy matched them)"
    finally:
        inner.to(torch.bfloat16)
