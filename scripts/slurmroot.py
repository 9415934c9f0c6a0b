#!/usr/bin/env python3
"""Another Slurm release for the dev clusters: a Debian root with that release's packages, made once with debootstrap
and cached, and a way to run a command inside it. The command sees this checkout, its venv and interpreter at the
same paths (bind mounts), so `scripts/devcluster.py` and the tests run there unchanged, against that root's
slurmctld, slurmd, slurmdbd, munge and MariaDB: the release is a parameter of the same tests, not a copy of them.

    python scripts/slurmroot.py build --release 24.11          # make or reuse the cached root; prints its path
    python scripts/slurmroot.py run --release 24.11 -- python -m pytest -m slurm tests
    python scripts/slurmroot.py run --release 24.11 -- bash     # a shell there (devcluster.py up, hpcqa submit...)
    python scripts/slurmroot.py run --release 22.05 -- CMD      # the host's own Slurm: CMD as it is

Releases: 22.05 is the host's (Debian 12); 24.11 is Debian 13's (24.11.5). Needs root, debootstrap and the package
mirror the host's apt uses (read from its sources). A first build takes 4-7 minutes and ~800 MB under
$HPCQA_SLURM_ROOTS (default /var/cache/hpcqa/slurm-roots); later runs reuse it. A root whose stamp does not match
this file's package list (or that has none: an interrupted build) is rebuilt.

`run` enters a private mount namespace (nothing it mounts is seen outside, and all of it goes when the command
ends), mounts /proc, /dev, /sys (recursively: slurmd 24.11 needs /sys/fs/cgroup), a fresh /run and a scratch /tmp,
copies the host's /etc/hosts and /etc/resolv.conf (the ranks resolve node names), binds the paths the command needs,
and runs it chrooted with HPCQA_SLURM_RELEASE set. One `run` per root at a time (a lock). Processes the command left
running (daemons of a cluster not brought down, a slurmstepd orphaned in a node's nested mount namespace) are ended
by PID afterwards: those in its mount namespace or chrooted into the root, which under the lock are its own. The
scratch /tmp is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST_RELEASE = "22.05"
# what each release's root is made of: Slurm, munge and MariaDB for the clusters, iproute2 and util-linux for the
# emulated nodes, git (provenance), OpenSSH (the bare-node mpirun test), and the libraries the host's interpreter
# and the ranks' preloads link against
RELEASES = {
    "24.11": {
        "suite": "trixie",
        "packages": [
            "slurmctld",
            "slurmd",
            "slurm-client",
            "slurmdbd",
            "munge",
            "mariadb-server",
            "iproute2",
            "procps",
            "ca-certificates",
            "git",
            "openssh-server",
            "openssh-client",
            "libgoogle-perftools4t64",
            "libjemalloc2",
            "libexpat1",
            "libsqlite3-0",
            "libffi8",
            "libssl3t64",
            "libreadline8t64",
            "libbz2-1.0",
            "liblzma5",
            "zlib1g",
            "libncursesw6",
            "libuuid1",
        ],
    },
}


def cache_dir() -> Path:
    return Path(os.environ.get("HPCQA_SLURM_ROOTS", "/var/cache/hpcqa/slurm-roots"))


def stamp_of(release: str) -> dict:
    spec = RELEASES[release]
    return {"release": release, "suite": spec["suite"], "packages": sorted(spec["packages"])}


def host_mirror(apt: Path = Path("/etc/apt")) -> str:
    """The Debian mirror the host's apt uses (deb822 .sources or one-line lists): the first main archive URI."""
    texts = [p.read_text() for p in sorted(apt.glob("sources.list.d/*.sources"))]
    texts += [
        p.read_text()
        for p in [apt / "sources.list", *sorted(apt.glob("sources.list.d/*.list"))]
        if p.exists()
    ]
    for text in texts:
        for uri in re.findall(r"^URIs:\s*(\S+)", text, re.M) + re.findall(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M
        ):
            if uri.rstrip("/").endswith("/debian"):
                return uri
    raise SystemExit("slurmroot: no Debian archive in /etc/apt's sources; give --mirror URL")


