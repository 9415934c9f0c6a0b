"""What more nodes would buy: a model of a data-parallel step, fed with what one finished run and one link
measurement observed. Pure arithmetic (no torch, no I/O); the README's "What more nodes would buy" writes the
same model out.

A rank's step at N nodes of r ranks each (p = N x r ranks, the same batch b per rank: data parallelism adds
samples, not speed per sample):

    t(N)  = t_local + e(N)
    t_local = the run's step time less its exposed all-reduce (compute, optimizer, data wait: what does not
              depend on N)
    c(N)  = sum over DDP's buckets k of  2(p-1) x latency + 2(p-1)/p x bytes_k / bandwidth
            (ring all-reduce: a reduce-scatter and an all-gather, 2(p-1) steps; with the ranks of a node next
            to each other on the ring, each node's link carries 2(p-1)/p of the gradient in each direction)
    e(N)  = (1 - overlap) x c(N)       the part of the all-reduce the backward does not hide
    throughput(N) = N x r x b / t(N);  speedup = throughput(N) / throughput(1);  efficiency = speedup / N

overlap: measured when the run itself spanned nodes (1 - its exposed all-reduce / the same all-reduce timed
alone in that run); from a one-node run it is not observable, and the model assumes none (the CPU backends' all-reduce runs on the
cores the backward uses: what was measured here, see BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


def fit_link(points: Sequence[Sequence[float]], nodes: int) -> dict:
    """Bandwidth (bytes/s) and latency (s) of the link from all-reduce timings among `nodes` leaders.
    points: [[bytes, seconds], ...], the smallest message first. Ring model: t = 2(q-1) a + 2(q-1)/q x S / B.
    Latency from the smallest message; bandwidth from the larger ones (least squares through that intercept)."""
    q = max(int(nodes), 2)
    steps, share = 2 * (q - 1), 2 * (q - 1) / q
    pts = sorted((float(s), float(t)) for s, t in points)
    if len(pts) < 2:
        raise ValueError("need at least two message sizes to fit a link")
    small_s, small_t = pts[0]
    latency = max(small_t - share * small_s / 1e12, 0.0) / steps
    big = [(s, t) for s, t in pts[1:] if s >= 1 << 20] or pts[1:]
    xs = [share * s for s, _ in big]
    ys = [t - steps * latency for _, t in big]
    slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    bandwidth = 1.0 / slope if slope > 0 else float("inf")
    return {
        "bandwidth_Bps": bandwidth,
        "latency_s": latency,
        "method": f"ring all-reduce among {q} node leaders: t = 2(q-1) x latency + 2(q-1)/q x bytes / bandwidth",
    }


def ring_allreduce_s(
    bucket_bytes: Sequence[int], ranks: int, bandwidth_Bps: float, latency_s: float
) -> float:
    """Seconds for one step's gradient all-reduce, bucket by bucket, over `ranks` ranks on the link."""
    if ranks <= 1:
        return 0.0
    steps, share = 2 * (ranks - 1), 2 * (ranks - 1) / ranks
    return sum(steps * latency_s + share * b / bandwidth_Bps for b in bucket_bytes)


@dataclass(frozen=True)
class Profile:
    """What a finished run observed (results.json), in the units the model needs."""

    nodes: int
    ranks_per_node: int
    samples_per_rank_step: float  # per-device batch x gradient accumulation
    step_time_s: float  # steady, per optimizer step
    exposed_s: float  # the all-reduce the backward did not hide (0 for one rank)
    allreduce_s: float  # the same all-reduce timed alone, in the run (0: not measured)
    bucket_bytes: tuple[int, ...]  # what DDP all-reduces per step
    train_samples: int = 0  # features per epoch
    epochs: float = 0.0  # the run trains epochs ...
    max_steps: int = 0  # ... or a fixed number of optimizer steps (train.max_steps)

    @property
    def t_local(self) -> float:
        return max(self.step_time_s - self.exposed_s, 1e-9)


