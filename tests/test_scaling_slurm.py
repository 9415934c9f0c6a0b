"""The scaling prediction against real 2-node runs: a real Slurm 22.05 cluster of 2 emulated nodes, each on a CPU
of its own (network namespaces; slurmd started on CPU K-1), the link between them shaped with tc to 1 Gbit/s and
100 Mbit/s. The link is measured by `hpcqa tune --comm` (gloo), 2 nodes are predicted by `hpcqa scaling --predict`
from 1-node runs, and a real 2-node job is timed (benchmarks/scaling_bench.py, which prints the same table for
BENCHMARKS.md).

What the test holds the prediction to is what a user acts on: at 1 Gbit/s two nodes pay and submit is quiet, at
100 Mbit/s they are slower than one and submit warns, both predicted and measured; and the all-reduce the run
exposed follows the link. The prediction's size is bounded loosely (measured/predicted within 0.67-1.5, so a model
off by a factor fails): its accuracy is a number benchmarks/scaling_bench.py prints (the 15 % the model claims),
not a timed assertion. On a shared CI machine the 1-node reference, taken while the other emulated node trains, is
the noisy part: one CI run measured 1.28 at 1 Gbit/s (2 nodes 188.9 samples/s against 148.1 predicted from a
91.5 reference) where four runs here gave 0.88-1.08."""

import os
import sys

import pytest

from tests import slurm_cluster
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import scaling_bench  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.alone]  # it times 1- and 2-node runs
LOW, HIGH = 0.67, 1.5


@pytest.fixture(scope="module")
def cores(tmp_path_factory):
    yield from slurm_cluster.cluster(
        tmp_path_factory, nodes=2, accounting=False, core_per_node=True
    )


@pytest.fixture(scope="module")
def bench(cores, tmp_path_factory):
    """The experiment in its parts, each run once for the module: the 1-node reference runs, then one link speed
    at a time (a test per speed, each under the suite's per-test budget)."""
    out = tmp_path_factory.mktemp("scaling")
    # a cache of its own: the links stored here must not reach the other modules' multi-node submits
    env = {
        **os.environ,
        **cores,
        "HPCQA_CACHE": str(out / "cache"),
        "HPCQA_LINK_STORE": str(out / "links.json"),
    }
    rows: dict[str, dict] = {}
    ref: list[dict] = []

    def row(rate: str) -> dict:
        if not ref:
            ref.append(scaling_bench.reference_runs(env, out))
        if rate not in rows:
            (rows[rate],) = scaling_bench.at_rate(
                env, cores["HPCQA_TEST_CLUSTER_DIR"], rate, out, ref[0]
            )
            scaling_bench.print_rows([rows[rate]], markdown=True)
        return rows[rate]

    return row


def test_at_1_gbit_two_nodes_pay_predicted_and_measured(bench):
    fast = bench("1gbit")
    # tc shaped what tune --comm measured (gloo over TCP reaches 85-100 % of the token bucket's rate)
    assert 0.80e9 / 8 < fast["link_Bps"] < 1.05e9 / 8, fast
    assert LOW <= fast["ratio"] <= HIGH, fast
    assert (
        fast["measured"] > fast["one_node"]
        and fast["predicted"] > fast["one_node"]
        and not fast["warned"]
    ), fast


def test_at_100_mbit_two_nodes_are_slower_predicted_measured_and_warned(bench):
    slow = bench("100mbit")
    assert 0.80e8 / 8 < slow["link_Bps"] < 1.05e8 / 8, slow
    assert LOW <= slow["ratio"] <= HIGH, slow
    assert (
        slow["measured"] < slow["one_node"]
        and slow["predicted"] < slow["one_node"]
        and slow["warned"]
    ), slow


def test_the_exposed_all_reduce_follows_the_link(bench):
    """What the slower link added to the exposed all-reduce (no_sync against normal steps) is the wire time the
    model adds for the same bytes (both runs' fixed costs -- gloo's latency, the casts, a busy core -- cancel in the
    difference; a ratio of the two exposures carried them, and sat at its bound, 3.9998 against 4, in one CI run).
    Both speeds' runs are the two tests' above (measured here if this test runs alone)."""
    fast, slow = bench("1gbit"), bench("100mbit")
    added = slow["exposed_measured_s"] - fast["exposed_measured_s"]
    wire = slow["allreduce_predicted_s"] - fast["allreduce_predicted_s"]
    print(
        f"exposed all-reduce added by the slower link: {added:.4f} s measured, {wire:.4f} s predicted"
    )
    assert wire > 0 and LOW <= added / wire <= HIGH, (added, wire)
