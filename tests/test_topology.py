import pytest

from hpcqa.core import topology
from hpcqa.core.topology import Cpu
from hpcqa.errors import PlanError


def test_spr_example_from_the_intel_launcher():
    pools = topology.layout(topology.declared_node(2, 56, 2), 2, 56, 4).pools
    assert topology.ccl_worker_affinity(pools) == "0,1,2,3,56,57,58,59"
    assert topology.i_mpi_pin_domain(pools) == "[0xfffffffffffff0,0xfffffffffffff000000000000000]"
    assert [len(p.compute) for p in pools] == [52, 52]
    assert pools[1].siblings == tuple(range(168, 224))
    assert pools[0].cpus == tuple(range(0, 56))


def test_ice_lake_example_mask():
    pools = topology.layout(topology.declared_node(2, 32, 1), 2, 32, 4).pools
    assert topology.i_mpi_pin_domain(pools).startswith("[0xfffffff0,")
    assert topology.ccl_worker_affinity(pools) == "0,1,2,3,32,33,34,35"


def test_cpu_id_is_not_core_id():
    # siblings interleaved (cpu 0/1 = core 0), socket 1 first in id order
    cpus = [
        Cpu(0, 1, 0),
        Cpu(1, 1, 0),
        Cpu(2, 1, 1),
        Cpu(3, 1, 1),
        Cpu(4, 0, 0),
        Cpu(5, 0, 0),
        Cpu(6, 0, 1),
        Cpu(7, 0, 1),
    ]
    pools = topology.layout(cpus, 2, 2, 1).pools
    assert pools[0].physical == (4, 6) and pools[0].siblings == (5, 7)
    assert pools[1].physical == (0, 2) and pools[1].ccl == (0,) and pools[1].compute == (2,)


def test_virtual_sockets_on_a_one_socket_machine():
    cpus = [Cpu(0, 0, 0), Cpu(1, 0, 1)]
    pools = topology.layout(cpus, 2, 1, 0).pools
    assert [p.cpus for p in pools] == [(0,), (1,)]


def test_not_enough_cores_is_a_plan_error():
    with pytest.raises(PlanError) as e:
        topology.layout([Cpu(0, 0, 0), Cpu(1, 0, 1)], 4, 1, 0)
    assert (
        "4 ranks need at least 4 physical cores" in e.value.render() and "0-1" in e.value.render()
    )


@pytest.mark.parametrize("cpus,text", [([0, 1, 2, 5, 7, 8], "0-2,5,7-8"), ([3], "3"), ([], "none")])
def test_cpu_list(cpus, text):
    assert topology.cpu_list(cpus) == text


def test_env_helpers():
    assert topology.kmp_affinity([2, 3]) == "granularity=fine,proclist=[2,3],explicit"
    assert topology.omp_places([2, 3]) == "{2},{3}"


def test_parse_cpu_list():
    assert topology.parse_cpu_list("0-2,5,7-8\n") == [0, 1, 2, 5, 7, 8]
    with pytest.raises(PlanError):
        topology.parse_cpu_list("0-x")
