"""Pinning from the node's real topology, on saved sysfs trees as varied as real servers.

Each tree is written by the test in the layout of /sys/devices/system (cpu/cpuN/topology/...,
node/nodeK/cpulist, cpu/online) and read back by the same `read_node` the ranks use.
"""

import json
from pathlib import Path

import pytest

from hpcqa.core import config, plan, ranklayout, topology
from hpcqa.rank import wrapper as rank
from tests.conftest import ROOT, SLURM_HERE


def write_tree(
    root: Path, cpus: dict[int, tuple[int, int]], numa: dict[int, list[int]] | None = None
) -> Path:
    """cpus: cpu -> (socket, core id). Siblings = CPUs with the same (socket, core id)."""
    for cpu, (pkg, core) in cpus.items():
        sib = sorted(c for c, key in cpus.items() if key == (pkg, core))
        d = root / "cpu" / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
        (d / "core_id").write_text(f"{core}\n")
        (d / "thread_siblings_list").write_text(topology.cpu_list(sib) + "\n")
    (root / "cpu" / "online").write_text(topology.cpu_list(cpus) + "\n")
    numa = numa or {
        s: [c for c, (p, _) in cpus.items() if p == s]
        for s in sorted({p for p, _ in cpus.values()})
    }
    for n, members in numa.items():
        (root / "node" / f"node{n}").mkdir(parents=True)
        (root / "node" / f"node{n}" / "cpulist").write_text(topology.cpu_list(members) + "\n")
    return root


def socket_major(sockets, cores, threads, core_ids=None):
    core_ids = core_ids or list(range(cores))
    n = sockets * cores
    return {
        t * n + s * cores + i: (s, core_ids[i])
        for t in range(threads)
        for s in range(sockets)
        for i in range(cores)
    }


def round_robin(sockets, cores):
    return {i: (i % sockets, i // sockets) for i in range(sockets * cores)}


def adjacent_siblings(sockets, cores):
    return {
        2 * (s * cores + i) + t: (s, i)
        for s in range(sockets)
        for i in range(cores)
        for t in range(2)
    }


LAYOUTS = {
    # name: (cpus, numa or None, allowed or None, config overrides, expected pools)
    "socket-major, gapped core ids, HT +N": (
        socket_major(2, 4, 2, core_ids=[0, 1, 4, 5]),
        None,
        None,
        ["cluster.cores_per_socket=4"],
        [[0, 1, 2, 3], [4, 5, 6, 7]],
    ),
    "round-robin numbering": (
        round_robin(2, 4),
        None,
        None,
        ["cluster.cores_per_socket=4"],
        [[0, 2, 4, 6], [1, 3, 5, 7]],
    ),
    "adjacent siblings": (
        adjacent_siblings(2, 4),
        None,
        None,
        ["cluster.cores_per_socket=4", "cluster.threads_per_core=2"],
        [[0, 2, 4, 6], [8, 10, 12, 14]],
    ),
    "4 sockets": (
        socket_major(4, 4, 1),
        None,
        None,
        ["cluster.sockets_per_node=4", "cluster.cores_per_socket=4"],
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]],
    ),
    "cgroup subset (no --exclusive)": (
        socket_major(2, 8, 2),
        None,
        [2, 3, 4, 5, 10, 11, 12, 13, 18, 19, 20, 21],
        ["cluster.cores_per_socket=8"],
        [[2, 3, 4, 5], [10, 11, 12, 13]],
    ),
    "cores left to the OS (Ice Lake 26 of 32)": (
        socket_major(2, 32, 1),
        None,
        None,
        ["cluster.cores_per_socket=26"],
        [list(range(0, 26)), list(range(32, 58))],
    ),
    "SNC2, a rank per socket": (
        socket_major(2, 8, 1),
        {0: [0, 1, 2, 3], 1: [4, 5, 6, 7], 2: [8, 9, 10, 11], 3: [12, 13, 14, 15]},
        None,
        ["cluster.cores_per_socket=8"],
        [list(range(0, 8)), list(range(8, 16))],
    ),
    "SNC2, a rank per NUMA node": (
        socket_major(2, 8, 1),
        {0: [0, 1, 2, 3], 1: [4, 5, 6, 7], 2: [8, 9, 10, 11], 3: [12, 13, 14, 15]},
        None,
        ["cluster.cores_per_socket=8", "cluster.numa_per_socket=2", 'launch.rank_domain="numa"'],
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]],
    ),
}


