"""The Slurm executor: submitit's SlurmExecutor fed from the plans; the rank wrapper rides in `python=`.

Single jobs and sweeps take the same path: every group of variants is submitted with submitit's
`batch()`, which makes an array of a group of several and a plain job of a group of one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpcqa.core import sweep
from hpcqa.errors import SubmitError
from hpcqa.executors import common
from hpcqa.record.jobdir import SUBMISSION, JobDir, JobRoot
from hpcqa.core.plan import LaunchPlan
from hpcqa.executors.slurmcli import Slurm
from hpcqa.core import states


def _parameters(sp: sweep.SweepPlan, array: sweep.ArrayPlan, previous: str | None) -> dict:
    params = sp.plans_of(array)[0].slurm_parameters()
    if len(array.variants) > 1:
        params["array_parallelism"] = sp.throttle(array)
    if previous:
        params["dependency"] = f"afterany:{previous}"
    return params


def _executor(plan: LaunchPlan, plan_arg: str, params: dict, submission: str):
    import submitit
    folder = str(common.job_root(plan).folder_pattern(submission))
    ex = submitit.SlurmExecutor(folder=folder, python=common.wrapper_python(plan.python, plan_arg, folder),
                                max_num_timeout=plan.config.cluster.max_requeues)
    ex.update_parameters(**params)
    return ex


def sbatch_preview(sp: sweep.SweepPlan) -> list[str]:
    """The sbatch text of each array, built by the same executor set-up that `submit` uses (the plan
    files are content-addressed, so their paths are the real ones); nothing is written or submitted."""
    from submitit.slurm.slurm import _make_sbatch_string  # the text submitit writes (light, no torch)

    texts, previous = [], None
    for n, array in enumerate(sp.arrays):
        plans = sp.plans_of(array)
        paths = common.plan_paths(plans)
        params = _parameters(sp, array, previous and "<previous array>")
        ex = _executor(plans[0], common.plan_argument(paths), params, SUBMISSION)
        params = {**ex.parameters, **({"map_count": len(plans)} if len(plans) > 1 else {})}
        texts.append(_make_sbatch_string(command=ex._submitit_command_str, folder=ex.folder, **params))
        previous = f"array {n}"
    return texts


def batch_texts(sp: sweep.SweepPlan) -> list[str] | None:
    """The exact batch script(s) submit would hand to sbatch (None: the local executor)."""
    if sp.executor == "slurm" and sp.plans[0].launcher == "mpirun":
        from hpcqa.executors import render
        return [render.standalone(sp.plans[0], "mpirun", python=sp.plans[0].python)]
    if sp.executor == "slurm":
        return sbatch_preview(sp)
    return None


def check_request(sp: sweep.SweepPlan) -> tuple[bool, str]:
    """sbatch --test-only of the request submit would make. -> (accepted, Slurm's answer)."""
    import tempfile
    from hpcqa.executors.slurmcli import Slurm
    texts = batch_texts(sp)
    if texts is None:
        return True, "local executor: nothing to ask Slurm"
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", prefix="hpcqa-check-") as f:
        f.write(texts[0])
        f.flush()
        return Slurm().test_only(f.name)


def submit(sp: sweep.SweepPlan) -> list[tuple[str, list]]:
    """Submit every array of the plan; register each task. -> [(array or job id, [(job, plan)])]"""
    from hpcqa.rank.train.job import RankJob

    out, sweep_id, previous = [], None, None
    submission = JobRoot.new_submission()
    for n, array in enumerate(sp.arrays):
        plans = sp.plans_of(array)
        paths = common.write_plans(plans)
        ex = _executor(plans[0], common.plan_argument(paths), _parameters(sp, array, previous), submission)
        try:
            with ex.batch():
                jobs = [ex.submit(RankJob(str(path), p.digest)) for path, p in zip(paths, plans)]
        except Exception as e:  # submitit raises FailedJobError / CalledProcessError with sbatch's stderr
            what = f"sweep array {n}" if sp.is_sweep else "the job"
            raise SubmitError(f"sbatch refused {what}: {e}",
                              "check partition/account/qos and the node shape with `hpcqa doctor`") from None
        array_id = jobs[0].job_id.split("_")[0]
        sweep_id, previous = sweep_id or array_id, array_id
        common.register(plans[0], [common.registry_row(sp, p, j.job_id, Path(str(j.paths.folder)), sweep_id)
                                   for j, p in zip(jobs, plans)])
        common.job_root(plans[0]).tidy(submission)
        out.append((array_id, list(zip(jobs, plans))))
    return out


def run(sp: sweep.SweepPlan, wait: bool = True) -> int:
    submitted = submit(sp)
    if sp.is_sweep:
        for array_id, jobs in submitted:
            idx = [str(p.variant_index) for _, p in jobs]
            print(f"array {array_id}: {len(jobs)} variant(s) [{', '.join(idx[:8])}{'...' if len(idx) > 8 else ''}]",
                  file=sys.stderr)
        sweep_id = submitted[0][0]
        print(f"sweep {sweep_id}: {len(sp.variants)} variants in {len(sp.arrays)} array(s); "
              f"hpcqa status {sweep_id} / hpcqa results {sweep_id}", file=sys.stderr)
        print(sweep_id)
        return 0
    ((_, ((job, plan),)),) = submitted
    jd = JobDir(Path(str(job.paths.folder)))
    print(f"submitted Slurm job {job.job_id}: {plan.world_size} ranks on {plan.nodes} node(s); folder {jd.path}",
          file=sys.stderr)
    print(f"  logs: {jd.submitit_log(job.job_id, '<rank>', 'out|err')}", file=sys.stderr)
    if not wait:
        print(job.job_id)
        return 0
    return _wait(job.job_id, jd, plan)


def run_script(plan: LaunchPlan, text: str, wait: bool = True) -> int:
    """A rendered script (`render --submit`, or `submit` with launch.launcher = "mpirun"): written next to the
    plans, sbatched, registered (folder <cluster>-<job id>), then watched like any job. mpirun runs in the
    batch shell, where hydra's slurm bootstrap can start its per-node proxies with srun; inside a submitit
    step (which already holds every CPU) that srun would wait for CPUs forever."""
    job_id, jd, path = submit_script(plan, text)
    print(f"submitted Slurm job {job_id}: {plan.world_size} ranks on {plan.nodes} node(s) by {plan.launcher} "
          f"({path}); folder {jd.path}", file=sys.stderr)
    if not wait:
        print(job_id)
        return 0
    return _wait(job_id, jd, plan)


def submit_script(plan: LaunchPlan, text: str) -> tuple[str, JobDir, Path]:
    """Write the rendered script next to the plans, sbatch it, register it. -> (job id, folder, script)."""
    from hpcqa.fsutil import atomic_write_text
    root = common.job_root(plan)
    path = root.rendered_script(plan.digest, plan.launcher)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text, mode=0o755)
    job_id, cluster = Slurm().submit_script(str(path), str(root.script_output()))
    jd = root.script_job(cluster, job_id)
    common.register(plan, [common.registry_row(sweep.single(plan), plan, job_id, jd.path, None)])
    return job_id, jd, path


