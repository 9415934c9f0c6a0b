import json

import pytest

from hpcqa.core import distenv
from hpcqa.errors import DistEnvError


@pytest.mark.parametrize(
    "text,hosts",
    [
        ("cn01", ["cn01"]),
        ("cn[01-03,07]", ["cn01", "cn02", "cn03", "cn07"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("x1,y[4-5]", ["x1", "y4", "y5"]),
        ("a[08-10]", ["a08", "a09", "a10"]),
        ("n[1,3-5]", ["n1", "n3", "n4", "n5"]),
        ("gpu-a[1-2]b", ["gpu-a1b", "gpu-a2b"]),
        ("node[1-2],login", ["node1", "node2", "login"]),
        ("c[9-11]", ["c9", "c10", "c11"]),
        (
            "rack[0-1]-blade[0-1],z",
            ["rack0-blade0", "rack0-blade1", "rack1-blade0", "rack1-blade1", "z"],
        ),
    ],
)
def test_expand_nodelist(text, hosts):
    assert distenv.expand_nodelist(text) == hosts


@pytest.mark.parametrize(
    "text",
    ["", "cn[01-03", "cn]01[", "cn[3-1]", "cn[a-b]", "a,,b", "cn[[1]]", "cn[1-]", "x y", "cn[]"],
)
def test_malformed_nodelist(text):
    with pytest.raises(DistEnvError):
        distenv.expand_nodelist(text)


def test_huge_nodelist_is_refused():
    with pytest.raises(DistEnvError):
        distenv.expand_nodelist("n[0-9999999]")


@pytest.mark.parametrize("text,n", [("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1,2(x2)", [1, 2, 2])])
def test_tasks_per_node(text, n):
    assert distenv.parse_tasks_per_node(text) == n


@pytest.mark.parametrize("text", ["2(x)", "x", "2(x3", ""])
def test_bad_tasks_per_node(text):
    with pytest.raises(DistEnvError):
        distenv.parse_tasks_per_node(text)


def slurm(**kw):
    env = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_JOB_NODELIST": "cn[01-02]",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_JOB_ID": "4242",
    }
    env.update(kw)
    return {k: v for k, v in env.items() if v is not None}


def test_slurm_mapping():
    d = distenv.detect(slurm())
    assert (d.source, d.rank, d.world_size, d.local_rank, d.local_world_size, d.node_rank) == (
        "slurm",
        3,
        4,
        1,
        2,
        1,
    )
    assert d.master_addr == "cn01" and d.hosts == ("cn01", "cn02")
    assert d.master_port == distenv.master_port("4242")
    env = d.torch_env()
    assert env["RANK"] == "3" and env["MASTER_ADDR"] == "cn01"


def test_slurm_uneven_tasks_per_node():
    d = distenv.detect(
        slurm(
            SLURM_NTASKS="7",
            SLURM_PROCID="6",
            SLURM_NODEID="3",
            SLURM_LOCALID="0",
            SLURM_JOB_NODELIST="cn[01-03,07]",
            SLURM_TASKS_PER_NODE="2(x3),1",
        )
    )
    assert d.local_world_size == 1 and d.node_rank == 3 and d.master_addr == "cn01"


def test_step_nodelist_wins_over_job_nodelist():
    d = distenv.detect(slurm(SLURM_STEP_NODELIST="cn[05-06]"))
    assert d.master_addr == "cn05"


@pytest.mark.parametrize(
    "bad",
    [
        dict(SLURM_PROCID="4"),  # rank >= ntasks
        dict(SLURM_TASKS_PER_NODE="2(x3)"),  # 3 nodes vs nodelist of 2
        dict(SLURM_TASKS_PER_NODE="3(x2)"),  # sums to 6, ntasks 4
        dict(SLURM_LOCALID="2"),  # local >= local size
        dict(SLURM_JOB_NODELIST="cn[01-02"),  # bad nodelist
        dict(SLURM_PROCID="-1"),
        dict(SLURM_NTASKS="four"),
    ],
)
def test_inconsistent_slurm_env_is_an_error(bad):
    with pytest.raises(DistEnvError):
        distenv.detect(slurm(**bad))


def test_intel_mpi_under_slurm_batch_wins():
    env = slurm(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")
    env.update(PMI_RANK="3", PMI_SIZE="4", MPI_LOCALRANKID="1", MPI_LOCALNRANKS="2")
    d = distenv.detect(env)
    assert (d.source, d.rank, d.local_rank, d.node_rank, d.master_addr) == (
        "intel-mpi",
        3,
        1,
        1,
        "cn01",
    )


def test_open_mpi():
    d = distenv.detect(
        {
            "OMPI_COMM_WORLD_RANK": "5",
            "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "MASTER_ADDR": "head",
        }
    )
    assert (d.rank, d.world_size, d.local_rank, d.node_rank, d.master_addr) == (5, 8, 1, 2, "head")


def test_multi_node_mpi_without_address_is_an_error():
    with pytest.raises(DistEnvError) as e:
        distenv.detect(
            {"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
        )
    assert "MASTER_ADDR" in e.value.render()


def test_submitit_local():
    d = distenv.detect(
        {
            "SUBMITIT_LOCAL_GLOBALID": "1",
            "SUBMITIT_LOCAL_NTASKS": "2",
            "SUBMITIT_LOCAL_LOCALID": "1",
            "SUBMITIT_LOCAL_JOB_ID": "777",
        },
        hostname="lap",
    )
    assert (d.rank, d.world_size, d.local_world_size, d.master_addr, d.hosts) == (
        1,
        2,
        2,
        "127.0.0.1",
        ("lap",),
    )
    assert d.master_port == distenv.master_port("777")


def test_torchrun_env_and_explicit_port_win():
    env = slurm(
        RANK="0",
        WORLD_SIZE="2",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="h",
        MASTER_PORT="23456",
    )
    d = distenv.detect(env)
    assert (d.source, d.world_size, d.master_addr, d.master_port) == ("torchrun", 2, "h", 23456)


def test_single_process_default():
    d = distenv.detect({})
    assert (d.rank, d.world_size, d.master_addr) == (0, 1, "127.0.0.1")


def test_port_is_below_ephemeral_range_and_pure():
    ports = {distenv.master_port(j) for j in range(100000, 100000 + 5000)}
    assert len(ports) == 5000
    assert all(10000 <= p < 32768 for p in ports)
    assert distenv.master_port("123") == distenv.master_port("123")


def test_array_tasks_get_distinct_ports():
    # each array task has its own SLURM_JOB_ID; with only the array id the task id is mixed in
    by_job = {distenv.detect(slurm(SLURM_JOB_ID=str(5000 + t))).master_port for t in range(50)}
    assert len(by_job) == 50
    by_task = {
        distenv.detect(
            slurm(SLURM_JOB_ID=None, SLURM_ARRAY_JOB_ID="9000", SLURM_ARRAY_TASK_ID=str(t))
        ).master_port
        for t in range(50)
    }
    assert len(by_task) == 50


@pytest.mark.process
def test_env_json_under_slurm(cli):
    for nodelist, first, hosts in [
        ("cn[01-03,07]", "cn01", 4),
        ("r[1-2]-n[1-2]", "r1-n1", 4),
        ("x1,y[4-5]", "x1", 3),
    ]:
        r = cli(
            "env",
            "--json",
            env={
                "SLURM_PROCID": "1",
                "SLURM_NTASKS": str(hosts),
                "SLURM_LOCALID": "0",
                "SLURM_NODEID": "1",
                "SLURM_JOB_NODELIST": nodelist,
                "SLURM_TASKS_PER_NODE": f"1(x{hosts})",
                "SLURM_JOB_ID": "77",
            },
        )
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["RANK"] == 1 and d["WORLD_SIZE"] == hosts and d["NODE_RANK"] == 1
        assert d["MASTER_ADDR"] == first and len(d["hosts"]) == hosts
        assert d["MASTER_PORT"] == distenv.master_port("77") and d["LOCAL_WORLD_SIZE"] == 1


@pytest.mark.process
def test_env_bad_input_exits_2(cli):
    r = cli(
        "env",
        "--json",
        env={"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "cn[1-"},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "nodelist" in r.stderr


@pytest.mark.process
def test_hosts_verb(cli):
    r = cli("hosts", "cn[01-02],x")
    assert r.stdout.split() == ["cn01", "cn02", "x"]