def spr(*overrides, backend="gloo"):
    cfg = config.load(
        ROOT / "configs/squad_spr.toml",
        [f"train.ddp_backend={json.dumps(backend)}", "launch.ccl_workers=1", *overrides],
    )
    return plan.build_plan(cfg, plan.HostProbe(schedulers=SLURM_HERE, python="python3"))


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("backend", ["gloo", "ccl"])
def test_pools_on_real_layouts(tmp_path, name, backend):
    cpus, numa, allowed, overrides, expected = LAYOUTS[name]
    node = topology.read_node(
        write_tree(tmp_path, cpus, numa), allowed=allowed or list(cpus), cpuinfo=None
    )
    p = spr(*overrides, backend=backend)
    by_cpu = {c.cpu: c for c in node.cpus}
    domain = (
        (lambda c: c.numa_node) if p.config.launch.rank_domain == "numa" else (lambda c: c.socket)
    )
    views = rank.node_view(p, node)["ranks"]
    assert [v["cpus"] for v in views] == expected
    seen: set[int] = set()
    for v in views:
        assert len({domain(by_cpu[c]) for c in v["cpus"]}) == 1, f"rank {v['local_rank']} straddles"
        assert len({by_cpu[c].core_key for c in v["cpus"]}) == len(v["cpus"]), (
            "two threads of one core"
        )
        assert set(v["cpus"]) <= set(node.allowed) and not seen & set(v["cpus"])
        seen |= set(v["cpus"])
        assert len(v["cpus"]) <= p.config.cores_per_domain // p.ranks_per_domain
        env = v["env"]
        assert env["OMP_NUM_THREADS"] == str(len(v["compute"]))
        assert env["KMP_AFFINITY"] == topology.kmp_affinity(v["compute"])  # squad_spr preloads iomp
        assert v["ccl"] == (v["cpus"][:1] if backend == "ccl" else [])
    pools = [
        topology.Pool(v["local_rank"], (), (), tuple(v["ccl"]), tuple(v["compute"])) for v in views
    ]
    if backend == "ccl":
        for v in views:
            assert v["env"]["CCL_WORKER_AFFINITY"] == ",".join(str(x["ccl"][0]) for x in views)
            assert v["env"]["I_MPI_PIN_DOMAIN"] == topology.i_mpi_pin_domain(pools)
    else:
        assert all("CCL_WORKER_AFFINITY" not in v["env"] for v in views)


def test_the_seed_spr_example_is_unchanged_on_a_socket_major_node(tmp_path):
    p = spr("cluster.threads_per_core=2", "launch.ccl_workers=4", backend="ccl")
    node = topology.read_node(
        write_tree(tmp_path, socket_major(2, 56, 2)), allowed=range(224), cpuinfo=None
    )
    views = rank.node_view(p, node)["ranks"]
    for v, lr in zip(views, p.local_ranks):
        assert v["as_planned"] and v["env"]["OMP_NUM_THREADS"] == "52"
        assert (
            v["env"]["CCL_WORKER_AFFINITY"]
            == lr.env["CCL_WORKER_AFFINITY"]
            == "0,1,2,3,56,57,58,59"
        )
        assert (
            v["env"]["I_MPI_PIN_DOMAIN"]
            == lr.env["I_MPI_PIN_DOMAIN"]
            == "[0xfffffffffffff0,0xfffffffffffff000000000000000]"
        )


