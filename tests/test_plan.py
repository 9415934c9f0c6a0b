import json

import pytest

from hpcqa.core import config, plan
from hpcqa.errors import ConfigError
from tests.conftest import ROOT, SLURM_HERE

SPR = ROOT / "configs" / "squad_spr.toml"
HOST = plan.HostProbe(
    schedulers=SLURM_HERE,
    ccl_bindings=False,
    libraries={"tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"},
    python="python3",
)


def spr(*overrides, host=HOST, launcher=None):
    return plan.build_plan(config.load(SPR, list(overrides)), host, launcher=launcher)


def test_spr_has_eight_ranks_one_per_socket():
    lp = spr()
    assert lp.world_size == 8 and len(lp.ranks) == 8
    assert [(r.rank, r.node_rank, r.local_rank) for r in lp.ranks][:3] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
    ]
    assert lp.cpus_per_task == 112  # 56 cores x 2 threads: Slurm allocates the whole socket


def test_spr_ccl_matches_the_intel_launcher():
    lp = spr("cluster.threads_per_core=2", "launch.ccl_workers=4", "train.ddp_backend=ccl")
    r0, r1 = lp.ranks[0].env, lp.ranks[1].env
    for r in (r0, r1):
        assert r["CCL_WORKER_AFFINITY"] == "0,1,2,3,56,57,58,59"
        assert r["I_MPI_PIN_DOMAIN"] == "[0xfffffffffffff0,0xfffffffffffff000000000000000]"
        assert r["OMP_NUM_THREADS"] == "52" and r["CCL_WORKER_COUNT"] == "4"
    assert (
        r0["KMP_AFFINITY"]
        == "granularity=fine,proclist=[" + ",".join(map(str, range(4, 56))) + "],explicit"
    )
    assert lp.ranks[1].cpus == tuple(range(56, 112))
    assert any("NOT importable" in w for w in lp.warnings)


def test_gloo_gives_the_ccl_cores_back():
    lp = spr("launch.ccl_workers=4", "train.ddp_backend=gloo")
    env = lp.ranks[0].env
    assert (
        env["OMP_NUM_THREADS"] == "56"
        and "CCL_WORKER_COUNT" not in env
        and "I_MPI_PIN_DOMAIN" not in env
    )
    assert any("not reserved" in w for w in lp.warnings)


def test_auto_backend_picks_ccl_when_bindings_exist():
    host = plan.HostProbe(schedulers=SLURM_HERE, ccl_bindings=True)
    lp = spr(host=host)
    assert lp.backend.resolved == "ccl" and lp.ranks[0].env["CCL_WORKER_COUNT"] == "4"
    assert spr().backend.resolved == "gloo"


def test_mpirun_launcher_exports_pin_domain():
    lp = spr("train.ddp_backend=gloo", launcher="mpirun")
    assert lp.ranks[0].env["I_MPI_PIN_DOMAIN"].startswith("[0x")


def test_iomp_vs_gomp_variables():
    iomp = spr().ranks[0].env
    assert "KMP_AFFINITY" in iomp and "OMP_PLACES" not in iomp and iomp["KMP_HW_SUBSET"] == "1T"
    gomp = spr("launch.openmp=gomp").ranks[0].env
    assert gomp["OMP_PLACES"].startswith("{0},{1}") and gomp["OMP_PROC_BIND"] == "close"
    assert "KMP_AFFINITY" not in gomp


def test_the_plan_names_the_libraries_the_node_resolves():
    """The plan says what is wanted, by name; where it is, is each node's business. The dry run predicts from
    this host: a library missing here is a warning, not a decision for every node."""
    lp = spr()
    assert (
        lp.ranks[0].env["HPCQA_PRELOAD"] == "tcmalloc:iomp" and "LD_PRELOAD" not in lp.ranks[0].env
    )
    assert any(
        "iomp not found on this host; each rank looks for it on its node" in w for w in lp.warnings
    )
    bare = spr(host=plan.HostProbe(schedulers=SLURM_HERE))
    assert (
        bare.ranks[0].env["HPCQA_PRELOAD"] == "tcmalloc:iomp"
    )  # the same plan: nothing frozen from this host
    assert "HPCQA_PRELOAD" not in spr("launch.malloc=default", "launch.openmp=gomp").ranks[0].env


def test_glibc_heap_is_the_default_allocator_and_only_its_own_variables():
    """launch.malloc = "glibc-heap" (the default): glibc's own variables, no preload; an explicit allocator or glibc
    as it is gets none of them; launch.env still has the last word."""
    heap = spr("launch.malloc=glibc-heap", "launch.openmp=gomp").ranks[0].env
    assert heap["MALLOC_MMAP_MAX_"] == "0" and int(heap["MALLOC_TRIM_THRESHOLD_"]) >= 2**40
    assert "HPCQA_PRELOAD" not in heap
    assert config.load(ROOT / "configs" / "quickstart.toml").launch.malloc == "glibc-heap"
    for other in ("default", "tcmalloc", "jemalloc"):
        assert "MALLOC_MMAP_MAX_" not in spr(f"launch.malloc={other}").ranks[0].env
    mine = spr("launch.malloc=glibc-heap", 'launch.env={MALLOC_MMAP_MAX_ = "4"}').ranks[0].env
    assert mine["MALLOC_MMAP_MAX_"] == "4"


def test_unbound_plan_sets_no_threads():
    lp = spr("launch.bind=false")
    assert lp.ranks[0].cpus == () and "OMP_NUM_THREADS" not in lp.ranks[0].env


