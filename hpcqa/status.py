"""Job states: Slurm's text -> states (pure), one runner for every scheduler command, and the
per-job view (state + progress + results) that `hpcqa status` prints. Never imports torch.

States come from ONE batched `sacct` call for all unfinished Slurm jobs. Without accounting
(sacct: "accounting storage is disabled") they come from ONE `squeue` call plus the jobs' own files:
a job squeue no longer lists has ended, and its folder says how (results.json, a rank's .failed
marker, a cancel marker).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

# Slurm state -> (finished?, outcome). Outcome groups: pending, running, ok, failed, cancelled.
SLURM_STATES: Mapping[str, tuple[bool, str]] = {
    "PENDING": (False, "pending"), "CONFIGURING": (False, "pending"), "REQUEUED": (False, "pending"),
    "REQUEUE_FED": (False, "pending"), "REQUEUE_HOLD": (False, "pending"), "RESV_DEL_HOLD": (False, "pending"),
    "SPECIAL_EXIT": (False, "pending"), "RESIZING": (False, "running"), "SIGNALING": (False, "running"),
    "STAGE_OUT": (False, "running"), "STOPPED": (False, "running"), "SUSPENDED": (False, "running"),
    "RUNNING": (False, "running"), "COMPLETING": (False, "running"),
    "COMPLETED": (True, "ok"),
    "FAILED": (True, "failed"), "TIMEOUT": (True, "failed"), "NODE_FAIL": (True, "failed"),
    "OUT_OF_MEMORY": (True, "failed"), "BOOT_FAIL": (True, "failed"), "DEADLINE": (True, "failed"),
    "PREEMPTED": (True, "failed"), "REVOKED": (True, "cancelled"), "CANCELLED": (True, "cancelled"),
}
# sacct writes a preempted job that submitit/Slurm requeues as PREEMPTED then PENDING again; a job
# left PREEMPTED without requeue is over. squeue never shows finished states except COMPLETING.

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    """The one door to sbatch/sacct/squeue/scancel/scontrol. Tests that count calls swap it."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]}: timed out after 60 s")


RUNNER: list[Runner] = [run_command]


