"""What a rank asks Slurm, and how Slurm's `scontrol show` text is read (the submit side, cli.py, reads it the same
way). At the rank's layer: the rank (rank/exits.py) imports this after its SIGTERM checkpoint; it imports nothing of
hpcqa's. Standard library only (a user command's rank never imports torch)."""

from __future__ import annotations

import re
import subprocess


def show_fields(line: str) -> dict[str, str]:
    """One line of `scontrol show ... -o` -> its KEY=VALUE fields (a value runs to the next space)."""
    return {m[1]: m[2] for m in re.finditer(r"(\w+)=(\S*)", line)}


def config_value(scontrol_config: str, key: str) -> str | None:
    """One value of `scontrol show config`."""
    for line in scontrol_config.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == key:
            return v.strip()
    return None


SQUEUE_TIMEOUT_S = 15.0


def job_state(job_id: str) -> str | None:
    """What squeue says of the job now (RUNNING, COMPLETING, PENDING ...), or None if it could not tell."""
    words = (_slurm_words(["squeue", "-h", "-j", job_id, "-o", "%T"]) or "").split()
    return words[0] if len(words) == 1 else None


def _slurm_words(argv: list[str]) -> str | None:
    """One Slurm command's output, or None if it failed or did not answer in time."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def preempted_to_requeue(job_id: str) -> str | None:
    """Why Slurm will requeue this job when its grace time ends, or None when it cannot tell that it will.

    `scontrol show job` has a PreemptTime once the job is selected for preemption (never for a scancel, a
    signal or the time limit); the job must be requeueable (Requeue=1); and the mode that applies must requeue.
    That mode is read, not assumed: with PreemptType=preempt/partition_prio it is the job's partition's
    PreemptMode. Under preempt/qos the mode is the preemptor's QOS's, which a rank cannot see: None, and the rank
    waits for Slurm as before. Any answer missing or unexpected is None too."""
    job = show_fields(_slurm_words(["scontrol", "show", "job", "-o", job_id]) or "")
    preempt_time, partition = job.get("PreemptTime"), job.get("Partition")
    if preempt_time in (None, "", "None", "Unknown") or job.get("Requeue") != "1" or not partition:
        return None
    config = _slurm_words(["scontrol", "show", "config"]) or ""
    if config_value(config, "PreemptType") != "preempt/partition_prio":
        return None
    part = _slurm_words(["scontrol", "show", "partition", "-o", partition.split(",")[0]])
    mode = show_fields(part or "").get("PreemptMode") or ""
    if "REQUEUE" not in mode.upper().split(","):
        return None
    return f"preempted at {preempt_time}, partition {partition.split(',')[0]}: PreemptMode={mode}"


def requeue(job_id: str) -> str | None:
    """`scontrol requeue JOB`: its output, or None if it failed or did not answer in time."""
    return _slurm_words(["scontrol", "requeue", job_id])
