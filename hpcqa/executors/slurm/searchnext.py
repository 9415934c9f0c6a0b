"""A search on Slurm: each batch of trials is one job array (a grid's path: frozen, digest-checked plans), followed
by a small job that waits for it (--dependency=afterany) and, on a compute node, tells the study how each trial
ended, then submits the next batch and its own follow-up: the search goes on with no login-node session.

The follow-up is handed a state file in the job root's search folder (what to plan from, which trial ran in which
job and folder, the registry, the sweep id), read back through one checked reader. A trial that Slurm says was
cancelled (hpcqa cancel SWEEP) stops the search there: the study is left as it is, so that trial runs again, with
its number and values, when the config is submitted again.

    python -m hpcqa.cli.followup STATE.json     (the follow-up job's command; followup.py beside this does its work)
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from hpcqa import fsutil
from hpcqa.core import states
from hpcqa.errors import UsageError
from hpcqa.executors import common, searching
from hpcqa.executors.interface import Request, Say, Submitted
from hpcqa.executors.render import directive
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.record import registry, study

FOLLOW_UP_MINUTES = (
    15  # asking, planning and sbatch take seconds; the time limit only bounds a stuck one
)
KEYS = {"config", "source", "digest", "sweep_id", "registry", "snapshot", "trials"}


def submit(ex: Any, request: Request, say: Say) -> Submitted:
    """Claim the batch in the study, queue it (one array per sbatch request, as a grid's), then its follow-up."""
    sp = request.sweep
    spec, ref = sp.search, sp.plans[0].trial
    assert spec is not None and ref is not None
    ex.slurm.require_controller()  # before the study holds the batch's trials
    sweep_id = study.sweep_id(spec, ref.study, ref.storage)
    searching.claim(sp)
    for line in searching.refused_lines(sp):
        say(line)
    done = ex.queue(request, say, sweep_id)
    sweep_id = study.sweep_id(spec, ref.study, ref.storage, done.sweep_id)
    trials = {
        str(p.variant_index): {"job": j, "folder": f}
        for p, j, f in zip(sp.plans, done.ids, done.folders)
    }
    state = {
        "config": sp.search_config,
        "source": sp.source,
        "digest": spec.digest,
        "sweep_id": sweep_id,
        "registry": str(registry.resolve_path(sp.plans[0].config.job.registry or None)),
        "snapshot": request.code is not None,
        "trials": trials,
    }
    arrays = sorted({j.split("_")[0] for j in done.ids})
    follow = queue_follow_up(ex, request, state, arrays)
    study.runner(spec, ref.study, ref.storage, f"slurm:{follow}")
    say(
        f"search {ref.study}: trials {', '.join(trials)} in array {', '.join(arrays)}; follow-up job {follow} "
        f"tells the study and submits the next batch when they end (hpcqa results {sweep_id})"
    )
    return Submitted(request, done.ids, sweep_id, done.folders)


def check_not_running(sp: Any, slurm: Slurm | None = None) -> None:
    """A search whose follow-up job is still queued or running is running: submitting it again would start a second
    chain of batches on the same study. Refused, naming the job (its own follow-up asks freely)."""
    ref = sp.plans[0].trial
    if sp.search is None or ref is None:
        return
    name = ref.study
    who = study.runner(sp.search, name, ref.storage) or ""
    job = who.split(":", 1)[1] if who.startswith("slurm:") else ""
    if not job or job == os.environ.get("SLURM_JOB_ID"):
        return
    recs, _ = (slurm or Slurm()).query([job])
    rec = recs.get(job)
    if rec is not None and not states.is_final(rec.state):
        raise UsageError(
            f"the search {name!r} is running: its follow-up job {job} is {rec.state} and will submit the next batch",
            "hpcqa status shows its trials; hpcqa cancel SWEEP stops it, then submit again to go on",
        )


def queue_follow_up(ex: Any, request: Request, state: dict, arrays: list[str]) -> str:
    """sbatch the follow-up: one task, one CPU, after every array of the batch has ended (afterany)."""
    plan = request.sweep.plans[0]
    root = common.job_root(plan)
    path = root.search_state(request.submission)
    fsutil.atomic_write_text(path, json.dumps(state, indent=1))
    c, py = plan.config.cluster, plan.python
    own: dict[str, object] = {
        "job_name": f"{plan.config.job.name}-search",
        "ntasks": 1,
        "cpus_per_task": 1,
        "time": FOLLOW_UP_MINUTES,
        "output": str(root.search_log()),
        "open_mode": "append",
    }
    for key in ("partition", "account", "qos"):
        if getattr(c, key, ""):
            own[key] = getattr(c, key)
    lines = ["#!/bin/bash", "# hpcqa: the search's follow-up (executors/slurm/searchnext.py)"]
    lines += [directive(k, v) for k, v in own.items()]
    lines += list(request.code.shell_lines(py)) if request.code else []
    lines.append(f"export HPCQA_REGISTRY={shlex.quote(state['registry'])}")
    lines.append(
        " ".join(shlex.quote(a) for a in ["exec", py, "-m", "hpcqa.cli.followup", str(path)])
    )
    script = path.with_suffix(".sbatch")
    fsutil.atomic_write_text(script, "\n".join(lines) + "\n")
    job_id, _ = ex.slurm.sbatch(
        ["sbatch", "--parsable", f"--dependency=afterany:{':'.join(arrays)}", str(script)]
    )
    return job_id


def read_state(path: str) -> dict:
    """The follow-up's state file, checked: ValueError naming what is wrong."""
    data = json.loads(fsutil.read_text(Path(path), fsutil.MAX_JSON_BYTES))
    if not isinstance(data, dict) or set(data) != KEYS:
        raise ValueError(
            f"{path}: not a search state file (keys {sorted(data) if isinstance(data, dict) else data!r})"
        )
    texts = ("config", "source", "digest", "sweep_id", "registry")
    if not all(isinstance(data[k], str) for k in texts) or not isinstance(data["snapshot"], bool):
        raise ValueError(f"{path}: {', '.join(texts)} must be text and snapshot true or false")
    trials = data["trials"]
    good = isinstance(trials, dict) and all(
        k.isdigit()
        and isinstance(v, dict)
        and isinstance(v.get("job"), str)
        and isinstance(v.get("folder"), str)
        for k, v in trials.items()
    )
    if not good:
        raise ValueError(f"{path}: trials must map trial numbers to their job and folder")
    return data