def test_round_robin_node_rederives_and_warns_once_with_both_layouts(tmp_path):
    p = spr("cluster.cores_per_socket=4")
    node = topology.read_node(
        write_tree(tmp_path, round_robin(2, 4)), allowed=range(8), cpuinfo=None
    )
    base = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "8",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "cn[1-4]",
        "SLURM_TASKS_PER_NODE": "2(x4)",
        "SLURM_JOB_ID": "5",
    }
    env0, cpus0, warn0 = rank.rank_environment(p, {**base, "SLURM_LOCALID": "0"}, node, "cn1")
    env1, cpus1, warn1 = rank.rank_environment(
        p, {**base, "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}, node, "cn1"
    )
    assert cpus0 == [0, 2, 4, 6] and cpus1 == [1, 3, 5, 7]
    assert p.local_ranks[0].cpus == (0, 1, 2, 3)  # the prediction assumed socket-major numbering
    layout0 = [w for w in warn0 if not w.startswith("LD_PRELOAD")]
    assert (
        len(layout0) == 1
        and "planned r0 0-3; r1 4-7 | this node r0 0,2,4,6 (socket 0); r1 1,3,5,7 (socket 1)"
        in layout0[0]
        and not [w for w in warn1 if not w.startswith("LD_PRELOAD")]
    )
    assert env1["HPCQA_SOCKETS"] == "1" and env1["KMP_AFFINITY"] == topology.kmp_affinity(
        [1, 3, 5, 7]
    )
    assert env1["HPCQA_BIND_NOTE"].startswith("re-derived")


def test_fewer_sockets_than_ranks_gives_virtual_sockets_without_straddling(tmp_path):
    node = topology.read_node(
        write_tree(tmp_path, socket_major(2, 4, 1)), allowed=range(8), cpuinfo=None
    )
    lay = topology.layout(node, 4, 4, 0)
    assert lay.virtual and [p.cpus for p in lay.pools] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert "none straddles" in lay.notes[0]
    odd = topology.layout(node, 3, 4, 0)  # 3 ranks on 2 sockets: slices of 2 still fit
    assert [p.cpus for p in odd.pools] == [(0, 1), (2, 3), (4, 5)] and "straddle" not in odd.notes[
        0
    ]
    six = topology.read_node(
        write_tree(tmp_path / "six", socket_major(2, 3, 1)), allowed=range(6), cpuinfo=None
    )
    odd = topology.layout(six, 3, 3, 0)  # here one can't avoid it: said so
    assert [p.cpus for p in odd.pools] == [
        (0, 1),
        (2, 3),
        (4, 5),
    ] and "local rank(s) [1] straddle" in odd.notes[0]


def test_more_ranks_than_cores_is_loud(tmp_path):
    p = spr("cluster.cores_per_socket=4")
    node = topology.read_node(
        write_tree(tmp_path, socket_major(1, 1, 1)), allowed=[0], cpuinfo=None
    )
    lay = ranklayout.node_layout(p, node)
    assert [p.cpus for p in lay.pools] == [(0,), (0,)] and "OVERSUBSCRIBED" in lay.notes[0]


def test_memory_binding_only_where_there_is_a_choice(tmp_path):
    snc = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7], 2: [8, 9, 10, 11], 3: [12, 13, 14, 15]}
    node = topology.read_node(
        write_tree(tmp_path / "a", socket_major(2, 8, 1), snc), allowed=range(16), cpuinfo=None
    )
    p = spr("cluster.cores_per_socket=8")
    pools = ranklayout.node_layout(p, node).pools
    assert (
        rank.memory_nodes(p, pools[1], node) == "2,3"
    )  # a rank per socket spans both of its NUMA nodes
    assert (
        rank.memory_nodes(
            spr("cluster.cores_per_socket=8", "launch.bind_memory=false"), pools[1], node
        )
        == ""
    )
    one = topology.read_node(
        write_tree(tmp_path / "b", socket_major(2, 8, 1), {0: list(range(16))}),
        allowed=range(16),
        cpuinfo=None,
    )
    assert rank.memory_nodes(p, ranklayout.node_layout(p, one).pools[0], one) == ""


