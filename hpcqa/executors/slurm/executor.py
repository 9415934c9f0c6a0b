"""Slurm with submitit's task runtime: srun starts every rank as `<rank wrapper> python -u -m submitit.core._submit
FOLDER`, which loads the pickled RankJob and runs it (and, on USR2, checkpoints and requeues through submitit).

hpcqa writes the sbatch text itself (batch.submitit_batch) and submits it with sbatch: submitit offers no
public way to get the text its executor would submit (the old dry run rebuilt it from private helpers, and its
array path makes a plain executor of its own), so the request the dry run prints could not otherwise be the one
submitted. What stays submitit's is the contract with its runtime: the log names, SUBMITIT_EXECUTOR, and the
pickle at <folder>/<job id>_submitted.pkl, written (atomically) right after sbatch returns the id -- the order
submitit itself uses, its runtime waits for the file.

A single job is a sweep of one: every group of variants is one sbatch (an array when the group has several
tasks); each array after the first waits for the previous one (--dependency=afterany on the sbatch command, the
one thing not known before submission).
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from hpcqa import fsutil
from hpcqa.core import kinds, states, sweep
from hpcqa.core.kinds import Requeue
from hpcqa.core.states import State
from hpcqa.errors import SubmitError
from hpcqa.executors import common, snapshot
from hpcqa.executors.interface import File, Live, Outcome, Progress, Request, Say, Submitted, silent
from hpcqa.executors.slurm import batch, searchnext
from hpcqa.executors.slurm.cli import Slurm, scancel_argv
from hpcqa.rank import job
from hpcqa.record.jobdir import JobDir, JobRoot

PREVIOUS = "<previous array's job id>"  # the only part of a request not known before submission


class SubmititSlurm:
    kind = kinds.SlurmKind
    requeue = Requeue.SUBMITIT
    via = "submitit"
    runs_here = False
    scheduler = "Slurm"

    def __init__(self, slurm: Slurm | None = None, snapshot: bool = True) -> None:
        self.slurm = slurm or Slurm()
        self.snapshot = snapshot

    def max_array_size(self) -> tuple[int, str]:
        return self.slurm.max_array_size(sweep.DEFAULT_MAX_ARRAY_SIZE)

    def dry_run(self, sp: sweep.SweepPlan) -> Request:
        searchnext.check_not_running(sp, self.slurm)  # a running search: not twice
        sp, work = common.with_work(sp.with_requeue(self.requeue), self.snapshot)
        plans0 = sp.plans[0]
        root = common.job_root(plans0)
        submission = JobRoot.new_submission()
        folder = str(root.folder_pattern(submission))
        code = snapshot.plan(root) if self.snapshot else None
        files, scripts, commands, placement = [], [], [], {}
        for n, (array, line) in enumerate(zip(sp.arrays, sp.array_lines())):
            plans = sp.plans_of(array)
            paths = common.plan_paths(plans)
            files += common.plan_files(plans)
            command = (
                f"{common.wrapper_python(plans[0].python, common.plan_argument(paths), folder)} "
                f"-u -m submitit.core._submit {shlex.quote(folder)}"
            )
            text = batch.submitit_batch(
                plans[0],
                folder,
                command,
                len(plans),
                sp.throttle(array),
                tuple(code.shell_lines(plans[0].python)) if code else (),
            )
            script = root.batch_script(submission, n)
            files.append(File(str(script), text))
            scripts.append(text)
            commands.append(
                (
                    "sbatch",
                    "--parsable",
                    *((f"--dependency=afterany:{PREVIOUS}",) if n else ()),
                    str(script),
                )
            )
            placement.update({v.index: f"array {n}: {line}" for v in array.variants})
        c = plans0.config.cluster
        mem = f"{c.mem_gb} GB" if c.mem_gb else "default"
        facts = (
            ("time / mem", f"{c.time_limit_min} min / {mem}"),
            ("hosts", "unknown until Slurm allocates the job"),
            snapshot.fact(code),
            *common.work_facts(sp, work),
        )
        return Request(
            self.kind.name,
            self.via,
            sp,
            submission,
            tuple(files),
            tuple(scripts),
            tuple(commands),
            facts=facts,
            placement=tuple(placement[v.index] for v in sp.variants),
            code=code,
            work=work,
        )

    def check(self, request: Request) -> tuple[bool, str]:
        return test_only(self.slurm, request.scripts[0])

    def submit(self, request: Request, say: Say = silent) -> Submitted:
        if (
            request.sweep.search
        ):  # a batch of a search: its arrays, then the follow-up that asks for the next
            return searchnext.submit(self, request, say)
        return self.queue(request, say)

    def queue(self, request: Request, say: Say = silent, sweep_id: str | None = None) -> Submitted:
        """sbatch every array of the request (each after the previous one), registered under sweep_id (default:
        the first array's id)."""
        sp = request.sweep
        self.slurm.require_controller()
        common.write_files(request)
        if request.code:
            snapshot.write(request.code, say)
        common.write_work(request)
        ids, folders, previous, arrays = [], [], None, []
        for n, (array, command) in enumerate(zip(sp.arrays, request.commands)):
            plans = sp.plans_of(array)
            argv = [a.replace(PREVIOUS, previous or "") for a in command]
            try:
                with common.signals_held():  # queued and recorded, or neither
                    array_id, jds, tasks = self._queue(request, n, plans, argv, command[-1])
                    arrays.append(array_id)
                    sweep_id, previous = sweep_id or array_id, array_id
                    common.record_queued(
                        plans[0],
                        [
                            common.registry_row(sp, p, j, jd.path, sweep_id)
                            for j, jd, p in zip(tasks, jds, plans)
                        ],
                        arrays,
                        shlex.join(scancel_argv(arrays)),
                    )
            except KeyboardInterrupt:
                if arrays:
                    say(
                        f"interrupted: job {', '.join(arrays)} is queued and recorded; "
                        f"`hpcqa cancel {sweep_id}` stops it"
                    )
                raise
            ids += tasks
            folders += [str(jd.path) for jd in jds]
            if sp.is_sweep:
                idx = [str(p.variant_index) for p in plans]
                say(
                    f"array {array_id}: {len(plans)} variant(s) [{', '.join(idx[:8])}{'...' if len(idx) > 8 else ''}]"
                )
        if sp.is_sweep:
            say(
                f"sweep {sweep_id}: {len(sp.variants)} variants in {len(sp.arrays)} array(s); "
                f"hpcqa status {sweep_id} / hpcqa results {sweep_id}"
            )
        else:
            p, jd = sp.plans[0], JobDir(Path(folders[0]))
            say(
                f"submitted Slurm job {ids[0]}: {p.world_size} ranks on {p.nodes} node(s); folder {jd.path}"
            )
            say(f"  logs: {jd.submitit_log(ids[0], '<rank>', 'out|err')}")
        return Submitted(request, tuple(ids), sweep_id if sp.is_sweep else None, tuple(folders))

    def _queue(
        self, request: Request, n: int, plans: list, argv: list[str], script: str
    ) -> tuple[str, list[JobDir], list[str]]:
        """sbatch one array (or the job), then its folders and pickles: -> (array id, folders, task ids)."""
        sp = request.sweep
        try:
            array_id, _ = self.slurm.sbatch(argv)
        except SubmitError as e:
            what = f"sweep array {n}" if sp.is_sweep else "the job"
            raise SubmitError(f"sbatch refused {what}: {e.message}", e.hint) from None
        tasks = [f"{array_id}_{i}" for i in range(len(plans))] if len(plans) > 1 else [array_id]
        paths = common.plan_paths(plans)
        try:
            jds = [
                self._hand_over(request, p, path, job_id)
                for p, path, job_id in zip(plans, paths, tasks)
            ]
            jds[0].submission_file(array_id).symlink_to(script)
        except (
            OSError
        ) as e:  # a full disk after sbatch: the job could never start (no pickle): taken back
            gone = self.slurm.cancel([array_id]).returncode == 0
            raise SubmitError(
                f"job {array_id} was queued, but its folder could not be written: {fsutil.write_failure(e)}; "
                + (
                    "it was cancelled"
                    if gone
                    else f"cancelling it failed: stop it with `scancel {array_id}`"
                ),
                "free space in the job root (job.root), then submit again",
            ) from None
        return array_id, jds, tasks

    @staticmethod
    def _hand_over(request: Request, plan, path: Path, job_id: str) -> JobDir:
        """The task's folder and its pickle (submitit's runtime waits for it): the RankJob reads its plan file."""
        root = common.job_root(plan)
        jd = JobDir(Path(str(root.folder_pattern(request.submission)).replace("%j", job_id)))
        jd.path.mkdir(parents=True, exist_ok=True)
        c = plan.config.cluster
        fsutil.atomic_write_bytes(
            jd.submitted_pickle(job_id),
            job.pickled(str(path), plan.digest, c.time_limit_min, c.max_requeues),
        )
        return jd

    def wait(self, submitted: Submitted, progress: Progress | None = None) -> Outcome:
        return follow(self.slurm, submitted.ids[0], JobDir(Path(submitted.folders[0])), progress)


def test_only(slurm: Slurm, text: str) -> tuple[bool, str]:
    """sbatch --test-only of a batch script's text. -> (accepted, Slurm's answer). A controller that does not answer
    is its own one line (SubmitError naming doctor), not a refusal of the request."""
    slurm.require_controller()
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", prefix="hpcqa-check-") as f:
        f.write(text)
        f.flush()
        return slurm.test_only(f.name)


def follow(slurm: Slurm, job_id: str, jd: JobDir, progress: Progress | None = None) -> Outcome:
    """Watch a Slurm job until Slurm says it is final. Ctrl-C stops the watching, not the job."""
    last = {}

    def done() -> bool:
        recs, _ = slurm.query([job_id])
        rec = recs.get(job_id)
        if rec is None:  # neither sacct nor squeue knows it any more: it ended
            last["state"] = jd.state_from_files() or State.FAILED
            return True
        last["state"] = rec.state
        return states.is_final(rec.state)

    try:
        common.watch(jd, done, progress, poll_s=2.0)
    except KeyboardInterrupt:
        return Outcome(
            job_id,
            last.get("state", State.UNKNOWN),
            str(jd.path),
            interrupted=True,
            keeps_running=True,
        )
    return Outcome(job_id, last.get("state", State.UNKNOWN), str(jd.path))


class SlurmJobs:
    """The job verbs of Slurm jobs, however they were submitted (submitit or a rendered script)."""

    def __init__(self, slurm: Slurm | None = None) -> None:
        self.slurm = slurm or Slurm()

    def states(self, rows) -> tuple[dict[str, Live], states.Answer]:
        recs, source = self.slurm.query([r.id for r in rows])
        out = {}
        for r in rows:
            rec = recs.get(r.id)
            state, code, elapsed = live_state(
                r.id,
                JobDir(Path(r.folder)),
                recs,
                source,
                (r.state, r.exit_code or "", r.elapsed or ""),
            )
            out[r.id] = Live(
                state,
                code,
                elapsed,
                rec.reason if rec and state == State.PENDING else "",
                rec.nodelist if rec else "",
            )
        return out, source

    def usage(self, views) -> dict[str, dict]:
        got, err = self.slurm.usage([v.id for v in views])
        out: dict[str, dict] = {}
        for v in views:
            if v.id in got:
                u = got[v.id]
                out[v.id] = {
                    "source": states.Source.SACCT,
                    "cpu_efficiency": u.cpu_efficiency,
                    "max_rss_bytes": u.max_rss_bytes,
                    "cpu_s": u.total_cpu_s,
                    "elapsed_s": u.elapsed_s,
                    "cpus": u.alloc_cpus,
                }
            elif err:
                out[v.id] = {"source": states.Source.SACCT, "error": err}
        return out

    def cancel(self, rows, whole_sweeps: bool) -> list[str]:
        whole = [r for r in rows if r.sweep_id and whole_sweeps]
        ids = sorted({r.id.split("_")[0] for r in whole}) + [r.id for r in rows if r not in whole]
        proc = self.slurm.cancel(ids)
        if proc.returncode != 0:
            raise SubmitError(
                f"scancel {' '.join(ids)} failed: {proc.stderr.strip()}",
                "check the ids with hpcqa status",
            )
        for row in rows:
            JobDir(Path(row.folder)).mark_cancelled("cancelled by hpcqa cancel")
        return [f"cancelled slurm job {r.id}" for r in rows]


def live_state(
    job_id: str, jd: JobDir, recs, source: states.Answer, known: tuple[str, str, str]
) -> tuple[str, str, str]:
    """(state, exit code, elapsed) of an unfinished Slurm job from the scheduler's answer."""
    if job_id in recs:
        rec = recs[job_id]
        state = rec.state
        if source.source is states.Source.SQUEUE and state == State.COMPLETING:
            state = jd.state_from_files() or state
        return state, rec.exit_code, rec.elapsed
    if not source.answered:
        # the scheduler could not be asked: what the job's own files say beats the last state we knew
        return jd.state_from_files() or known[0], known[1], known[2]
    if source.lists_every_job:
        # the scheduler doesn't list it (any more): it ended, and its files say how. Without
        # accounting and without files there is nothing to tell success from failure.
        files = jd.state_from_files()
        if files:
            return files, known[1], known[2]
        if source.source is states.Source.SQUEUE:
            return State.FAILED, known[1], known[2]
    return known