def test_executor_auto_and_local_limits():

    with pytest.raises(ConfigError):
        spr(
            "cluster.executor=auto", host=plan.HostProbe(schedulers=frozenset())
        )  # 4 nodes, no Slurm
    lp = spr(
        "cluster.executor=auto", "cluster.nodes=1", host=plan.HostProbe(schedulers=frozenset())
    )
    assert lp.executor == "local" and lp.deferred_env["MASTER_ADDR"] == "127.0.0.1"


def test_slurm_parameters():
    p = spr(
        "cluster.mem_gb=200",
        "cluster.account=ml",
        "cluster.sbatch_extra=['--reservation=r1','--hold']",
    ).slurm_parameters()
    assert p["nodes"] == 4 and p["ntasks_per_node"] == 2 and p["cpus_per_task"] == 112
    assert "--cpus-per-task=112" in p["srun_args"] and "--cpu-bind=none" in p["srun_args"]
    assert p["mem"] == "200GB" and p["account"] == "ml" and p["exclusive"] is True
    assert p["additional_parameters"] == {"reservation": "r1", "hold": True, "requeue": True}


def test_plan_json_shape():
    d = spr().to_json()
    assert d["world_size"] == 8 and d["hosts"] is None
    assert {"rank", "node_rank", "local_rank", "cpus", "env"} <= set(d["ranks"][0])
    assert "unknown until allocation" in d["deferred_env"]["MASTER_ADDR"]


def test_stored_plan_leaves_out_the_derived_ranks_and_restores_them():
    """The stored form's size does not grow with the node count: every rank follows from nodes and local_ranks."""
    small, big = spr("cluster.nodes=2"), spr("cluster.nodes=512")
    assert "ranks" not in json.loads(big.dumps())
    assert abs(len(big.dumps()) - len(small.dumps())) < 16
    back = plan.LaunchPlan.loads(big.dumps())
    assert back == big and len(back.ranks) == 1024 and back.digest == big.digest
    assert back.ranks[1023].env["RANK"] == "1023" and back.ranks[1023].env["NODE_RANK"] == "511"


def test_plan_is_frozen():
    lp = spr()
    with pytest.raises(Exception):
        lp.world_size = 3  # type: ignore[misc]


def test_find_library():
    from hpcqa.rank import preload

    assert (
        preload.find_library(("libx.so",), ["/a", "/b"], exists=lambda p: p == "/b/libx.so")
        == "/b/libx.so"
    )
    assert preload.find_library(("libx.so",), ["/a"], exists=lambda p: False) is None


def test_library_dirs_follow_the_loaders_configuration(tmp_path):
    from hpcqa.rank import preload

    (tmp_path / "ld.so.conf.d").mkdir()
    (tmp_path / "ld.so.conf").write_text(
        "# comment\ninclude ld.so.conf.d/*.conf\n/opt/direct/lib\n"
    )
    (tmp_path / "ld.so.conf.d" / "a.conf").write_text("/opt/intel/lib\n")
    assert preload.ld_so_conf_dirs(str(tmp_path / "ld.so.conf")) == [
        "/opt/intel/lib",
        "/opt/direct/lib",
    ]
    dirs = preload.library_dirs(
        {"LD_LIBRARY_PATH": "/x:/y", "CONDA_PREFIX": "/conda"}, prefix="/venv"
    )
    assert dirs[:4] == ["/x", "/y", "/conda/lib", "/venv/lib"]


def test_executor_kinds_are_one_vocabulary_from_the_config_to_the_registry(tmp_path):
    """cluster.executor's choices are the executor kinds that may be named plus "auto"; "auto" takes the highest affinity
    on the submitting host (submitit's AutoExecutor); a plan or registry row naming an unknown executor is refused."""
    import typing

    from hpcqa.core import kinds
    from hpcqa.errors import PlanError

    assert set(typing.get_args(typing.get_type_hints(config.ClusterConfig)["executor"])) == set(
        kinds.CONFIG_CHOICES
    )
    assert kinds.resolve("auto", plan.HostProbe(schedulers=SLURM_HERE)) is kinds.SlurmKind
    assert kinds.resolve("auto", plan.HostProbe(schedulers=frozenset())) is kinds.LocalKind
    assert (
        kinds.resolve("local", plan.HostProbe(schedulers=SLURM_HERE), "pytorchjob") is kinds.K8sKind
    )
    assert kinds.resolve("slurm", plan.HostProbe(schedulers=frozenset())) is kinds.SlurmKind
    with pytest.raises(PlanError, match="unknown executor 'slurm-script'"):
        kinds.named("slurm-script")
    lp = spr("cluster.executor=slurm", host=plan.HostProbe(schedulers=frozenset()))
    again = plan.LaunchPlan.loads(lp.dumps())
    assert (
        again == lp
        and again.launcher is kinds.Launcher.SRUN
        and again.requeue is kinds.Requeue.NONE
    )
    assert (
        plan.LaunchPlan.loads(lp.with_requeue(kinds.Requeue.POD).dumps()).requeue
        is kinds.Requeue.POD
    )
    damaged = tmp_path / "plan.json"
    damaged.write_text(lp.dumps().replace('"requeue": "none"', '"requeue": "sometimes"'))
    with pytest.raises(PlanError, match="not a launch plan"):
        plan.load(damaged)
    damaged.write_text(json.dumps({**json.loads(lp.dumps()), "executor": "slurm-script"}))
    with pytest.raises(PlanError, match="slurm-script"):
        plan.load(damaged)