def run(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    return RUNNER[0](argv)


def normalise_state(raw: str) -> str:
    """'CANCELLED by 0' -> CANCELLED; 'RUNNING+' ... -> RUNNING."""
    s = raw.strip().split(" ")[0].rstrip("+").upper()
    return s or "UNKNOWN"


def is_final(state: str) -> bool:
    return SLURM_STATES.get(state, (False, ""))[0]


def outcome(state: str) -> str:
    return SLURM_STATES.get(state, (False, "unknown"))[1]


@dataclass(frozen=True)
class SchedRecord:
    job_id: str
    state: str
    exit_code: str = ""
    elapsed: str = ""
    nodes: str = ""
    nodelist: str = ""


SACCT_FORMAT = "JobID,State,ExitCode,Elapsed,NNodes,NodeList"


def sacct_argv(ids: Iterable[str]) -> list[str]:
    return ["sacct", "-X", "-n", "-P", "--format", SACCT_FORMAT, "-j", ",".join(ids)]


def parse_sacct(text: str) -> dict[str, SchedRecord]:
    """`sacct -X -n -P --format JobID,State,ExitCode,Elapsed,NNodes,NodeList` -> id -> record.

    Array tasks appear as `<array>_<task>`; a pending array's unstarted tasks as `<array>_[2-5%2]`,
    which is expanded. A requeued job can appear more than once: the last line wins.
    """
    out: dict[str, SchedRecord] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        jid, state = parts[0], normalise_state(parts[1])
        rest = parts[2:] + [""] * (4 - len(parts[2:]))
        for one in _expand_array_id(jid):
            out[one] = SchedRecord(one, state, rest[0], rest[1], rest[2], rest[3])
    return out


def _expand_array_id(jid: str) -> list[str]:
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


SQUEUE_FORMAT = "%i|%T|%M|%D|%N"


def parse_squeue(text: str) -> dict[str, SchedRecord]:
    """`squeue -h -a -r -o '%i|%T|%M|%D|%N'` -> id -> record (-r: one line per array task)."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        rest = parts[2:] + [""] * (3 - len(parts[2:]))
        for one in _expand_array_id(parts[0]):
            out[one] = SchedRecord(one, normalise_state(parts[1]), "", rest[0], rest[1], rest[2])
    return out


def accounting_disabled(proc: "subprocess.CompletedProcess[str]") -> bool:
    text = (proc.stderr + proc.stdout).lower()
    return proc.returncode != 0 and ("accounting storage is disabled" in text or "slurmdbd" in text
                                    or "not running a supported accounting_storage plugin" in text)


def query_slurm(ids: Sequence[str]) -> tuple[dict[str, SchedRecord], str]:
    """States of these jobs: one sacct call; one squeue call when accounting is off. -> (records, source)"""
    if not ids:
        return {}, "none"
    proc = run(sacct_argv(ids))
    if proc.returncode == 0:
        recs = parse_sacct(proc.stdout)
        missing = [i for i in ids if i not in recs]
        if not missing:
            return recs, "sacct"
        # just submitted: accounting hasn't recorded it yet; squeue knows it
        sq = run(["squeue", "-h", "-a", "-r", "-o", SQUEUE_FORMAT])
        if sq.returncode == 0:
            live = parse_squeue(sq.stdout)
            recs.update({i: live[i] for i in missing if i in live})
        return recs, "sacct"
    if accounting_disabled(proc):
        sq = run(["squeue", "-h", "-a", "-r", "-o", SQUEUE_FORMAT])
        if sq.returncode != 0:
            return {}, f"squeue failed: {sq.stderr.strip()}"
        return parse_squeue(sq.stdout), "squeue"
    return {}, f"sacct failed: {proc.stderr.strip() or proc.stdout.strip()}"


# ------------------------------------------------------------------------------------ job folders

def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def state_from_files(folder: Path) -> str | None:
    """How a job that the scheduler no longer lists ended, from its own files."""
    if (folder / "cancelled").exists():
        return "CANCELLED"
    if list((folder / "ranks").glob("rank-*.failed")) if (folder / "ranks").is_dir() else []:
        return "FAILED"
    if (folder / "results.json").exists():
        return "COMPLETED"
    return None


def local_state(job_id: str, folder: Path, pid_alive: Callable[[int], bool] | None = None) -> str:
    alive = (pid_alive or _pid_alive)(int(job_id)) if job_id.isdigit() else False
    from_files = state_from_files(folder)
    if from_files in ("CANCELLED",):
        return from_files
    if alive:
        return "RUNNING" if (folder / "ranks").is_dir() or (folder / "progress.json").exists() else "PENDING"
    return from_files or "FAILED"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a recycled pid isn't our controller
        return b"submitit" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


@dataclass
class JobView:
    id: str
    name: str
    executor: str
    state: str
    nodes: int
    world_size: int
    elapsed: str = ""
    exit_code: str = ""
    folder: str = ""
    progress: dict | None = None
    results: dict | None = None
    sweep_id: str | None = None
    task_index: int | None = None
    variant: dict | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("id", "name", "state", "executor", "nodes", "world_size", "elapsed",
                                               "exit_code", "folder", "progress", "results", "sweep_id",
                                               "task_index", "variant")}


def collect(reg, ids: Sequence[str] = (), all_jobs: bool = False, limit: int = 20) -> tuple[list[JobView], str]:
    """Rows from the registry, with live states for the unfinished ones (one scheduler call)."""
    rows = reg.jobs(ids=ids, limit=None if (ids or all_jobs) else limit)
    pending = [r.id for r in rows if r.executor == "slurm" and not r.final]
    recs, source = query_slurm(pending) if pending else ({}, "none")
    views, updates = [], []
    for r in rows:
        folder = Path(r.folder)
        state, code, elapsed = r.state, r.exit_code or "", r.elapsed or ""
        if not r.final:
            if r.executor == "local":
                state = local_state(r.id, folder)
            elif r.id in recs:
                rec = recs[r.id]
                state, code, elapsed = rec.state, rec.exit_code, rec.elapsed
                if source == "squeue" and state == "COMPLETING":
                    state = state_from_files(folder) or state
            elif source in ("sacct", "squeue"):
                # the scheduler doesn't list it (any more): it ended, and its files say how. Without
                # accounting and without files there is nothing to tell success from failure.
                files = state_from_files(folder)
                if files:
                    state = files
                elif source == "squeue":
                    state = "FAILED"
            final = is_final(state)
            if final or state != r.state:
                updates.append((r.id, state, final, code or None, elapsed or None))
        v = JobView(id=r.id, name=r.name, executor=r.executor, state=state, nodes=r.nodes, world_size=r.world_size,
                    elapsed=elapsed, exit_code=code, folder=r.folder, sweep_id=r.sweep_id, task_index=r.task_index,
                    variant=r.variant)
        v.progress = read_json(folder / "progress.json")
        v.results = read_json(folder / "results.json")
        if state == "COMPLETED" and not v.results:
            v.notes.append("no results.json")
        views.append(v)
    if updates:
        reg.update_states(updates)
    return views, source


def progress_text(v: JobView, now: float | None = None) -> str:
    if v.results and "f1" in v.results:
        return f"EM {v.results['exact_match']:.1f} F1 {v.results['f1']:.1f}"
    p = v.progress
    if not p or is_final(v.state):
        return ""
    text = f"{p.get('step', 0)}/{p.get('total_steps') or '?'}"
    if isinstance(p.get("loss"), (int, float)):
        text += f" loss {p['loss']:.3f}"
    if p.get("eta_s") and v.state == "RUNNING":
        text += f" ETA {_dur(p['eta_s'])}"
    return text


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
