"""Sweeps: one Slurm array per group of variants (submitit batch), or one local run after another."""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcqa import plan as planmod
from hpcqa import status, sweep
from hpcqa.errors import SubmitError
from hpcqa.executors import common

DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's default


@dataclass(frozen=True)
class SweepPlan:
    variants: tuple[sweep.Variant, ...]
    plans: tuple[planmod.LaunchPlan, ...]
    arrays: tuple[sweep.ArrayPlan, ...]
    parallelism: int
    max_array_size: int
    executor: str

    def array_lines(self) -> list[str]:
        out = []
        for a in self.arrays:
            n = len(a.variants)
            throttle = min(self.parallelism or n, n)
            out.append(f"--array=0-{n - 1}%{throttle}" if n > 1 else "(a single job)")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"executor": self.executor, "parallelism": self.parallelism, "max_array_size": self.max_array_size,
                "variants": [{"index": v.index, "params": dict(v.params), "world_size": p.world_size}
                             for v, p in zip(self.variants, self.plans)],
                "arrays": [{"size": len(a.variants), "variants": [v.index for v in a.variants], "sbatch_array": line,
                            "after_previous": i > 0}
                           for i, (a, line) in enumerate(zip(self.arrays, self.array_lines()))]}


def max_array_size() -> int:
    proc = status.run(["scontrol", "show", "config"])
    found = sweep.parse_max_array_size(proc.stdout) if proc.returncode == 0 else None
    return found or DEFAULT_MAX_ARRAY_SIZE


def build(raw: dict, source: str, host: planmod.HostProbe, mas: int | None = None) -> SweepPlan:
    variants, par = sweep.expand(raw, source)
    plans = [planmod.build_plan(v.config, host) for v in variants]
    executor = plans[0].executor
    if executor == "slurm" and mas is None:
        mas = max_array_size()
    mas = mas or DEFAULT_MAX_ARRAY_SIZE
    arrays = sweep.group(list(zip(variants, plans)), mas)
    return SweepPlan(tuple(variants), tuple(plans), tuple(arrays), par, mas, executor)


def _task_plans(sp: SweepPlan, array: sweep.ArrayPlan) -> tuple[Path, list[planmod.LaunchPlan]]:
    by_index = {v.index: p for v, p in zip(sp.variants, sp.plans)}
    plans = [by_index[v.index] for v in array.variants]
    text = json.dumps([p.to_json() for p in plans], sort_keys=True)
    d = common.job_root(plans[0]) / "plans" / f"sweep-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    d.mkdir(parents=True, exist_ok=True)
    for i, p in enumerate(plans):
        (d / f"task-{i}.json").write_text(p.dumps())
    return d, plans


def submit_slurm(sp: SweepPlan) -> str:
    import submitit

    from hpcqa.registry import Registry
    from hpcqa.train.job import RankJob

    sweep_id, previous = None, None
    keys = sweep.swept_keys(list(sp.variants))
    for n, a in enumerate(sp.arrays):
        d, plans = _task_plans(sp, a)
        first = plans[0]
        q = shlex.quote
        # the rank wrapper picks task-<SLURM_ARRAY_TASK_ID>.json (a single job: task-0.json)
        python = (f"{q(first.python)} -m hpcqa.rank --plan {q(str(d / 'task-{array_task_id}.json'))} -- "
                  f"{q(first.python)}")
        ex = submitit.SlurmExecutor(folder=str(common.job_root(first) / "%j"), python=python,
                                    max_num_timeout=first.config.cluster.max_requeues)
        params = first.slurm_parameters()
        params["array_parallelism"] = sp.parallelism or len(a.variants)
        if previous:
            params["dependency"] = f"afterany:{previous}"
        ex.update_parameters(**params)
        try:
            with ex.batch():
                jobs = [ex.submit(RankJob(p.dumps())) for p in plans]
        except Exception as e:
            raise SubmitError(f"sbatch refused sweep array {n}: {e}",
                              "check partition/account/qos with `hpcqa doctor`") from None
        array_id = jobs[0].job_id.split("_")[0]
        sweep_id = sweep_id or array_id
        previous = array_id
        Registry(first.config.job.registry or None).add_many(
            dict(id=str(j.job_id), name=p.config.job.name, executor="slurm", folder=str(j.paths.folder),
                 config=p.config.to_dict(), source=p.config.source, nodes=p.nodes, world_size=p.world_size,
                 array_size=len(sp.variants), sweep_id=sweep_id, task_index=v.index,
                 variant={k: v.params.get(k) for k in keys})
            for j, p, v in zip(jobs, plans, a.variants))
        print(f"array {array_id}: {len(jobs)} variant(s) "
              f"[{', '.join(str(v.index) for v in a.variants[:8])}{'...' if len(jobs) > 8 else ''}]", file=sys.stderr)
        common.tidy(first)
    print(f"sweep {sweep_id}: {len(sp.variants)} variants in {len(sp.arrays)} array(s); "
          f"hpcqa status {sweep_id} / hpcqa results {sweep_id}", file=sys.stderr)
    print(sweep_id)
    return sweep_id


def run_local(sp: SweepPlan) -> int:
    """Variants one after another on this machine (each uses every core the plan gives it)."""
    from hpcqa.errors import JobFailed
    from hpcqa.executors import local

    keys = sweep.swept_keys(list(sp.variants))
    sweep_id, failed = None, 0
    for v, p in zip(sp.variants, sp.plans):
        job, folder = local.submit(p)
        sweep_id = sweep_id or f"local-{job.job_id}"
        common.register(p, job.job_id, folder, array_size=len(sp.variants), sweep_id=sweep_id, task_index=v.index,
                        variant={k: v.params.get(k) for k in keys})
        print(f"sweep {sweep_id}: variant {v.index} {dict(v.params)} -> local job {job.job_id}", file=sys.stderr)
        try:
            if local.finish(job, folder, p, f"variant {v.index}",
                            f"interrupted: sweep {sweep_id} stopped at variant {v.index}") == 130:
                return 130
        except JobFailed as e:
            failed += 1
            print(e.render(), file=sys.stderr)
    print(f"sweep {sweep_id}: {len(sp.variants) - failed} of {len(sp.variants)} variants completed; "
          f"hpcqa results {sweep_id}")
    return 1 if failed else 0
