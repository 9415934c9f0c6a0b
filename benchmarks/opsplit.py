"""A training step's thread CPU time per aten op, attributed by context: which part of the model the op ran for
and whether in the forward or the backward. Never by the op's name.

    split = OpSplit(model)
    with split:
        step()                      # forward, backward, optimizer step
    print(split.table(step_ns))     # step_ns: the step's thread CPU time measured around it

How an op finds its context:

- Forward: a stack of module kinds, pushed and popped by global module forward hooks (modules made inside a
  forward, such as the loss, included). A module's kind is what it is (Linear, LayerNorm, Embedding, Dropout, an
  activation, a loss, the model's attention class as transformers names it in `_can_record_outputs`); a container
  of no kind takes its parent's (below the QA model itself: "other", so residual adds and the padding mask's
  making are "other"). So every op inside the attention module's forward, the attention function and any
  custom op or autograd Function it calls (whatever its name), is "attention".
- Dropout inside the attention: hpcqa's bulk mask (`attention.keep_mask`) and torch's functional dropout are
  regions of their own while the profile runs; a random draw inside the attention (SDPA's math path draws its
  mask with bernoulli_) starts one too. An op of the attention that reads a mask drawn there (the `where` or
  product applying it) is attention dropout as well: data flow, not names.
- Backward: the autograd node running (`torch._C._current_autograd_node()`) is mapped back to the forward context
  it was created in, through its sequence number: the forward records which context each new sequence number was
  taken in (a node is numbered just before its op is dispatched, a custom Function's when it is applied).
  Gradient accumulation into a parameter goes to the parameter's module.
- The optimizer step: global optimizer step hooks. Collectives (the c10d namespace): all-reduce.

What stays where it ran: the attention's q/k/v and output projections are Linear layers ("dense"); the 1/keep
scale hpcqa folds into V (an S x D product, not S x S) is the attention's; the QA model's own ops (its Linear head,
the logits' split, the loss) are "loss / QA head". A fused attention kernel with its dropout inside is one op: all
"attention". Time between ops (Python, the autograd engine, this profiler's own) is a row of its own, so the shares
sum to the step measured around it.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

ATTENTION = "attention (scores, softmax, probs)"
ATTENTION_DROPOUT = "attention dropout"
HIDDEN_DROPOUT = "hidden dropout"
CONTEXTS = (
    ATTENTION,
    ATTENTION_DROPOUT,
    HIDDEN_DROPOUT,
    "layernorm",
    "activation (GELU)",
    "dense (Linear)",
    "embeddings",
    "loss / QA head",
    "optimizer step",
    "all-reduce",
    "other",
)
PHASES = ("forward", "backward", "outside")
UNTIMED = "between ops (Python, autograd engine, this profiler)"
_ACTIVATION_MODULES = ("transformers.activations", "torch.nn.modules.activation")
# ops that draw random numbers, by identity: inside the attention they start its dropout (SDPA's math path)
_RANDOM = (torch.ops.aten.bernoulli_, torch.ops.aten.bernoulli, torch.ops.aten.native_dropout)
_SEQ = torch._C._autograd._get_sequence_nr  # the next autograd node's sequence number (this thread)


def attention_classes(model: nn.Module) -> tuple[type, ...]:
    """The model's attention module classes, as transformers declares them for output recording."""
    out = []
    for key, value in (getattr(model, "_can_record_outputs", None) or {}).items():
        if key in ("attentions", "cross_attentions"):
            cls = getattr(value, "target_class", value)
            if isinstance(cls, type):
                out.append(cls)
    return tuple(out)


def module_kind(m: nn.Module, parent: str, root_child: bool, attn: tuple[type, ...]) -> str:
    """A module's context, given its parent's (`root_child`: the QA model's own Linear is its head)."""
    if isinstance(m, nn.modules.loss._Loss):
        return "loss / QA head"
    if isinstance(m, nn.modules.dropout._DropoutNd):  # nn.Dropout, hpcqa's BulkDropout
        return ATTENTION_DROPOUT if parent == ATTENTION else HIDDEN_DROPOUT
    if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
        return "layernorm"
    if isinstance(m, nn.Embedding):
        return "embeddings"
    if isinstance(m, nn.Linear):
        return "loss / QA head" if root_child else "dense (Linear)"
    if isinstance(m, (nn.MultiheadAttention, *attn)):
        return ATTENTION
    if type(m).__module__ in _ACTIVATION_MODULES:
        return "activation (GELU)"
    return parent


