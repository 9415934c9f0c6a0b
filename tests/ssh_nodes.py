"""An sshd on each emulated node of a dev cluster (scripts/devcluster.py), for the bare-node mpirun test.

Each sshd runs in its node's network namespace with the node's hostname and /etc/hosts (as slurmd does
there), listens on the node's address only, and accepts one throw-away key made for the test. Started and
stopped by the test (by the PIDs it started); nothing of the host's ssh set-up is touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

PORT = 2222


def _wait_port(host: str, port: int, timeout: float = 20) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"sshd on {host}:{port} did not come up")


@contextmanager
def sshd_on_nodes(cluster_dir: Path, work: Path, nodes: int = 2):
    """-> path of an ssh client config that reaches node1..nodeN as root with the test's key."""
    inst = int(
        (cluster_dir / "instance").read_text()
    )  # the devcluster instance: its subnet and namespaces
    net = f"10.77.{inst}"
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    assert os.path.exists(sshd), (
        "openssh-server is needed for the bare-node test (scripts/test.sh installs it)"
    )
    work.mkdir(parents=True, exist_ok=True)
    key, host_key = work / "id_test", work / "host_key"
    for k in (key, host_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True)
    (work / "authorized_keys").write_text((work / "id_test.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    procs = []
    client = [f"Host node{i}\n  HostName {net}.1{i}\n" for i in range(1, nodes + 1)]
    client.append(
        f"Host *\n  Port {PORT}\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
    )
    config = work / "ssh_config"
    config.write_text("".join(client))
    try:
        for i in range(1, nodes + 1):
            conf = work / f"sshd_config.node{i}"
            conf.write_text(
                f"Port {PORT}\nListenAddress {net}.1{i}\nHostKey {host_key}\n"
                f"AuthorizedKeysFile {work / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                f"StrictModes no\nPidFile {work / f'sshd.node{i}.pid'}\nPrintMotd no\n"
            )
            inner = f"mount --bind {cluster_dir}/hosts /etc/hosts && hostname node{i} && exec {sshd} -D -e -f {conf}"
            log = open(work / f"sshd.node{i}.log", "w")
            procs.append(
                subprocess.Popen(
                    [
                        "nsenter",
                        f"--net=/run/netns/hq{inst}-node{i}",
                        "--",
                        "unshare",
                        "--mount",
                        "--uts",
                        "--",
                        "sh",
                        "-c",
                        inner,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        for i in range(1, nodes + 1):
            _wait_port(f"{net}.1{i}", PORT)
        yield config
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
