from hpcqa.core import config
from hpcqa import doctor
from hpcqa.executors.slurmcli import parse_nodes
from tests.conftest import ROOT

# recorded `scontrol show node -o` (Slurm 22.05.8), trimmed
NODES = ("NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 Sockets=2 Boards=1 State=IDLE "
         "ThreadsPerCore=1 Partitions=debug\n"
         "NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 Sockets=2 Boards=1 State=IDLE "
         "ThreadsPerCore=1 Partitions=debug\n")


def test_parse_nodes():
    nodes = parse_nodes(NODES)
    assert [n["NodeName"] for n in nodes] == ["node1", "node2"] and nodes[0]["Sockets"] == "2"


def test_topology_checks():
    nodes = parse_nodes(NODES)
    ok = doctor.topology_checks(config.load(ROOT / "configs/quickstart.toml", [
        "cluster.sockets_per_node=2", "cluster.cores_per_socket=1", "launch.ranks_per_socket=1"]), nodes)
    assert [c.level for c in ok] == ["ok"]
    bad = doctor.topology_checks(config.load(ROOT / "configs/squad_spr.toml", ["cluster.partition=debug"]), nodes)
    levels = {c.name: c.level for c in bad}
    assert levels == {"nodes": "error", "topology": "error"}
    assert "cores_per_socket=1" in bad[1].fix
    missing = doctor.topology_checks(config.load(ROOT / "configs/squad_spr.toml"), nodes)
    assert missing[0].name == "partition" and missing[0].level == "error"
