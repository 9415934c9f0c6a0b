"""Slurm's commands: argv builders, parsers of their text (pure), and `Slurm`, which runs them.

Every sacct, squeue, scancel, scontrol and sinfo call of hpcqa goes through a `Slurm` object and
its runner (`run_command` by default). Tests that count or fake calls pass their own runner; the
real-cluster tests use the real one. sbatch itself is run by submitit (executors/slurm/executor.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from hpcqa.core import states
from hpcqa.core.states import State
from hpcqa.errors import SchedulerUnreachable, SubmitError
from hpcqa.executors.slurm.node import config_value, show_fields

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str], timeout_s: float = 60) -> "subprocess.CompletedProcess[str]":
    """Run one scheduler command; a missing binary or a hang becomes a failed result, not an exception. A
    SLURM_CONF naming a missing file fails at once: every Slurm command would retry it for a minute first."""
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.exists(conf):
        return subprocess.CompletedProcess(
            list(argv),
            1,
            "",
            f"SLURM_CONF={conf}: no such file (unset SLURM_CONF, or "
            "point it at the cluster's slurm.conf)",
        )
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            list(argv), 124, "", f"{argv[0]}: timed out after {timeout_s:g} s"
        )


@dataclass(frozen=True)
class SchedRecord:
    job_id: str
    state: str
    exit_code: str = ""
    elapsed: str = ""
    nodes: str = ""
    nodelist: str = ""
    reason: str = ""  # squeue's %r: why a PENDING job waits (Priority, Resources, Dependency, ...)


@dataclass(frozen=True)
class Usage:
    """What a finished job used (sacct): CPU seconds of all its steps, the largest step's peak RSS."""

    job_id: str
    total_cpu_s: float
    elapsed_s: float
    alloc_cpus: int
    max_rss_bytes: int | None

    @property
    def cpu_efficiency(self) -> float | None:
        """seff's: CPU time used / (elapsed x allocated CPUs)."""
        core_s = self.elapsed_s * self.alloc_cpus
        return self.total_cpu_s / core_s if core_s > 0 else None


# ------------------------------------------------------------------------------------ argv

SACCT_FORMAT = "JobID,State,ExitCode,Elapsed,NNodes,NodeList"
SQUEUE_FORMAT = "%i|%T|%M|%D|%N|%r"
USAGE_FORMAT = "JobID,TotalCPU,Elapsed,AllocCPUS,MaxRSS"


def sacct_argv(ids: Iterable[str]) -> list[str]:
    return ["sacct", "-X", "-n", "-P", "--format", SACCT_FORMAT, "-j", ",".join(ids)]


def usage_argv(ids: Iterable[str]) -> list[str]:
    """Not -X: the steps' lines carry MaxRSS (the allocation's line has the total CPU)."""
    return ["sacct", "-n", "-P", "--format", USAGE_FORMAT, "-j", ",".join(ids)]


def test_only_argv(script_path: str) -> list[str]:
    return ["sbatch", "--test-only", script_path]


def squeue_argv(ids: Sequence[str]) -> list[str]:
    """squeue for these jobs only (not every user's jobs on a busy cluster): an array task by its own id, an array by
    its array id (-r: one line per task)."""
    return ["squeue", "-h", "-a", "-r", "-o", SQUEUE_FORMAT, "-j", ",".join(dict.fromkeys(ids))]


def squeue_none_left(proc: "subprocess.CompletedProcess[str]") -> bool:
    """squeue -j naming only jobs Slurm no longer has answers "Invalid job id specified" and exit 1: none listed."""
    return proc.returncode != 0 and "invalid job id" in (proc.stderr or "").lower()


def scancel_argv(ids: Iterable[str]) -> list[str]:
    return ["scancel", *ids]


SHOW_CONFIG = ["scontrol", "show", "config"]
SHOW_NODES = ["scontrol", "show", "node", "-o"]
SINFO_VERSION = ["sinfo", "--version"]
PING = ["scontrol", "ping"]
SACCT_PROBE = ["sacct", "-n", "-X", "-S", "now", "-o", "JobID"]


# ------------------------------------------------------------------------------------ parsers


def normalise_state(raw: str) -> str:
    """'CANCELLED by 0' -> CANCELLED; 'RUNNING+' ... -> RUNNING."""
    s = raw.strip().split(" ")[0].rstrip("+").upper()
    return s or State.UNKNOWN


def expand_array_id(jid: str) -> list[str]:
    """A pending array's unstarted tasks `123_[2-5%2]` -> 123_2 ... 123_5; other ids unchanged."""
    if "_[" not in jid:
        return [jid]
    base, spec = jid.split("_[", 1)
    spec = spec.rstrip("]").split("%")[0]
    ids = []
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            ids += [f"{base}_{i}" for i in range(int(a), int(b) + 1)]
        elif part:
            ids.append(f"{base}_{part}")
    return ids


def _records(
    text: str, width: int, make: Callable[[str, str, list[str]], SchedRecord]
) -> dict[str, SchedRecord]:
    out: dict[str, SchedRecord] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        rest = parts[2:] + [""] * (width - len(parts[2:]))
        for one in expand_array_id(parts[0]):
            out[one] = make(one, normalise_state(parts[1]), rest)
    return out


