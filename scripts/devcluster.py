#!/usr/bin/env python3
"""A real, throw-away Slurm cluster on this machine, for the integration tests and for contributors.

    python scripts/devcluster.py up   --dir /tmp/hq-slurm [--nodes 2] [--accounting] [--max-array-size N]
    eval "$(python scripts/devcluster.py env --dir /tmp/hq-slurm)"     # SLURM_CONF for your shell
    python scripts/devcluster.py down --dir /tmp/hq-slurm

Debian's Slurm 22.05 (slurmctld, slurmd, slurm-client, munge; slurmdbd + mariadb-server for
accounting), everything under --dir. One node: slurmd on 127.0.0.1, named after this machine. N > 1 nodes: one
network namespace per node ("hq0-node2", 10.77.0.12 on bridge hq0-br 10.77.0.1), each slurmd with its
own hostname and /etc/hosts, so ranks on node2 really talk to node1 over a network.
--instance I (0-9) runs several clusters side by side (the test suite's workers: one each): cluster I has its own
ports (6817+10*I...), bridge, subnet 10.77.I and namespaces hqI-nodeK; `down`, `shape` and `env` read the instance
from --dir. The clusters share one munged (Slurm's connections to slurmdbd use munge's default socket whatever
AuthInfo says, measured on 22.05): the first `up` starts it unless one runs already, the last `down` of those
that use it stops it, and only if a devcluster started it. Every node
declares this machine's shape (its 2 CPUs) unless --core-per-node gives node K a core of its own (slurmd
started on CPU K-1, so its tasks inherit that CPU, and the node declares 1 socket x 1 core): two nodes then
never share a core. --link RATE shapes each node's interface with a token bucket (tc tbf: this kernel has
no netem, so the latency is the link's own), and `shape` changes it on a running cluster. Needs root.
`down` stops only the daemons `up` started (by their pid files) and removes the namespaces, veths and
bridge.

    python scripts/devcluster.py up --dir D --nodes 2 --core-per-node --link 100mbit
    python scripts/devcluster.py shape --dir D --nodes 2 --link 1gbit      # or --link none
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NODE_IFACE = "hq0"  # each emulated node's network interface (the same name on every node)
CLUSTER = "hqtest"
INSTANCES = 10


class Instance:
    """The names and ports of cluster number `k`: nothing two clusters side by side could both claim."""

    def __init__(self, k: int):
        if not 0 <= k < INSTANCES:
            raise ValueError(f"instance {k}: 0 to {INSTANCES - 1}")
        self.k = k
        self.net = f"10.77.{k}"
        self.bridge = f"hq{k}-br"
        self.ctld_port, self.slurmd_port, self.dbd_port = (
            6817 + 10 * k,
            6818 + 10 * k,
            6819 + 10 * k,
        )
        self.db_port = 3317 + k

    def ns(self, i: int | str = "") -> str:
        """Node i's network namespace; without i, the prefix of all of this instance's."""
        return f"hq{self.k}-node{i}"

    def veth(self, i: int | str = "") -> str:
        """Node i's veth (its peer inside the node ends in "p"); without i, the prefix of all of this instance's."""
        return f"hq{self.k}-v{i}"

    @staticmethod
    def of(d: Path) -> Instance:
        """The instance a cluster folder was brought up as (0 for one brought up before instances)."""
        try:
            return Instance(int((d / "instance").read_text()))
        except (OSError, ValueError):
            return Instance(0)


def sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


# Generous: each wait ends when the daemon answers, and on a machine shared by several test workers and clusters
# (load 10+ on 2 cores) MariaDB or slurmdbd took longer than 30 s to listen
UP_TIMEOUT_S = 150.0


def wait_port(host: str, port: int, timeout: float = UP_TIMEOUT_S) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listening on {host}:{port} after {timeout}s")


def node_names(n: int) -> list[str]:
    # one node: named after this machine, so the nodelist's first host (MASTER_ADDR) resolves
    return [socket.gethostname()] if n == 1 else [f"node{i}" for i in range(1, n + 1)]


def write_conf(
    d: Path,
    nodes: int,
    accounting: bool,
    max_array: int,
    slurmd_timeout: int = 300,
    preempt: str = "off",
    grace_time: int = 30,
    core_per_node: bool = False,
    inst: Instance = Instance(0),
) -> Path:
    names = node_names(nodes)
    multi = nodes > 1
    lines = [
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost=localhost({inst.net}.1)" if multi else "SlurmctldHost=localhost",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MailProg=/bin/true",
        f"SlurmctldPort={inst.ctld_port}",
        f"SlurmdPort={inst.slurmd_port}",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/slurmctld.pid",
        f"SlurmdPidFile={d}/slurmd.%n.pid",
        f"SlurmctldLogFile={d}/slurmctld.log",
        f"SlurmdLogFile={d}/slurmd.%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"MaxArraySize={max_array}",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1",
        "JobAcctGatherType=jobacct_gather/linux",
        "JobAcctGatherFrequency=task=2",
        "MinJobAge=300",
        "KillWait=5",
        "InactiveLimit=0",
        "Waittime=0",
        "MessageTimeout=20",
        f"SlurmdTimeout={slurmd_timeout}",
        # job ids apart from a cluster beside it: the ranks' MASTER_PORT comes from the job id, and single-node
        # clusters' ranks share this machine's network
        f"FirstJobId={1000 * inst.k + 1}",
    ]
    if accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={inst.dbd_port}",
        ]
    else:
        lines += ["AccountingStorageType=accounting_storage/none"]
    sockets, cores, threads = (1, 1, 1) if core_per_node else machine_shape()
    for i, name in enumerate(names, start=1):
        addr = f"{inst.net}.1{i}" if multi else "127.0.0.1"
        lines.append(
            f"NodeName={name} NodeAddr={addr} Sockets={sockets} CoresPerSocket={cores} "
            f"ThreadsPerCore={threads} RealMemory=4000 State=UNKNOWN"
        )
    if preempt == "off":
        lines.append(
            f"PartitionName=debug Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP "
            f"OverSubscribe=NO"
        )
    else:
        # as production sites run it: a high-priority partition takes nodes from the low one; the victim gets
        # SIGCONT + SIGTERM, SIGKILL after GraceTime, then is requeued (REQUEUE) or ends PREEMPTED (CANCEL)
        # AuthInfo=cred_expire: a requeued job may start again after this (default 120 s); Slurm 24.11 requeues a
        # preempted job once more when it completes, and the tests would wait that out
        lines += [
            "PreemptType=preempt/partition_prio",
            f"PreemptMode={preempt.upper()}",
            "AuthInfo=cred_expire=15",
            f"PartitionName=low Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO "
            f"PriorityTier=1 PreemptMode={preempt.upper()} GraceTime={grace_time}",
            f"PartitionName=high Nodes={','.join(names)} MaxTime=INFINITE State=UP OverSubscribe=NO "
            f"PriorityTier=10 PreemptMode=OFF",
        ]
    conf = d / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def machine_shape() -> tuple[int, int, int]:
    """Every emulated node declares what this machine's sysfs says (declaring more CPUs than there
    are breaks task/affinity; declaring another shape would test a fiction)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from hpcqa.core import topology

    node = topology.read_node(allowed=range(4096))
    shape = node.to_json()
    sockets = len(shape["sockets"])
    return sockets, max(shape["cores"] // sockets, 1), max(shape["threads_per_core"], 1)


MUNGE_DIR = Path("/run/munge")
MUNGE_PID = (
    MUNGE_DIR / "hq-munged.pid"
)  # a munged a devcluster started (one already running has none)
MUNGE_USERS = MUNGE_DIR / "hq-clusters"  # one file per instance using it
MUNGE_LOCK = MUNGE_DIR / "hq-clusters.lock"


@contextlib.contextmanager
def munge_lock():
    os.makedirs(MUNGE_DIR, exist_ok=True)
    shutil.chown(MUNGE_DIR, "munge", "munge")
    with open(MUNGE_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def start_munge(inst: Instance) -> None:
    """munged for this cluster: the one running already (a devcluster's or the system's), or one started here. It
    runs as munge and can't write into our root-owned folder: its pid file is in /run/munge."""
    with munge_lock():
        MUNGE_USERS.mkdir(exist_ok=True)
        (MUNGE_USERS / str(inst.k)).touch()
        if sh("munge", "-n", check=False).returncode == 0:
            return
        sh("runuser", "-u", "munge", "--", "munged", f"--pid-file={MUNGE_PID}", "--force")
        for _ in range(50):
            if sh("munge", "-n", check=False).returncode == 0:
                return
            time.sleep(0.1)
    raise RuntimeError("munged did not come up")


def stop_munge(inst: Instance) -> None:
    """This cluster no longer uses munged; the last one stops it if a devcluster started it."""
    with munge_lock():
        (MUNGE_USERS / str(inst.k)).unlink(missing_ok=True)
        if not any(MUNGE_USERS.glob("*")) and MUNGE_PID.exists():
            _kill_pidfiles([MUNGE_PID])


def start_db(d: Path, env: dict, inst: Instance) -> None:
    db = d / "mysql"
    sock = d / "mysqld.sock"
    if not db.exists():
        # once more on a failure, from an empty folder: one of several clusters coming up at once on a loaded
        # machine failed here with exit 1 (seen once in the test suite; not reproduced alone)
        for _ in range(2):
            r = sh(
                "mariadb-install-db",
                f"--datadir={db}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                check=False,
            )
            if r.returncode == 0:
                break
            shutil.rmtree(db, ignore_errors=True)
        else:
            raise RuntimeError(f"mariadb-install-db failed twice: {(r.stdout + r.stderr)[-2000:]}")
    # --skip-ssl: MariaDB >= 11.4 (Debian 13's 11.8) turns TLS on by itself, and over TLS Slurm 24.11.5's slurmdbd
    # dies at start ("_check_mysql_concat_is_sane: null result", libmariadb error 5027); 10.11 had it off already
    subprocess.Popen(
        [
            "mariadbd",
            f"--datadir={db}",
            "--user=root",
            f"--socket={sock}",
            f"--port={inst.db_port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={d}/mariadb.pid",
            f"--log-error={d}/mariadb.log",
            "--skip-grant-tables=0",
            "--skip-ssl",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_port("127.0.0.1", inst.db_port)
    sql = (
        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'hqpw';"
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
    )
    sh(
        "mariadb", f"--socket={sock}", "--skip-ssl", "-uroot", "-e", sql
    )  # the 11.8 client asks for TLS by itself
    conf = d / "slurmdbd.conf"
    conf.write_text(
        "\n".join(
            [
                "AuthType=auth/munge",
                "DbdHost=localhost",
                f"DbdPort={inst.dbd_port}",
                "SlurmUser=root",
                f"PidFile={d}/slurmdbd.pid",
                f"LogFile={d}/slurmdbd.log",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={inst.db_port}",
                "StorageUser=slurm",
                "StoragePass=hqpw",
                "StorageLoc=slurm_acct_db",
            ]
        )
        + "\n"
    )
    conf.chmod(0o600)
    sh("slurmdbd", env=env)
    wait_port("127.0.0.1", inst.dbd_port)
    end = time.time() + UP_TIMEOUT_S
    while True:
        r = sh("sacctmgr", "-i", "add", "cluster", CLUSTER, env=env, check=False)
        if r.returncode == 0 or "already exists" in (r.stdout + r.stderr):
            return
        if time.time() > end:
            break
        time.sleep(0.5)
    raise RuntimeError(f"sacctmgr add cluster failed: {r.stderr}")


def setup_network(d: Path, nodes: int, inst: Instance) -> None:
    net, bridge = inst.net, inst.bridge
    sh("ip", "link", "add", bridge, "type", "bridge", check=False)
    sh("ip", "addr", "add", f"{net}.1/24", "dev", bridge, check=False)
    sh("ip", "link", "set", bridge, "up")
    hosts = ["127.0.0.1 localhost", f"{net}.1 ctl"] + [
        f"{net}.1{i} node{i}" for i in range(1, nodes + 1)
    ]
    (d / "hosts").write_text("\n".join(hosts) + "\n")
    for i in range(1, nodes + 1):
        ns, veth = inst.ns(i), inst.veth(i)
        sh("ip", "netns", "add", ns, check=False)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p", check=False)
        sh("ip", "link", "set", f"{veth}p", "netns", ns, check=False)
        # the same interface name on every node, as on a real cluster (ib0, eth0): launch.master_interface
        sh("ip", "-n", ns, "link", "set", f"{veth}p", "name", NODE_IFACE, check=False)
        sh("ip", "link", "set", veth, "master", bridge)
        sh("ip", "link", "set", veth, "up")
        sh("ip", "-n", ns, "addr", "add", f"{net}.1{i}/24", "dev", NODE_IFACE, check=False)
        sh("ip", "-n", ns, "link", "set", NODE_IFACE, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def shape_links(nodes: int, rate: str, inst: Instance) -> None:
    """Every node's interface sends at most `rate` (tc tbf; "none" removes the shaping). Each direction of a
    node-to-node path crosses one shaped interface: the sender's."""
    for i in range(1, nodes + 1):
        ns = inst.ns(i)
        sh("tc", "-n", ns, "qdisc", "del", "dev", NODE_IFACE, "root", check=False)
        if rate != "none":
            bits = tc_bits(rate)
            # a burst of at least one timer tick's worth of bytes, or tbf caps well below its rate
            burst = max(bits // 8 // 100, 32 * 1024)
            sh(
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                NODE_IFACE,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                str(burst),
                "latency",
                "100ms",
            )


def tc_bits(rate: str) -> int:
    """'100mbit' -> 100_000_000 (tc's decimal units)."""
    units = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "bit": 1}
    for unit, mult in units.items():
        if rate.lower().endswith(unit):
            return int(float(rate[: -len(unit)]) * mult)
    raise ValueError(f"link rate {rate!r}: use e.g. 100mbit or 1gbit")


def up(a: argparse.Namespace) -> int:
    d = Path(a.dir).absolute()
    for sub in ("state", "spool"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    inst = Instance(a.instance)
    (d / "instance").write_text(str(inst.k))
    conf = write_conf(
        d,
        a.nodes,
        a.accounting,
        a.max_array_size,
        a.slurmd_timeout,
        a.preempt,
        a.grace_time,
        a.core_per_node,
        inst,
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    start_munge(inst)
    if a.accounting:
        start_db(d, env, inst)
    if a.nodes > 1:
        setup_network(d, a.nodes, inst)
        if a.link != "none":
            shape_links(a.nodes, a.link, inst)
    sh("slurmctld", env=env)
    wait_port("127.0.0.1", inst.ctld_port)
    for i, name in enumerate(node_names(a.nodes), start=1):
        (d / "spool" / name).mkdir(exist_ok=True)
        if a.nodes == 1:
            sh("slurmd", "-N", name, env=env)
        else:
            # not `ip netns exec`: it remounts /sys and slurmd then finds no cgroup filesystem
            pin = f"taskset -c {(i - 1) % os.cpu_count()} " if a.core_per_node else ""
            inner = f"mount --bind {d}/hosts /etc/hosts && hostname {name} && exec {pin}slurmd -N {name}"
            sh(
                "nsenter",
                f"--net=/run/netns/{inst.ns(i)}",
                "--",
                "unshare",
                "--mount",
                "--uts",
                "--",
                "sh",
                "-c",
                inner,
                env=env,
            )
    end = time.time() + UP_TIMEOUT_S
    while time.time() < end:
        r = sh("sinfo", "-h", "-o", "%T", env=env, check=False)
        states = r.stdout.split()
        if states and all(s.startswith("idle") for s in states):
            print(f"export SLURM_CONF={conf}")
            return 0
        time.sleep(0.5)
    print(
        f"devcluster: nodes not idle after {UP_TIMEOUT_S:.0f} s: {r.stdout} {r.stderr}",
        file=sys.stderr,
    )
    return 1


def _pid(p: Path) -> int | None:
    try:
        return int(p.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kill_pidfiles(files: list[Path], wait_s: float = 10.0) -> None:
    """SIGTERM every daemon named by these pid files at once, wait for all of them (each takes a second or two
    to shut down), SIGKILL what is left after wait_s."""
    pids = {}
    for p in files:
        pid = _pid(p)
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            pids[pid] = p
        except ProcessLookupError:
            p.unlink(missing_ok=True)
    end = time.time() + wait_s
    while pids and time.time() < end:
        for pid in list(pids):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                pids.pop(pid).unlink(missing_ok=True)
        time.sleep(0.1)
    for pid, p in pids.items():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.unlink(missing_ok=True)


def _step_daemons(d: Path) -> list[int]:
    """slurmstepd processes of this cluster (their working directory is its folder) and their tasks: a
    node whose slurmd a fault test killed leaves them behind. Found by PID, owned by this folder only."""
    procs: dict[int, tuple[int, str]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            procs[int(proc.name)] = (ppid, os.readlink(proc / "cwd"))
        except (OSError, ValueError, IndexError):
            continue
    mine = {
        pid
        for pid, (_, cwd) in procs.items()
        if cwd.removesuffix(" (deleted)").startswith(str(d)) and _comm(pid) == "slurmstepd"
    }
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in mine} - mine
        mine |= more
        grew = bool(more)
    return sorted(mine)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def down(a: argparse.Namespace) -> int:
    d = Path(a.dir).absolute()
    inst = Instance.of(d)
    steps = _step_daemons(d)  # found before their slurmd goes (it is how they are found)
    files = [
        *sorted(d.glob("slurmd.*.pid")),
        d / "slurmctld.pid",
        d / "slurmdbd.pid",
        d / "mariadb.pid",
    ]
    _kill_pidfiles(files)
    for pid in steps:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stop_munge(inst)
    r = sh("ip", "-o", "link", "show", check=False)
    for line in r.stdout.splitlines():
        dev = line.split(":")[1].strip().split("@")[0]
        if dev.startswith(inst.veth()) and not dev.endswith("p"):
            sh("ip", "link", "del", dev, check=False)
    for ns in sh("ip", "netns", "list", check=False).stdout.split("\n"):
        if ns.startswith(inst.ns()):
            sh("ip", "netns", "del", ns.split()[0], check=False)
    sh("ip", "link", "del", inst.bridge, check=False)
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up")
    p.add_argument("--dir", required=True)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--accounting", action="store_true")
    p.add_argument("--max-array-size", type=int, default=1001)
    p.add_argument(
        "--slurmd-timeout",
        type=int,
        default=300,
        help="seconds before an unresponsive node is DOWN (fault tests: 10)",
    )
    p.add_argument(
        "--preempt",
        choices=["off", "requeue", "cancel"],
        default="off",
        help="partitions low (default) and high with partition_prio preemption in this mode",
    )
    p.add_argument(
        "--grace-time", type=int, default=30, help="the low partition's GraceTime (seconds)"
    )
    p.add_argument(
        "--core-per-node",
        action="store_true",
        help="node K runs on CPU K-1 alone (1 socket x 1 core)",
    )
    p.add_argument(
        "--link", default="none", help="shape every node's interface to this rate (100mbit, 1gbit)"
    )
    p.add_argument(
        "--instance",
        type=int,
        default=0,
        choices=range(INSTANCES),
        metavar="0-9",
        help="this cluster's ports, munged, bridge and namespaces: one per cluster side by side",
    )
    p = sub.add_parser("shape")
    p.add_argument("--dir", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--link", required=True, help="rate (100mbit, 1gbit) or none")
    p = sub.add_parser("down")
    p.add_argument("--dir", required=True)
    p = sub.add_parser("env")
    p.add_argument("--dir", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "env":
        print(f"export SLURM_CONF={Path(a.dir).absolute() / 'slurm.conf'}")
        return 0
    if a.cmd == "shape":
        shape_links(a.nodes, a.link, Instance.of(Path(a.dir).absolute()))
        return 0
    return up(a) if a.cmd == "up" else down(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