def profile_from_reference(
    ranks_per_node: int,
    batch_per_rank: float,
    features: int,
    epoch_s: float,
    bucket_bytes: Sequence[int],
    epochs: float = 1.0,
) -> Profile:
    """A one-node Profile from a time measured elsewhere (a published figure, another cluster): an epoch of
    `features` at ranks_per_node x batch_per_rank samples per step took epoch_s. The one-node all-reduce is in
    that time (it is the reference's); nothing is exposed beyond it."""
    steps = -(-int(features) // int(ranks_per_node * batch_per_rank))
    return Profile(
        nodes=1,
        ranks_per_node=ranks_per_node,
        samples_per_rank_step=batch_per_rank,
        step_time_s=epoch_s / steps,
        exposed_s=0.0,
        allreduce_s=0.0,
        bucket_bytes=tuple(int(b) for b in bucket_bytes),
        train_samples=int(features),
        epochs=epochs,
    )


COMPRESSED_BYTES = {
    "none": 1.0,
    "fp16": 0.5,
    "bf16": 0.5,
}  # train.ddp_compress: the share of each bucket sent


def on_the_wire(bucket_bytes: Sequence[int], compress: str) -> tuple[int, ...]:
    """The bytes each of DDP's (fp32) buckets puts on the link under train.ddp_compress."""
    return tuple(int(b * COMPRESSED_BYTES.get(compress, 1.0)) for b in bucket_bytes)


def profile_from_results(res: dict, epochs: float = 0.0, max_steps: int = 0) -> Profile:
    """A Profile from a run's results.json; ValueError naming what is missing."""
    need = [
        k
        for k in ("world_size", "nodes", "step_time_s", "steady_samples_per_second")
        if not res.get(k)
    ]
    if need:
        raise ValueError(
            f"the run's results have no {', '.join(need)} (a run from before hpcqa measured them, "
            "or one too short to time)"
        )
    world, nodes = int(res["world_size"]), int(res["nodes"])
    comm = res.get("comm") or {}
    if not comm.get("bucket_bytes"):
        raise ValueError(
            'the run\'s results have no "comm" (its gradient buckets and exposed all-reduce): '
            "the run predates hpcqa measuring them"
        )
    per_rank = res["steady_samples_per_second"] * res["step_time_s"] / world
    buckets = tuple(int(b) for b in comm.get("wire_bucket_bytes") or comm["bucket_bytes"])
    return Profile(
        nodes=nodes,
        ranks_per_node=world // nodes,
        samples_per_rank_step=per_rank,
        step_time_s=float(res["step_time_s"]),
        exposed_s=float(comm.get("exposed_s") or 0.0),
        allreduce_s=float(comm.get("allreduce_s") or 0.0),
        bucket_bytes=buckets,
        train_samples=int(res.get("train_features") or 0),
        epochs=epochs,
        max_steps=max(int(max_steps), 0),
    )


@dataclass(frozen=True)
class Link:
    bandwidth_Bps: float
    latency_s: float
    source: str = ""


@dataclass(frozen=True)
class Prediction:
    nodes: int
    ranks_per_node: int
    step_time_s: float
    allreduce_s: float
    exposed_s: float
    samples_per_second: float
    speedup: float
    efficiency: float
    time_to_train_s: float | None


@dataclass(frozen=True)
class Model:
    profile: Profile
    link: Link
    overlap: float = 0.0
    overlap_source: str = "assumed none (one-node run)"

    @classmethod
    def from_run(cls, profile: Profile, link: Link) -> "Model":
        """The overlap from the run itself when it spanned nodes (its exposed all-reduce against the same
        all-reduce timed alone in that run, on the link it had), else none."""
        if profile.nodes < 2 or profile.allreduce_s <= 0:
            return cls(profile, link)
        o = min(max(1.0 - profile.exposed_s / profile.allreduce_s, 0.0), 1.0)
        return cls(
            profile,
            link,
            o,
            f"measured on {profile.nodes} nodes: {100 * o:.0f} % of the all-reduce hidden",
        )

    def at(self, nodes: int, ranks_per_node: int | None = None) -> tuple[float, float]:
        """(full all-reduce s, exposed s) per step at `nodes` nodes."""
        p = self.profile
        r = ranks_per_node or p.ranks_per_node
        if nodes == 1:
            # within one node: what the run measured there, else nothing to add
            exposed = p.exposed_s if p.nodes == 1 and r == p.ranks_per_node else 0.0
            return exposed, exposed
        full = ring_allreduce_s(
            p.bucket_bytes, nodes * r, self.link.bandwidth_Bps, self.link.latency_s
        )
        return full, (1.0 - self.overlap) * full

    def predict(
        self, nodes: Sequence[int], ranks_per_node: int | None = None, t_local: float | None = None
    ) -> list[Prediction]:
        p = self.profile
        r = ranks_per_node or p.ranks_per_node
        local = t_local if t_local is not None else p.t_local
        out: list[Prediction] = []
        base = None
        for n in sorted(set(nodes) | {1}):
            full, exposed = self.at(n, r)
            step = local + exposed
            rate = n * r * p.samples_per_rank_step / step
            base = base or rate
            out.append(
                Prediction(
                    n,
                    r,
                    step,
                    full,
                    exposed,
                    rate,
                    rate / base,
                    rate / base / n,
                    self.time_to_train(rate, step),
                )
            )
        return [x for x in out if x.nodes in set(nodes)]

    def time_to_train(self, rate: float, step: float) -> float | None:
        """Epochs: the same samples, at this rate. max_steps: the same number of steps, each this long (more
        nodes then see more samples)."""
        p = self.profile
        if p.train_samples and p.epochs:
            return p.train_samples * p.epochs / rate
        return p.max_steps * step if p.max_steps else None

    def bandwidth_for(self, nodes: int, efficiency: float) -> float | None:
        """The link bandwidth (bytes/s, at this link's latency) at which `nodes` nodes reach `efficiency` of linear
        scaling: t_local / (t_local + e) >= efficiency, e = (1 - overlap) x (latency part + 2(p-1)/p x bytes / B).
        None when the latency alone already costs more than the budget (no bandwidth is enough)."""
        p = self.profile
        if nodes < 2:
            return 0.0
        ranks = nodes * p.ranks_per_node
        budget = p.t_local * (1 / efficiency - 1) / max(1.0 - self.overlap, 1e-9)
        latency = len(p.bucket_bytes) * 2 * (ranks - 1) * self.link.latency_s
        if budget <= latency:
            return None
        return 2 * (ranks - 1) / ranks * sum(p.bucket_bytes) / (budget - latency)

    def node_rate(self) -> float:
        """Samples/s one node of the reference computes, its all-reduce left out: what a different layout of the
        same node (other ranks per node, other batch) is assumed to compute too (the cores are the same; a
        layout's own efficiency is what `hpcqa tune` measures)."""
        p = self.profile
        return p.ranks_per_node * p.samples_per_rank_step / p.t_local

    def predict_layout(self, nodes: int, ranks_per_node: int, batch_per_rank: float) -> Prediction:
        """`nodes` nodes of `ranks_per_node` ranks at `batch_per_rank` each -- a layout other than the
        reference's (a published run that used one process on one node and two per node on four): each rank's
        compute is its share of the node's rate, plus the exposed part of the ring all-reduce among all ranks."""
        p = self.profile
        local = ranks_per_node * batch_per_rank / self.node_rate()
        full = (
            ring_allreduce_s(
                p.bucket_bytes, nodes * ranks_per_node, self.link.bandwidth_Bps, self.link.latency_s
            )
            if nodes * ranks_per_node > 1
            else 0.0
        )
        exposed = (1.0 - self.overlap) * full
        step = local + exposed
        rate = nodes * ranks_per_node * batch_per_rank / step
        base = self.node_rate()
        seconds = p.train_samples * p.epochs / rate if p.train_samples and p.epochs else None
        return Prediction(
            nodes,
            ranks_per_node,
            step,
            full,
            exposed,
            rate,
            rate / base,
            rate / base / nodes,
            seconds,
        )

    def bandwidth_for_step(
        self, nodes: int, ranks_per_node: int, batch_per_rank: float, step_s: float
    ) -> float | None:
        """The link bandwidth (bytes/s, at this link's latency and the model's overlap) at which that layout's
        step takes `step_s`: the inverse of predict_layout. None when the compute and latency alone take longer."""
        p = self.profile
        ranks = nodes * ranks_per_node
        exposed = step_s - ranks_per_node * batch_per_rank / self.node_rate()
        full = exposed / max(1.0 - self.overlap, 1e-9)
        latency = len(p.bucket_bytes) * 2 * (ranks - 1) * self.link.latency_s
        if full <= latency or ranks < 2:
            return None
        return 2 * (ranks - 1) / ranks * sum(p.bucket_bytes) / (full - latency)

    def best_layout(
        self, nodes: int, local_by_layout: dict[int, float]
    ) -> tuple[int, float] | None:
        """Among measured one-node layouts {ranks per node: t_local}, the one with the most samples/s at `nodes`."""
        best = None
        for r, local in local_by_layout.items():
            (pred,) = self.predict([nodes], r, local)
            if best is None or pred.samples_per_second > best[1]:
                best = (r, pred.samples_per_second)
        return best


def slower_than_one(preds: Sequence[Prediction]) -> list[Prediction]:
    """The node counts predicted to train slower than one node."""
    one = next((x for x in preds if x.nodes == 1), None)
    return [
        x for x in preds if one and x.nodes > 1 and x.samples_per_second < one.samples_per_second
    ]


def human_rate(bps: float) -> str:
    """Bytes/s as a link speed: '117 Mbit/s', '9.4 Gbit/s'."""
    bits = bps * 8
    for unit, div in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= div:
            return f"{bits / div:.3g} {unit}"
    return f"{bits:.3g} bit/s"