def parse_sacct(text: str) -> dict[str, SchedRecord]:
    """`sacct -X -n -P --format JobID,State,ExitCode,Elapsed,NNodes,NodeList` -> id -> record.
    Array tasks appear as `<array>_<task>`; a requeued job can appear more than once: the last line wins."""
    return _records(text, 4, lambda jid, st, r: SchedRecord(jid, st, r[0], r[1], r[2], r[3]))


def parse_squeue(text: str) -> dict[str, SchedRecord]:
    """`squeue -h -a -r -o '%i|%T|%M|%D|%N|%r'` -> id -> record (-r: one line per array task)."""

    def make(jid: str, st: str, r: list[str]) -> SchedRecord:
        reason = r[3].strip()
        return SchedRecord(
            jid, st, "", r[0], r[1], r[2], "" if reason in ("None", "(null)") else reason
        )

    return _records(text, 4, make)


def duration_s(text: str) -> float:
    """sacct's [D-]HH:MM:SS[.mmm] or MM:SS.mmm -> seconds."""
    text = text.strip()
    if not text or text in ("INVALID", "UNLIMITED"):
        return 0.0
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def size_bytes(text: str) -> int | None:
    """sacct's MaxRSS (1234K, 5.5M, 2G; bare numbers are bytes) -> bytes."""
    m = re.fullmatch(r"([0-9.]+)([KMGTP]?)", text.strip())
    if not m:
        return None
    return int(float(m.group(1)) * 1024 ** "_KMGTP".index(m.group(2) or "_"))


def parse_usage(text: str) -> dict[str, Usage]:
    """`sacct -n -P --format JobID,TotalCPU,Elapsed,AllocCPUS,MaxRSS` -> job id -> Usage. The job's own line
    (no '.') has TotalCPU summed over its steps, Elapsed and AllocCPUS; MaxRSS is the largest of its steps'."""
    jobs: dict[str, dict] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or not parts[0]:
            continue
        jid, step = parts[0].split(".", 1)[0], "." in parts[0]
        j = jobs.setdefault(jid, {"cpu": 0.0, "elapsed": 0.0, "cpus": 0, "rss": None})
        rss = size_bytes(parts[4])
        if rss is not None:
            j["rss"] = max(j["rss"] or 0, rss)
        if not step:
            j.update(
                cpu=duration_s(parts[1]),
                elapsed=duration_s(parts[2]),
                cpus=int(parts[3]) if parts[3].strip().isdigit() else 0,
            )
    return {k: Usage(k, v["cpu"], v["elapsed"], v["cpus"], v["rss"]) for k, v in jobs.items()}


def accounting_disabled(proc: "subprocess.CompletedProcess[str]") -> bool:
    text = (proc.stderr + proc.stdout).lower()
    return proc.returncode != 0 and (
        "accounting storage is disabled" in text
        or "slurmdbd" in text
        or "not running a supported accounting_storage plugin" in text
    )


def first_line(text: str) -> str:
    """The line of a scheduler's error that says what went wrong (they often take four)."""
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    for x in lines:
        if "error" in x.lower():
            return x
    return lines[0] if lines else ""


def parse_sbatch_parsable(text: str) -> tuple[str, str | None]:
    """`sbatch --parsable` -> (job id, cluster or None): it prints "<id>" or "<id>;<cluster>"."""
    first = text.strip().splitlines()[-1] if text.strip() else ""
    job, _, cluster = first.partition(";")
    if not job.strip().isdigit():
        raise ValueError(f"sbatch printed {text.strip()!r}, not a job id")
    return job.strip(), cluster.strip() or None


def parse_max_array_size(scontrol_config: str) -> int | None:
    """`scontrol show config` -> MaxArraySize."""
    value = config_value(scontrol_config, "MaxArraySize")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_nodes(text: str) -> list[dict[str, str]]:
    """`scontrol show node -o` -> one dict per node (NodeName, Sockets, CoresPerSocket, ...)."""
    nodes = []
    for line in text.splitlines():
        fields = show_fields(line)
        if "NodeName" in fields:
            nodes.append(fields)
    return nodes


# ------------------------------------------------------------------------------------ Slurm