@pytest.mark.process
def test_set_mempolicy_really_binds(tmp_path):
    """The ctypes call on this machine: bind to NUMA node 0 and read the policy back from the kernel."""
    import subprocess
    import sys

    code = (
        "from hpcqa.rank import wrapper as rank; print(rank.bind_memory([0])); "
        "print(open('/proc/self/numa_maps').read().split(chr(10))[0])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    first, maps = r.stdout.splitlines()[:2]
    if first.startswith("not bound") and "Operation not permitted" in first:
        pytest.skip(f"this kernel refuses set_mempolicy here: {first}")
    assert first == "bound to NUMA node(s) 0" and "bind:0" in maps


@pytest.mark.process
def test_topology_cli_on_a_saved_tree_and_an_allowed_subset(tmp_path, cli):
    tree = write_tree(tmp_path, socket_major(2, 8, 2))
    r = cli("topology", "--sysfs", str(tree), "--allowed", "4-11,20-27", "--json")
    assert r.returncode == 0, r.stderr
    node = json.loads(r.stdout)["node"]
    assert [s["cpus"] for s in node["sockets"]] == ["4-7,20-23", "8-11,24-27"] and node[
        "threads_per_core"
    ] == 2
    r = cli(
        "topology",
        "configs/squad_spr.toml",
        "--set",
        "train.ddp_backend=ccl",
        "--set",
        "launch.ccl_workers=2",
        "--sysfs",
        str(tree),
        "--allowed",
        "4-11,20-27",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    ranks = json.loads(r.stdout)["ranks"]
    assert [x["cpus"] for x in ranks] == [[4, 5, 6, 7], [8, 9, 10, 11]]
    assert [x["ccl"] for x in ranks] == [
        [4, 5],
        [8, 9],
    ]  # ccl reserved although the bindings aren't installed
    assert (
        ranks[0]["env"]["CCL_WORKER_AFFINITY"] == "4,5,8,9"
        and ranks[1]["env"]["OMP_NUM_THREADS"] == "2"
    )
    bad = cli("topology", "--sysfs", str(tmp_path / "nope"))
    assert bad.returncode == 2 and "no cpu/ folder" in bad.stderr and "Traceback" not in bad.stderr
    bad = cli("topology", "--allowed", "1-x")
    assert bad.returncode == 2 and "not a CPU list" in bad.stderr


@pytest.mark.parametrize("sockets", [1, 2, 4])
@pytest.mark.parametrize("per_socket", [1, 2, 4])
@pytest.mark.parametrize("numbering", ["socket-major", "round-robin"])
def test_several_ranks_per_socket_never_straddle(tmp_path, sockets, per_socket, numbering):
    cpus = socket_major(sockets, 8, 1) if numbering == "socket-major" else round_robin(sockets, 8)
    node = topology.read_node(write_tree(tmp_path, cpus), allowed=list(cpus), cpuinfo=None)
    p = spr(
        f"cluster.sockets_per_node={sockets}",
        "cluster.cores_per_socket=8",
        "cluster.threads_per_core=1",
        f"launch.ranks_per_socket={per_socket}",
        'launch.launcher="mpirun"',
    )
    assert p.ranks_per_node == sockets * per_socket and p.world_size == 4 * sockets * per_socket
    assert p.slurm_parameters()["ntasks_per_node"] == sockets * per_socket
    assert p.cpus_per_task == 8 // per_socket
    views = rank.node_view(p, node)["ranks"]
    assert len(views) == sockets * per_socket and all(
        v["as_planned"] or numbering == "round-robin" for v in views
    )
    seen: set[int] = set()
    for v in views:
        assert len(v["socket"]) == 1 and len(v["cpus"]) == 8 // per_socket
        assert {cpus[c][0] for c in v["cpus"]} == set(v["socket"])  # sysfs says: one socket
        assert not seen & set(v["cpus"])
        seen |= set(v["cpus"])
    assert (
        views[0]["env"]["I_MPI_PIN_DOMAIN"].count("0x") == sockets * per_socket
    )  # one mask per local rank


def test_ranks_per_socket_is_checked():
    from hpcqa.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        spr("cluster.cores_per_socket=4", "launch.ranks_per_socket=8")
    assert e.value.key == "launch.ranks_per_socket"
    with pytest.raises(ConfigError) as e:
        spr(
            "cluster.cores_per_socket=8",
            "launch.ranks_per_socket=4",
            "launch.ccl_workers=2",
            backend="ccl",
        )
    assert e.value.key == "launch.ccl_workers"


def test_siblings_join_the_compute_threads_when_asked(tmp_path):
    node = topology.read_node(
        write_tree(tmp_path, adjacent_siblings(2, 4)), allowed=range(16), cpuinfo=None
    )
    base = ("cluster.cores_per_socket=4", "cluster.threads_per_core=2", "launch.ranks_per_socket=1")
    off = rank.node_view(spr(*base), node)["ranks"]
    on_plan = spr(*base, "launch.use_siblings=true")
    on = rank.node_view(on_plan, node)["ranks"]
    assert off[0]["cpus"] == [0, 2, 4, 6] and off[0]["env"]["OMP_NUM_THREADS"] == "4"
    assert off[0]["env"]["KMP_HW_SUBSET"] == "1T"
    assert on[1]["cpus"] == list(range(8, 16)) and on[1]["env"]["OMP_NUM_THREADS"] == "8"
    assert "KMP_HW_SUBSET" not in on[1]["env"] and on_plan.local_ranks[0].cpus == (
        0,
        1,
        2,
        3,
        8,
        9,
        10,
        11,
    )