def start(sp: sweep.SweepPlan) -> tuple[list[str], str | None]:
    """Submit without waiting or printing (the Python API). -> (job ids, sweep id or None)."""
    if not sp.is_sweep and sp.plans[0].launcher == "mpirun":
        from hpcqa.executors import render
        lp = sp.plans[0]
        return [submit_script(lp, render.standalone(lp, "mpirun", python=lp.python))[0]], None
    submitted = submit(sp)
    ids = [str(job.job_id) for _, jobs in submitted for job, _ in jobs]
    return ids, (str(submitted[0][0]) if sp.is_sweep else None)


def _wait(job_id: str, jd: JobDir, plan: LaunchPlan) -> int:
    try:
        state = wait_state(job_id, jd, f"job {job_id}")
    except KeyboardInterrupt:
        print(f"\nstopped watching; job {job_id} keeps running (hpcqa cancel {job_id})", file=sys.stderr)
        return 130
    return common.report(job_id, jd, state, plan)


def wait_state(job_id: str, jd: JobDir, title: str) -> str:
    """Watch a Slurm job (progress bar) until Slurm says it is final; -> its state."""
    from hpcqa.record import status
    slurm, last = Slurm(), {}

    def done() -> bool:
        recs, _ = slurm.query([job_id])
        rec = recs.get(job_id)
        if rec is None:  # neither sacct nor squeue knows it any more: it ended
            last["state"] = jd.state_from_files() or "FAILED"
            return True
        last["state"] = rec.state
        return states.is_final(rec.state)

    common.watch(jd, done, title, poll_s=2.0)
    return last.get("state", "UNKNOWN")