def module_kinds(model: nn.Module) -> dict[int, str]:
    """id(module) -> context, for every module of the model (the root's own ops: its QA head's split)."""
    attn = attention_classes(model)
    kinds = {id(model): "loss / QA head"}

    def walk(m: nn.Module, inherited: str, root: bool) -> None:
        for child in m.children():
            kind = module_kind(child, inherited, root, attn)
            kinds[id(child)] = kind
            walk(child, kind, False)

    walk(model, "other", True)
    return kinds


class OpSplit(TorchDispatchMode):
    """Times every aten op of what runs inside `with split:` (thread CPU time) under its (context, phase)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.kinds = module_kinds(model)
        self.attn = attention_classes(model)
        self.params = {
            id(p): self.kinds[id(m)] for m in model.modules() for p in m.parameters(recurse=False)
        }
        self.ns: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.log: list[tuple[str, str, str]] = []  # (op, context, phase), in order: for tests
        self.stack: list[str] = []
        self.depth = 0  # module forwards open (0: outside the model)
        self.seq_starts: list[int] = []
        self.seq_ctx: list[str] = []
        self.seen = 0
        # masks drawn inside the attention, kept alive so that their ids stay unique
        self.tainted: list[torch.Tensor] = []
        self._undo: list[Any] = []

    # ---------------------------------------------------------------- forward context
    def context(self) -> str:
        return self.stack[-1] if self.stack else "other"

    def claim(self, ctx: str) -> None:
        """Autograd nodes numbered since the last claim were made in `ctx`."""
        now = _SEQ()
        if now != self.seen:
            if not self.seq_starts:
                self.seq_starts.append(0)
                self.seq_ctx.append("other")
            self.seq_starts.append(self.seen)
            self.seq_ctx.append(ctx)
            self.seen = now

    def push(self, ctx: str) -> None:
        self.claim(self.context())
        self.stack.append(ctx)

    def pop(self) -> None:
        self.claim(self.context())
        self.stack.pop()

    def _pre(self, module: nn.Module, args: Any) -> None:
        kind = self.kinds.get(id(module))
        if kind is None:  # made during the forward (a loss module): classified under its caller
            kind = module_kind(module, self.context(), False, self.attn)
        self.push(kind)
        self.depth += 1

    def _post(self, module: nn.Module, args: Any, out: Any) -> None:
        self.pop()
        self.depth -= 1

    def _region(self, fn: Any, taint: bool) -> Any:
        """`fn` as a dropout region: attention dropout inside the attention, hidden dropout elsewhere."""

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            inside = self.context() in (ATTENTION, ATTENTION_DROPOUT)
            self.push(ATTENTION_DROPOUT if inside else HIDDEN_DROPOUT)
            try:
                out = fn(*args, **kwargs)
            finally:
                self.pop()
            if taint and inside:
                self.tainted += [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            return out

        return wrapped

    # ---------------------------------------------------------------- backward context
    def node_context(self, node: Any) -> str:
        seq = node._sequence_nr()
        if seq >= 2**63:  # AccumulateGrad: the parameter's module
            return self.params.get(id(getattr(node, "variable", None)), "other")
        i = bisect.bisect_right(self.seq_starts, seq) - 1
        return self.seq_ctx[i] if i >= 0 and seq < self.seen else "other"

    # ---------------------------------------------------------------- the ops
    def op_context(self, func: Any, args: Any, kwargs: Any) -> tuple[str, str]:
        node = torch._C._current_autograd_node()
        if node is not None:
            ctx, phase = self.node_context(node), "backward"
        else:
            ctx, phase = self.context(), "forward" if self.depth else "outside"
            if ctx == ATTENTION and (
                func.overloadpacket in _RANDOM or self.reads_mask(args, kwargs)
            ):
                ctx = ATTENTION_DROPOUT
            self.claim(ctx)
        if func.namespace == "c10d":
            ctx = "all-reduce"
        return ctx, phase

    def reads_mask(self, args: Any, kwargs: Any) -> bool:
        ids = {id(t) for t in self.tainted}
        return bool(ids) and any(id(a) in ids for a in tree_leaves((args, kwargs)))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        ctx, phase = self.op_context(func, args, kwargs)
        t = time.thread_time_ns()
        out = func(*args, **kwargs)
        self.ns[(ctx, phase)][str(func.overloadpacket).removeprefix("aten.")] += (
            time.thread_time_ns() - t
        )
        self.log.append((str(func), ctx, phase))
        if ctx == ATTENTION_DROPOUT and phase == "forward" and func.overloadpacket in _RANDOM:
            self.tainted += [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        return out

    # ---------------------------------------------------------------- on and off
    def __enter__(self) -> OpSplit:
        self._install()
        self.seen = _SEQ()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        self.tainted.clear()

    def _install(self) -> None:
        from torch.nn.modules import module as mm
        from torch.optim import optimizer as om

        from hpcqa.rank.train import attention

        handles = [
            mm.register_module_forward_pre_hook(self._pre),
            mm.register_module_forward_hook(self._post, always_call=True),
            om.register_optimizer_step_pre_hook(lambda *a: self.push("optimizer step")),
            om.register_optimizer_step_post_hook(lambda *a: self.pop()),
        ]
        self._undo += [h.remove for h in handles]
        for owner, name, taint in (
            (attention, "keep_mask", True),
            (nn.functional, "dropout", False),
        ):
            fn = getattr(owner, name)
            setattr(owner, name, self._region(fn, taint))
            self._undo.append(lambda owner=owner, name=name, fn=fn: setattr(owner, name, fn))

    # ---------------------------------------------------------------- the table
    def timed_ns(self) -> int:
        return sum(sum(ops.values()) for ops in self.ns.values())

    def contexts_of(self, op: str, phase: str | None = None) -> set[str]:
        """The contexts an op (as str(func), e.g. "aten.gelu_backward.default") ran in: for tests."""
        return {c for o, c, p in self.log if o == op and (phase is None or p == phase)}

    def table(self, step_ns: int, top: int = 3) -> str:
        return split_table(self.ns, step_ns, top)

    def shares(self, step_ns: int) -> dict[str, float]:
        return shares(self.ns, step_ns)


def shares(ns: dict[tuple[str, str], dict[str, int]], step_ns: int) -> dict[str, float]:
    """Each context's share of the step (forward, backward and outside together), and the time between ops:
    they sum to 1 (a step shorter than its timed ops counts as their sum)."""
    totals = {key: sum(ops.values()) for key, ops in ns.items()}
    timed = sum(totals.values())
    step_ns = max(step_ns, timed, 1)
    out = {ctx: sum(v for (c, _), v in totals.items() if c == ctx) / step_ns for ctx in CONTEXTS}
    out = {ctx: v for ctx, v in out.items() if v}
    out[UNTIMED] = (step_ns - timed) / step_ns
    return out


def split_table(ns: dict[tuple[str, str], dict[str, int]], step_ns: int, top: int = 3) -> str:
    """Markdown: context x phase in thread-CPU ms, the context's share of the step, its top ops."""
    totals = {key: sum(ops.values()) for key, ops in ns.items()}
    timed = sum(totals.values())
    step_ns = max(step_ns, timed, 1)
    share = shares(ns, step_ns)
    rows = [
        "| context | forward ms | backward ms | outside ms | share of step | top ops (phase: ms) |",
        "|---|---|---|---|---|---|",
    ]
    for ctx in CONTEXTS:
        if ctx not in share:
            continue
        per = [totals.get((ctx, p), 0) for p in PHASES]
        ops = sorted(
            ((n, p, op) for p in PHASES for op, n in ns.get((ctx, p), {}).items()), reverse=True
        )
        tops = ", ".join(f"{op} ({p[0]}: {n / 1e6:.0f})" for n, p, op in ops[:top])
        cells = [f"{v / 1e6:.0f}" if v else "-" for v in per]
        rows.append(f"| {ctx} | {' | '.join(cells)} | {share[ctx]:.1%} | {tops} |")
    rows.append(f"| {UNTIMED} | | | | {share[UNTIMED]:.1%} | |")
    phase_ms = [sum(v for (c, p), v in totals.items() if p == ph) / 1e6 for ph in PHASES]
    rows.append(
        f"| **step** ({step_ns / 1e6:.0f} ms; ops timed {timed / step_ns:.1%}) | "
        + " | ".join(f"{v:.0f}" for v in phase_ms)
        + " | 100% | |"
    )
    return "\n".join(rows)