class Slurm:
    """The scheduler as hpcqa asks it. One instance per command; the runner is passed in."""

    def __init__(self, runner: Runner = run_command) -> None:
        self.runner = runner

    def run(self, argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        return self.runner(argv)

    def query(self, ids: Sequence[str]) -> tuple[dict[str, SchedRecord], states.Answer]:
        """States of these jobs: one sacct call (+ one squeue call for ids accounting hasn't recorded
        yet, or recorded NODE_FAIL/PREEMPTED: while squeue lists them Slurm has requeued them);
        one squeue call when accounting is off. -> (records, where they came from)"""
        if not ids:
            return {}, states.NOBODY
        proc = self.run(sacct_argv(ids))
        if proc.returncode == 0:
            recs = parse_sacct(proc.stdout)
            # not recorded yet (just submitted), or maybe requeued: squeue knows what Slurm still has
            # (and pending ones: squeue says why they wait)
            ask = [
                i
                for i in ids
                if i not in recs or recs[i].state in states.REQUEUABLE + (State.PENDING,)
            ]
            if ask:
                sq = self.run(squeue_argv(ask))
                if sq.returncode == 0:
                    live = parse_squeue(sq.stdout)
                    recs.update({i: live[i] for i in ask if i in live})
            return recs, states.Answer(states.Source.SACCT)
        if accounting_disabled(proc):
            sq = self.run(squeue_argv(ids))
            if squeue_none_left(sq):
                return {}, states.Answer(states.Source.SQUEUE)
            if sq.returncode != 0:
                return {}, states.Answer.failed(f"squeue failed: {first_line(sq.stderr)}")
            return parse_squeue(sq.stdout), states.Answer(states.Source.SQUEUE)
        return {}, states.Answer.failed(f"sacct failed: {first_line(proc.stderr or proc.stdout)}")

    def usage(self, ids: Sequence[str]) -> tuple[dict[str, Usage], str]:
        """What these finished jobs used: one sacct call. -> (usage by id, "" or the error)."""
        if not ids:
            return {}, ""
        proc = self.run(usage_argv(ids))
        if proc.returncode != 0:
            return {}, first_line(proc.stderr or proc.stdout)
        return parse_usage(proc.stdout), ""

    def test_only(self, script_path: str) -> tuple[bool, str]:
        """`sbatch --test-only`: would Slurm accept this request, and when/where would it start?"""
        proc = self.run(test_only_argv(script_path))
        text = (proc.stderr + proc.stdout).strip()
        return proc.returncode == 0, text

    def sbatch(self, argv: Sequence[str]) -> tuple[str, str | None]:
        """Run an `sbatch --parsable ...` command line -> (job id, cluster or None). SubmitError with sbatch's words
        when it refuses."""
        proc = self.run(list(argv))
        if proc.returncode != 0:
            raise SubmitError(
                f"sbatch refused {argv[-1]}: {(proc.stderr or proc.stdout).strip()}",
                "check partition/account/qos and the node shape with `hpcqa doctor`",
            )
        try:
            return parse_sbatch_parsable(proc.stdout)
        except ValueError as e:
            raise SubmitError(
                str(e), "check what sbatch prints on this cluster (sbatch --parsable)"
            ) from None

    def cluster_name(self) -> str:
        conf = self.run(SHOW_CONFIG)
        return (
            config_value(conf.stdout, "ClusterName") if conf.returncode == 0 else None
        ) or "slurm"

    def cancel(self, ids: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        return self.run(scancel_argv(ids))

    def max_array_size(self, default: int) -> tuple[int, str]:
        """(MaxArraySize, how it is known): Slurm's answer, or `default` and why it was assumed."""
        proc = self.run(SHOW_CONFIG)
        found = parse_max_array_size(proc.stdout) if proc.returncode == 0 else None
        if found:
            return found, "scontrol show config"
        why = first_line(proc.stderr) or first_line(proc.stdout) or "no MaxArraySize in its answer"
        return default, f"assumed (Slurm's default): scontrol show config failed: {why}"

    def nodes(self) -> tuple[list[dict[str, str]], str]:
        """(nodes, error text)"""
        proc = self.run(SHOW_NODES)
        if proc.returncode != 0:
            return [], proc.stderr.strip() or proc.stdout.strip()
        return parse_nodes(proc.stdout), ""

    def ping(self) -> tuple[bool, str]:
        """Is the controller answering? (`scontrol ping`: "Slurmctld(primary) at HOST is UP")"""
        ok, text, _ = self._ping()
        return ok, text

    def _ping(self) -> tuple[bool, str, bool]:
        """-> (answering?, its first line, is scontrol missing here?)"""
        proc = self.run(PING)
        text = first_line(proc.stdout) or first_line(proc.stderr)
        return proc.returncode == 0 and " is UP" in proc.stdout, text, proc.returncode == 127

    def require_controller(self) -> None:
        """Before anything is written or submitted: a controller that doesn't answer is one line, exit 2. A machine
        without Slurm's commands is told so: waiting for a controller would not help there."""
        ok, text, missing = self._ping()
        if missing:
            raise SchedulerUnreachable(
                "Slurm is not installed here (no scontrol on PATH): nothing was submitted",
                "submit from a login node, or run here: --set cluster.executor=local",
            )
        if not ok:
            raise SchedulerUnreachable(
                f"Slurm's controller is not answering ({text or 'scontrol ping failed'}): "
                "nothing was submitted",
                "try again when it is back (scontrol ping; hpcqa doctor says more); "
                "`hpcqa status` keeps reading accounting and the jobs' files meanwhile",
            )

    def version(self) -> tuple[bool, str]:
        proc = self.run(SINFO_VERSION)
        return proc.returncode == 0, proc.stdout.strip() or proc.stderr.strip()

    def accounting(self) -> tuple[bool, str]:
        proc = self.run(SACCT_PROBE)
        return proc.returncode == 0, (proc.stderr or proc.stdout).strip()
