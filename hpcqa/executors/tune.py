"""`hpcqa tune`: run each candidate layout for a few optimizer steps on one node through the normal
executors (a local job, or a one-node Slurm job), time the steps after a warm-up, store the winner.

Each candidate is an ordinary job (registered, logs per rank, `hpcqa status` shows it) of the config
with launch.ranks_per_socket set, a short max_steps, no evaluation and no checkpoints.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Callable, Sequence

from hpcqa.core import config, ranklayout, states, sweep
from hpcqa.core import plan as planmod
from hpcqa.errors import ConfigError, JobFailed
from hpcqa.executors import hostprobe, table
from hpcqa.executors.interface import Say, silent
from hpcqa.fsutil import owner_umask
from hpcqa.record import links
from hpcqa.record import tuned as tune
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles.fields import to_json


def run(
    path: str,
    overrides: Sequence[str],
    steps: int,
    warmup: int,
    candidates: Sequence[int] | None,
    show: Callable[[dict[int, float | None], int, int], None] | None = None,
    say: Say = silent,
) -> dict:
    """-> {"key", "entry", "measured", "jobs"}; raises JobFailed when no candidate ran."""

    base = config.load(path, list(overrides))
    cands = list(candidates or tune.default_candidates(base.cores_per_domain))
    host = hostprobe.probe_host()
    measured: dict[int, float | None] = {k: None for k in cands}
    jobs = {}
    for i, rps in enumerate(cands):
        cfg = config.load(
            path,
            [
                *overrides,
                *tune.tune_overrides(rps, steps, warmup),
                f"job.name={base.job.name}-tune",
            ],
        )
        p = planmod.build_plan(cfg, host, via_submitit=True)
        job_id, jd, state = _run_one(
            p, f"tune {rps}x{base.cores_per_domain // rps} ({i + 1}/{len(cands)})", say
        )
        res = jd.read_results()
        measured[rps] = res.steady_samples_per_second if res and states.succeeded(state) else None
        jobs[rps] = {"id": job_id, "state": state, "folder": str(jd.path)}
        if show:
            show(measured, base.cores_per_domain, i + 1)
    done = {k: v for k, v in measured.items() if v}
    if not done:
        raise JobFailed(
            "no candidate layout completed: "
            + ", ".join(f"{k}: {j['state']}" for k, j in jobs.items()),
            "hpcqa logs <job id> shows why; the ids are in hpcqa status",
        )
    entry = tune.record(base, done, socket.gethostname(), time.time())
    return {
        "key": ranklayout.shape_key(base),
        "entry": entry,
        "measured": measured,
        "jobs": jobs,
        "cores_per_domain": base.cores_per_domain,
        "store": str(tune.store_path()),
    }


def _run_one(p: planmod.LaunchPlan, title: str, say: Say) -> tuple[str, JobDir, str]:
    ex = table.choose(p)
    with owner_umask(p.config.job.group_readable):
        submitted = ex.submit(ex.dry_run(sweep.single(p)), say)
    if not ex.runs_here:
        say(f"{title}: job {submitted.ids[0]}")
    return submitted.ids[0], JobDir(Path(submitted.folders[0])), ex.wait(submitted).state


def run_comm(path: str, overrides: Sequence[str], say: Say = silent) -> dict:
    """`hpcqa tune --comm`: one job of the config's nodes (at least 2) whose ranks measure the link between the
    nodes with the training's backend instead of training; the fit is stored per executor, partition and backend.
    -> {"key", "entry", "link", "job"}; raises JobFailed when the job did not measure."""
    base = config.load(path, list(overrides))
    host = hostprobe.probe_host()
    most = planmod.build_plan(base, host).executor_kind.max_nodes
    if most is not None and most < 2:
        raise ConfigError(
            "cluster.executor",
            "`tune --comm` measures the link between two nodes; the local executor has one machine",
            'run it where Slurm is (cluster.executor = "slurm" or "auto" with sbatch on PATH)',
            path,
        )
    nodes = max(base.cluster.nodes, 2)
    cfg = config.load(
        path,
        [
            *overrides,
            "job.task=comm",
            "job.command=[]",
            f"cluster.nodes={nodes}",
            "train.do_eval=false",
            f"job.name={base.job.name}-comm",
        ],
    )  # the link, whatever the program
    p = planmod.build_plan(cfg, host, via_submitit=True)
    job_id, jd, state = _run_one(p, f"tune --comm ({nodes} nodes, {p.backend.resolved})", say)
    res = jd.read_results()
    link = res.link if res else None
    if not states.succeeded(state) or not link or not link.bandwidth_Bps or link.latency_s is None:
        why = link.extra.get("error") if link else None
        raise JobFailed(
            f"the link measurement (job {job_id}) ended {state}: {why or 'no link measured'}",
            f"hpcqa logs {job_id} shows why",
        )
    k = links.key(p.executor, cfg.cluster.partition, p.backend.resolved)
    return {
        "key": k,
        "entry": links.record(k, to_json(link), job_id),
        "link": to_json(link),
        "job": job_id,
        "folder": str(jd.path),
        "store": str(links.caches.link_store()),
    }