def slurm_version(root: Path | None) -> str:
    cmd = ["slurmctld", "-V"] if root is None else ["chroot", str(root), "slurmctld", "-V"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"(\d+\.\d+)\.\d+", r.stdout + r.stderr)
    return m.group(0) if m else ""


def stale(root: Path, release: str) -> str:
    """Why the root at `root` cannot be used as `release`'s ("" when it can): its stamp, written last by a build,
    is missing or damaged (an interrupted build, a hand-made root) or names another package list."""
    try:
        stamp = json.loads((root / ".hpcqa-root.json").read_text())
    except (OSError, ValueError):
        return "has no readable stamp (an interrupted build?)"
    if not isinstance(stamp, dict) or stamp.get("packages") != stamp_of(release)["packages"]:
        return "was made from another package list"
    if not (root / "usr/sbin/slurmctld").exists():
        return "has no slurmctld"
    return ""


def build(release: str, mirror: str | None = None) -> Path:
    """The cached root of `release`, made if missing or stale. Concurrent builds wait for one another (a lock)."""
    base = cache_dir()
    base.mkdir(parents=True, exist_ok=True)
    root = base / release
    with open(base / f".{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        why = stale(root, release)
        if not why:
            return root
        if root.exists():
            print(f"slurmroot: {root} {why}: rebuilding", file=sys.stderr)
        if not shutil.which("debootstrap"):
            raise SystemExit("slurmroot: debootstrap is missing: apt-get install debootstrap")
        tmp = base / f".{release}.building"
        shutil.rmtree(tmp, ignore_errors=True)
        spec = RELEASES[release]
        t0 = time.time()
        print(
            f"slurmroot: making a Debian {spec['suite']} root for Slurm {release} in {root} (a few minutes)",
            file=sys.stderr,
        )
        r = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(spec['packages'])}",
                spec["suite"],
                str(tmp),
                mirror or host_mirror(),
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise SystemExit(
                f"slurmroot: debootstrap failed ({r.returncode}): {r.stdout[-1500:]}{r.stderr[-1500:]}"
            )
        got = slurm_version(tmp)
        if not got.startswith(release + "."):
            raise SystemExit(
                f"slurmroot: the root's slurmctld is {got or 'missing'}, not {release}"
            )
        shutil.rmtree(root, ignore_errors=True)
        (tmp / ".hpcqa-root.json").write_text(
            json.dumps({**stamp_of(release), "slurm": got, "built_s": round(time.time() - t0)})
            + "\n"
        )
        tmp.rename(root)
        print(f"slurmroot: made in {time.time() - t0:.0f} s (Slurm {got})", file=sys.stderr)
        return root


def needed_paths(extra: list[str]) -> list[Path]:
    """What the command needs at its own path: this checkout, the venv and the interpreter it was made from, the
    current directory; nested ones dropped. An interpreter under /usr (Debian's python3.11) is bound as its binary and
    its standard library: a bind of /usr would hide the root's own."""
    paths = {
        ROOT,
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path.cwd(),
        *(Path(p).resolve() for p in extra),
    }
    system = {
        Path(p)
        for p in (
            "/",
            "/usr",
            "/usr/local",
            "/bin",
            "/lib",
            "/etc",
            "/proc",
            "/sys",
            "/dev",
            "/run",
        )
    }
    if Path(sys.base_prefix).resolve() in system:
        exe = getattr(sys, "_base_executable", sys.executable)
        paths |= {
            Path(exe).resolve(),
            Path(sysconfig.get_path("stdlib")),
            Path(sysconfig.get_path("platstdlib")),
        }
    keep: list[Path] = []
    for p in sorted(p.resolve() for p in paths if p.exists()):
        if p not in system and not any(p.is_relative_to(k) for k in keep):
            keep.append(p)
    return keep


def enter_script(root: Path, scratch: Path, binds: list[Path], cwd: Path, argv: list[str]) -> str:
    q = shlex.quote
    r = q(str(root))
    # the root a mount point of its own: `ip -n NS` (and `ip netns exec`) make "/" rslave, which fails on a plain
    # directory that a chroot made "/"
    lines = [
        "set -e",
        f"mount --bind {r} {r}",
        f"mount -t proc proc {r}/proc",
        f"mount --rbind /dev {r}/dev",
        f"mount --rbind /sys {r}/sys",
        f"mount -t tmpfs -o mode=755 tmpfs {r}/run",
        f"mkdir -p {r}/run/lock",
        f"mount --bind {q(str(scratch))} {r}/tmp",
        f"chmod 1777 {r}/tmp",
        f"cp /etc/hosts {r}/etc/hosts",
        f"cp -L /etc/resolv.conf {r}/etc/resolv.conf 2>/dev/null || true",
    ]
    for p in binds:
        target = q(str(root) + str(p))
        make = (
            f"mkdir -p {target}"
            if p.is_dir()
            else f"mkdir -p {q(str(root) + str(p.parent))} && touch {target}"
        )
        lines += [make, f"mount --bind {q(str(p))} {target}"]
    inner = f"cd {q(str(cwd))} && exec {' '.join(q(a) for a in argv)}"
    lines.append(f"exec chroot {r} /bin/sh -c {q(inner)}")
    return "\n".join(lines)


def leftovers(ns: str, root: Path) -> list[int]:
    """PIDs the command left: those in its mount namespace `ns` (private: only the command's processes are there),
    and those whose root is `root` (a chroot there: a multi-node slurmd's own nested mount namespace, where a
    node-failure test orphans a slurmstepd). Sound because `run` holds the root's lock while the command runs."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            with contextlib.suppress(OSError):
                if os.readlink(d / "ns/mnt") == ns or os.readlink(d / "root") == str(root):
                    pids.append(int(d.name))
    return pids


def run(release: str, argv: list[str], extra: list[str]) -> int:
    if release == HOST_RELEASE:
        got = slurm_version(None)
        if not got.startswith(release + "."):
            raise SystemExit(
                f"slurmroot: the host's Slurm is {got or 'not installed'}, not {release}"
            )
        return subprocess.run(argv, env={**os.environ, "HPCQA_SLURM_RELEASE": release}).returncode
    root = build(release)
    lock = open(
        cache_dir() / f".{release}.run.lock", "w"
    )  # held while the command runs (see leftovers)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(
            f"slurmroot: another `run` uses the {release} root; two cannot run at once (the clusters "
            "share ports and names): wait for it"
        ) from None
    scratch = Path(
        subprocess.run(
            ["mktemp", "-d", "/var/tmp/hpcqa-slurmroot.XXXXXX"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    binds = needed_paths(extra)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "HPCQA_SLURM_RELEASE": release,
        "TMPDIR": "/tmp",
        "PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    script = enter_script(root, scratch, binds, Path.cwd(), argv)
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--fork", "--", "sh", "-c", script],
        env=env,
    )
    ours, ns = os.readlink("/proc/self/ns/mnt"), ""
    for _ in range(
        200
    ):  # unshare moves itself into the new namespace, then forks the command there
        with contextlib.suppress(OSError):
            ns = os.readlink(f"/proc/{proc.pid}/ns/mnt")
        if ns != ours or proc.poll() is not None:
            break
        time.sleep(0.01)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        code = proc.wait()
    if ns and ns != ours:
        left = leftovers(ns, root)
        if left:
            print(
                f"slurmroot: ending {len(left)} process(es) the command left running: {left}",
                file=sys.stderr,
            )
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    shutil.rmtree(scratch, ignore_errors=True)
    return code


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="make or reuse the cached root of a release; prints its path")
    b.add_argument("--release", default="24.11", choices=sorted(RELEASES))
    b.add_argument(
        "--mirror", help="the Debian archive to bootstrap from (default: the host's apt sources)"
    )
    r = sub.add_parser("run", help="run a command against a release's Slurm (-- CMD ...)")
    r.add_argument("--release", default="24.11", choices=sorted([HOST_RELEASE, *RELEASES]))
    r.add_argument(
        "--bind", action="append", default=[], help="another host path the command needs"
    )
    r.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("slurmroot: needs root (debootstrap, mounts, chroot)")
    if a.cmd == "build":
        print(build(a.release, a.mirror))
        return 0
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        raise SystemExit("slurmroot: run needs a command after --")
    return run(a.release, cmd, a.bind)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
