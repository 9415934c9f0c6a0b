"""The job folder: the one owner of every path in it and of reading and writing its files.

    <job.output_dir>/<job.name>/                 JobRoot
        plans/<digest>/task-<i>.json             the launch plans, content-addressed (one per array task)
        mlflow.db                                the MLflow store when no tracking URI is given
        <job id>-<submission>/                   JobDir (submitit's; a rendered script's: <cluster>-<job id>)
            <job id>_<rank>_log.out|err          per-rank logs (submitit)
            rank-<rank>.log                      per-rank logs (rendered srun/mpirun scripts)
            plan.json, hostfile                  written by rendered scripts
            ranks/rank-<rank>.json               what each rank got (host, CPUs, backend, plan digest ...)
            ranks/rank-<rank>.failed             the error of a rank that failed
            progress.json, results.json          rank 0's progress and final metrics
            eval_predictions.json, eval_nbest_predictions.json, eval_null_odds.json
            predict_predictions.json, ...        rank 0's post-processed answers (run_qa.py's names)
            tensorboard/, checkpoints/           training curves (rank 0), the Trainer's checkpoints
            tracking.json                        the MLflow run rank 0 sends to (train.report_to)
            model/                               the trained model and its tokenizer (train.save_model)
            cancelled                            written by `hpcqa cancel`
            attempts/node-<n>.<attempt>          a PyTorchJob pod's starts (k8s-<namespace>-<job> folders)

The submit side, the ranks and `status` all go through these classes; no other module spells a
file name of the job folder. Writes are atomic (write aside, rename): other ranks, other nodes and
`hpcqa status` may read at any moment.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hpcqa import fsutil
from hpcqa.core.folders import JOB_ID, SUBMISSION, root_path  # noqa: F401  (the folder's names, with the rest)
from hpcqa.core.states import State
from hpcqa.errors import UsageError
from hpcqa.fsutil import atomic_write_text, file_sha256, own_folder
from hpcqa.record import failures, logtail
from hpcqa.record.jobfiles import controller, failure, marks, phase, progress, report, results
from hpcqa.record.jobfiles.failure import Failure
from hpcqa.record.jobfiles.fields import Damaged
from hpcqa.record.jobfiles.parts import Notice
from hpcqa.record.jobfiles.phase import PhaseRecord
from hpcqa.record.jobfiles.progress import Progress
from hpcqa.record.jobfiles.reader import load_json, read_json  # noqa: F401  (read_json: the job folder's reader)
from hpcqa.record.jobfiles.report import Report
from hpcqa.record.jobfiles.results import Results

TASK_ID = "{array_task_id}"  # the rank wrapper's placeholder for SLURM_ARRAY_TASK_ID
# Per-rank log names that launchers expand themselves: srun --output (%t) and mpirun (%r).
SRUN_LOG = "rank-%t.log"
SUBMITIT_LOG = (
    "{job}_%t_log.{stream}"  # submitit's task log names (job: %j, or an array's %A_%a; %t = task)
)
MPIRUN_LOG = "rank-%r.log"
SCRIPT_PLAN = "plan.json"
SCRIPT_HOSTFILE = "hostfile"
REQUEUE_REQUEST = (
    "requeue-requested"  # + ".<attempt>": rank 0 asks a rendered script to requeue the job
)


def folder_from_env(pattern: str, env: Mapping[str, str]) -> Path | None:
    """A job's folder where its ranks run: $HPCQA_JOB_DIR (rendered scripts), else submitit's
    folder pattern with %j as submitit expands it (<array>_<task> for array tasks)."""
    if env.get("HPCQA_JOB_DIR"):
        return Path(env["HPCQA_JOB_DIR"])
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    else:
        job = env.get("SLURM_JOB_ID") or env.get("SUBMITIT_LOCAL_JOB_ID") or ""
    return Path(pattern.replace(JOB_ID, job)) if pattern and job else None


def attempt_from_env(env: Mapping[str, str]) -> int:
    """This (re)start of the job: Slurm counts requeues in SLURM_RESTART_COUNT; a PyTorchJob's pod script
    counts its own starts in HPCQA_ATTEMPT."""
    for name in ("HPCQA_ATTEMPT", "SLURM_RESTART_COUNT"):
        try:
            if env.get(name):
                return int(env[name])
        except ValueError:
            pass
    return 0


MAX_LISTED_REPORTS = 256  # a job's view checks this many rank reports, not thousands


def write_json(path: Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def plan_group_digest(digests: list[str]) -> str:
    """The name of a plan group's folder: the plan's own digest, or for an array the digest of its index."""
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256(plan_index_text(digests).encode()).hexdigest()[:16]


def plan_index_text(digests: list[str]) -> str:
    return ",".join(digests)


def plan_problem(plan_path: str | Path, digest: str) -> str | None:
    """A content-addressed plan (plans/<group>/task-<i>.json) whose digest is not the one its folder name -- given by
    the submitted script -- stands for; None when it is (or when the plan is not content-addressed: a rendered
    script's plan comes from the script itself)."""
    p = Path(plan_path)
    m = re.fullmatch(r"task-(\d+)\.json", p.name)
    if not m or p.parent.parent.name != "plans":
        return None
    group = p.parent.name
    if group == digest:
        return None
    try:
        index = fsutil.read_text(p.with_name("index.json"), 16 << 20).split(",")
    except OSError:
        return f"{p} has digest {digest}, not {group} (its folder's name)"
    if plan_group_digest(index) != group:
        return f"{p.with_name('index.json')} is not the index that named {p.parent}"
    task = int(m.group(1))
    if task >= len(index) or index[task] != digest:
        return f"{p} has digest {digest}, submitted {index[task] if task < len(index) else 'no such task'}"
    return None


@dataclass(frozen=True)
class JobRoot:
    """<output_dir>/<name>: where a config's job folders and launch plans live."""

    path: Path

    @classmethod
    def of(cls, output_dir: str, name: str) -> "JobRoot":
        return cls(Path(root_path(output_dir, name)).absolute())

    # what hpcqa writes into directly under the root; a symlink there would send its writes elsewhere
    OWN_FOLDERS = ("plans", "code", "scripts", "search")

    def ensure(self, group_readable: bool = False) -> None:
        """Create the job root: its owner's, and its group's to read where asked; nobody else enters it, and nothing
        in it is group- or other-writable (submit writes under a private umask). A root that is a symlink, belongs
        to someone else, or holds a symlink where hpcqa writes is refused with one line (UsageError, exit 2: the
        config's output_dir is what to change)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            bad = self.unsafe()
            if bad:
                raise UsageError(
                    f"job root {self.path}: {bad}",
                    "use another job.output_dir or job.name (a folder of "
                    "your own), or remove the link",
                )
            os.chmod(self.path, 0o750 if group_readable else 0o700)
        except OSError as e:
            raise UsageError(
                f"cannot prepare the job root {self.path}: {e.strerror or e}",
                "choose a job.output_dir you own and can write",
            ) from None

    def unsafe(self) -> str | None:
        """Why writing under this root could land elsewhere or in someone else's hands, or None."""
        st = os.lstat(self.path)
        if stat.S_ISLNK(st.st_mode):
            return "is a symlink (to " + os.readlink(self.path) + ")"
        if st.st_uid != os.getuid():
            return f"belongs to uid {st.st_uid}, not to you"
        inside = [*self.path.iterdir()]
        for sub in self.OWN_FOLDERS:
            top = self.path / sub
            inside += [*(top.iterdir() if top.is_dir() and not top.is_symlink() else [])]
        for p in inside:  # the root's entries (job folders among them) and what hpcqa writes into
            if p.is_symlink():
                return f"{p} is a symlink"
        return None

    def folder_pattern(self, submission: str) -> Path:
        """submitit's folder argument: <job id>-<submission>. Job ids repeat (a reset controller,
        several clusters on one filesystem); the submission token, picked per `submit`, does not."""
        return self.path / f"{JOB_ID}-{submission}"

    def controller_log(self, submission: str) -> Path:
        """Where a local job's controller writes until its job folder exists."""
        return self.path / f".controller-{submission}.log"

    @staticmethod
    def new_submission() -> str:
        return secrets.token_hex(3)

    def job(self, job_id: str) -> "JobDir":
        return JobDir(self.path / str(job_id))

    def search_journal(self) -> Path:
        """A search's study when sweep.storage names none: Optuna's journal file, on the job root's filesystem."""
        return self.path / "search" / "study.journal"

    def search_state(self, submission: str) -> Path:
        """What a Slurm search's follow-up job reads (its batch's trials, where they ran); its script beside it."""
        return self.path / "search" / f"next-{submission}.json"

    def search_log(self) -> Path:
        """The follow-up jobs' output, one file (appended to): what each told the study and submitted."""
        return self.path / "search" / "follow-up.log"

    def rendered_script(self, digest: str, launcher: str) -> Path:
        """Where `render --submit` keeps the script it submitted (content-addressed, like the plans)."""
        return self.path / "scripts" / f"{digest}.{launcher}.sbatch"

    def batch_script(self, submission: str, array: int) -> Path:
        """The sbatch text of a submission's array (or job), as the dry run showed it and sbatch was given."""
        return self.path / "scripts" / f"{submission}-{array}.sbatch"

    def script_output(self) -> Path:
        """The batch shell's own output of `render --submit` jobs (%j: sbatch puts the job id in)."""
        return self.path / "scripts" / "slurm-%j.out"

    def script_job(self, cluster: str, job_id: str) -> "JobDir":
        """A rendered script's job folder: <cluster>-<job id> (the script computes the same)."""
        return JobDir(self.path / f"{cluster}-{job_id}")

    @property
    def tracking_store(self) -> Path:
        """The SQLite file MLflow runs go to when neither tracking.uri nor $MLFLOW_TRACKING_URI names a store."""
        return self.path / "mlflow.db"

    def code(self, digest: str) -> Path:
        """A snapshot of the hpcqa package a submission ran with (content-addressed: a sweep's tasks share it)."""
        return self.path / "code" / digest

    @staticmethod
    def code_provenance(snapshot: Path) -> Path:
        return snapshot / "provenance.json"

    def plan_group(self, digest: str) -> Path:
        return self.path / "plans" / digest

    @staticmethod
    def task_plan(group: Path, index: int | str) -> Path:
        return group / f"task-{index}.json"

    @staticmethod
    def plan_index(group: Path) -> Path:
        """An array's plan digests, in task order (its digest is the group folder's name)."""
        return group / "index.json"

    def tidy_all(self) -> None:
        """Every empty staging folder submitit re-created (it does, when a local job is polled)."""
        for d in self.path.glob(f"{JOB_ID}-*"):
            try:
                d.rmdir()
            except OSError:
                pass

    def tidy(self, submission: str) -> None:
        """submitit leaves an empty '%j-...' staging folder behind; remove it if empty."""
        try:
            self.folder_pattern(submission).rmdir()
        except OSError:
            pass


_ATTEMPT_DIR = re.compile(r"attempt-(0|[1-9][0-9]{0,8})", re.A)


def attempt_number(value: object) -> int | None:
    """`value` as an attempt a rank writes (an int from 0, not a bool, a float or text), or None."""
    return value if type(value) is int and 0 <= value < 10**9 else None


def attempt_notice(rep: Report | Damaged | None, attempt: int) -> Notice | None:
    """The notice (SIGTERM, the requeue signal) a rank's report recorded in `attempt`, or None (no report, a
    damaged one, no notice, or one of another attempt)."""
    return rep.notice_in(attempt) if isinstance(rep, Report) else None


def _exists(p: Path) -> bool:
    """Path.exists, with a name too long for the file system (ENAMETOOLONG, which exists() raises) as absent."""
    try:
        return p.exists()
    except OSError:
        return False


@dataclass(frozen=True)
class JobDir:
    """One job's folder (one array task's, for a sweep)."""

    path: Path

    def tidy_staging(self) -> None:
        """submitit's controller makes its folder pattern literally ('%j-<token>', next to this folder) before the
        id is known; a local job's rank 0 removes it once empty (a foreground submit also does, at the end)."""
        _, _, token = self.path.name.partition("-")
        if token:
            try:
                (self.path.parent / f"{JOB_ID}-{token}").rmdir()
            except OSError:
                pass

    # ---------------------------------------------------------------- paths
    @property
    def ranks(self) -> Path:
        return self.path / "ranks"

    def rank_report(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank}.json"

    def rank_failed(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank}.failed"

    def rank_phase(self, rank: int) -> Path:
        """Where the rank is (hpcqa.rank.phase): starting, at the rendezvous, training step N..."""
        return self.ranks / f"rank-{rank}.phase.json"

    def rank_exit(self, rank: int) -> Path:
        """Written by the rank wrapper when its rank ended badly (a signal, a non-zero exit)."""
        return self.ranks / f"rank-{rank}.exit"

    @property
    def progress(self) -> Path:
        return self.path / "progress.json"

    @property
    def results(self) -> Path:
        return self.path / "results.json"

    @property
    def command_results(self) -> Path:
        """HPCQA_RESULTS: where a user command's rank 0 may write its metrics (a JSON object)."""
        return self.path / "command-results.json"

    def predictions(self, stage: str = "eval", kind: str = "predictions") -> Path:
        """run_qa.py's names: <stage>_predictions.json, <stage>_nbest_predictions.json, <stage>_null_odds.json
        (stage: eval or predict)."""
        if stage not in ("eval", "predict") or kind not in (
            "predictions",
            "nbest_predictions",
            "null_odds",
        ):
            raise ValueError(f"no prediction file {stage}/{kind}")
        return self.path / f"{stage}_{kind}.json"

    def outputs(self, results: Results | None = None) -> list[tuple[str, Path]]:
        """What a finished (or running) job has written, for `hpcqa status JOB`: label, path (existing ones).
        `results`: its results.json when the caller has read it already."""
        found = [
            ("folder", self.path),
            ("results", self.results),
            ("TensorBoard", self.tensorboard),
        ]
        found += [
            (f"{stage} {kind.replace('_', ' ')}", self.predictions(stage, kind))
            for stage in ("eval", "predict")
            for kind in ("predictions", "nbest_predictions", "null_odds")
        ]
        model = self.saved_model()
        if model is not None:
            found.insert(1, ("trained model", model))
        res = self.read_results() if results is None else results
        best = res.best_checkpoint if res else None
        if (
            isinstance(best, str) and best and "\0" not in best
        ):  # a checkpoint's folder (an int is a step)
            found.append(("best checkpoint", Path(best)))
        return [(label, p) for label, p in found if _exists(p)]

    @property
    def tensorboard(self) -> Path:
        """TensorBoard event files (rank 0's SummaryWriter); `tensorboard --logdir` this folder."""
        return self.path / "tensorboard"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def tracking(self) -> Path:
        """The MLflow run rank 0 sends to (record/jobfiles/marks.py: TrackingRun)."""
        return self.path / "tracking.json"

    def read_tracking(self) -> marks.TrackingRun | None:
        return marks.read_tracking(self.tracking)

    @property
    def model(self) -> Path:
        """The trained model (train.save_model): save_pretrained's files of the model and its tokenizer, written
        aside and renamed, so a folder here is whole."""
        return self.path / "model"

    def saved_model(self) -> Path | None:
        """The model folder when it is there and whole (a regular config.json in a real folder), else None."""
        config = self.model / "config.json"
        try:
            whole = not self.model.is_symlink() and self.model.is_dir() and config.is_file()
            whole = whole and not config.is_symlink()
        except (OSError, ValueError):
            return None
        return self.model if whole else None

    @property
    def work(self) -> Path:
        """A user command's working folder: the job's own copy of the submitted folder, where what the program writes
        by relative path lands (shared by the job's attempts, by no other job)."""
        return self.path / "work"

    @staticmethod
    def checkpoint_marker(checkpoint: Path) -> Path:
        """Written (atomically) once every rank has saved its part of a checkpoint: without it, the folder is not
        a checkpoint, whatever else is in it (a kill or a full disk during the save)."""
        return checkpoint / "hpcqa-complete.json"

    def usable_checkpoints(self) -> tuple[list[Path], list[tuple[Path, str]]]:
        """The Trainer's checkpoint-N folders, newest first: (complete and readable, [(damaged, why)]). Pure reading."""
        if not self.checkpoints.is_dir():
            return [], []
        found = [
            p
            for p in self.checkpoints.iterdir()
            if p.is_dir() and re.fullmatch(r"checkpoint-\d+", p.name)
        ]
        good, bad = [], []
        for p in sorted(found, key=lambda p: int(p.name.split("-")[1]), reverse=True):
            state = read_json(p / "trainer_state.json")
            if not (self.checkpoint_marker(p)).is_file():
                bad.append((p, "incomplete: no completion mark (the save was interrupted)"))
            elif not isinstance(state, dict) or "global_step" not in state:
                bad.append((p, "unreadable trainer_state.json"))
            else:
                good.append(p)
        return good, bad

    @staticmethod
    def checkpoint_files(checkpoint: Path) -> dict[str, dict]:
        """Every file of a checkpoint, relative path -> size and sha256 (what its completion mark lists)."""
        out = {}
        for p in sorted(checkpoint.rglob("*")):
            if p.is_file() and p.name != JobDir.checkpoint_marker(checkpoint).name:
                out[str(p.relative_to(checkpoint))] = {
                    "size": p.stat().st_size,
                    "sha256": file_sha256(p),
                }
        return out

    @staticmethod
    def verify_checkpoint(checkpoint: Path) -> str | None:
        """Why a marked checkpoint's files are not the ones its mark lists (a node dying mid-write on a file server,
        a bad disk, a hand edit), or None. Sizes first (cheap), then content. A mark from before marks listed files
        (no "files") is taken as it is."""
        mark = marks.read_mark(JobDir.checkpoint_marker(checkpoint))
        if mark is None or isinstance(mark, Damaged) and not mark.why.startswith("files"):
            return "unreadable completion mark"
        if isinstance(mark, Damaged):
            return f"damaged completion mark ({mark.why})"
        if mark.files is None:
            return None
        for rel, want in mark.files.items():
            p = checkpoint / rel
            if Path(rel).is_absolute() or ".." in Path(rel).parts or p.is_symlink():
                return f"damaged completion mark ({rel} is not a file of the checkpoint)"
            if not p.is_file():
                return f"{rel} is missing"
            if p.stat().st_size != want.size:
                return f"{rel} has {p.stat().st_size} bytes, {want.size} when it was saved"
        for rel, want in mark.files.items():
            if file_sha256(checkpoint / rel) != want.sha256:
                return f"{rel} differs from what was saved (sha256)"
        return None

    @staticmethod
    def set_aside(checkpoint: Path, attempt: int) -> Path:
        """Move a damaged checkpoint out of the Trainer's sight (kept for a look, never deleted): into
        checkpoints/set-aside/, because the Trainer's rotation (save_total_limit) takes every `checkpoint-*` name
        beside the others for one of its own and deletes it."""
        aside = own_folder(checkpoint.parent / "set-aside") / f"{checkpoint.name}.attempt-{attempt}"
        os.replace(checkpoint, aside)
        return aside

    @property
    def controller_log(self) -> Path:
        """The local executor's controller (submitit's), kept off the user's terminal."""
        return self.path / "controller.log"

    @property
    def controller_record(self) -> Path:
        """A local job's controller: its pid and its process identity (boot id, start time), written at submit so that
        status and cancel act on that process only, never on whatever holds a recycled pid."""
        return self.path / "controller.json"

    @property
    def cancel_marker(self) -> Path:
        return self.path / "cancelled"

    def submitit_log(self, job_id: str, rank: int | str, stream: str = "err") -> Path:
        return self.path / f"{job_id}_{rank}_log.{stream}"

    def submission_file(self, array_id: str) -> Path:
        """Where the batch script of this job's array is linked, as submitit names it (<array id>_submission.sh)."""
        return self.path / f"{array_id}_submission.sh"

    def submitted_pickle(self, job_id: str) -> Path:
        """The callable submitit's task runtime (`python -m submitit.core._submit`) loads and runs."""
        return self.path / f"{job_id}_submitted.pkl"

    def log(self, rank: int, stream: str = "err") -> Path | None:
        """The rank's log: submitit's (stderr or stdout), else a rendered script's (both streams)."""
        found = sorted(self.path.glob(f"*_{rank}_log.{stream}")) + sorted(
            self.path.glob(self.script_log(rank).name)
        )
        return found[0] if found else None

    def script_log(self, rank: int) -> Path:
        """A rank's log under a pod script or an mpirun-over-ssh script (both streams): rank-N.log."""
        return self.path / f"rank-{rank}.log"

    # ---------------------------------------------------------------- contents
    def read_results(self) -> Results | None:
        """results.json when it is one (its schema, record/jobfiles/results.py), else None (damaged() says why)."""
        got = results.read(self.results)
        return got if isinstance(got, Results) else None

    def completed_before(self, attempt: int) -> int | None:
        """The earlier attempt that finished this job's work (its results.json says so), or None. Slurm 24.11 can
        start a job once more after it completed: a job preempted with PreemptMode=REQUEUE and killed at the grace
        time's end is requeued again when its next attempt completes (seen on 24.11.5, not on 22.05). That start
        has nothing to do; the results stay the completing attempt's."""
        res = self.read_results()
        if res is None or not res.finished():
            return None
        done_at = res.attempt if res.attempt is not None else res.requeues
        return done_at if done_at is not None and done_at < attempt else None

    def read_progress(self) -> Progress | None:
        """progress.json when it is one (record/jobfiles/progress.py), else None."""
        got = progress.read(self.progress)
        return got if isinstance(got, Progress) else None

    def damaged(self, world_size: int) -> list[str]:
        """The files hpcqa reads back from this folder that are there but cannot be used, each with why: a job's
        program, a hand edit or a dying node can leave anything where hpcqa's own files go."""
        out = []
        listed = range(min(world_size, MAX_LISTED_REPORTS))
        for path, reader, rank in (
            (self.results, results.read, None),
            (self.progress, progress.read, None),
            (self.controller_record, controller.read, None),
            *((self.rank_report(k), report.read, k) for k in listed),
            *((self.rank_failed(k), failure.read, k) for k in listed),
            *((self.rank_exit(k), failure.read, k) for k in listed),
        ):
            got = reader(path)
            if isinstance(got, Damaged):
                out.append(f"{path.relative_to(self.path)}: {got.why}")
            elif isinstance(got, (Report, Failure)) and got.rank != rank:
                out.append(f"{path.relative_to(self.path)}: it says it is rank {got.rank}'s")
        return out

    def read_report(self, rank: int) -> Report | None:
        got = report.read(self.rank_report(rank))
        return got if isinstance(got, Report) and got.rank == rank else None

    def read_phases(self, world_size: int) -> list[PhaseRecord]:
        """The ranks' phase files that can be read and are what they claim (a record naming its rank)."""
        return [got for k in range(world_size) if (got := phase.read(self.rank_phase(k), k))]

    def failed_ranks(self) -> list[Failure]:
        """The ranks that failed, earliest first: the first is the cause, the others usually lost their peer."""
        if not self.ranks.is_dir():
            return []
        by_rank: dict[int, Failure] = {}
        for p in sorted(self.ranks.glob("rank-*.exit")) + sorted(self.ranks.glob("rank-*.failed")):
            got = failure.read(p)
            if isinstance(got, Failure) and p.name.split(".")[0] == f"rank-{got.rank}":
                seen = by_rank.get(got.rank)
                by_rank[got.rank] = seen.merged(got) if seen else got
        return sorted(by_rank.values(), key=failures.cause_order)

    def has_started(self) -> bool:
        return self.ranks.is_dir() or self.progress.exists()

    def state_from_files(self) -> str | None:
        """How a job that the scheduler no longer lists ended, from its own files."""
        if self.cancel_marker.exists():
            return State.CANCELLED
        if self.ranks.is_dir() and (
            any(self.ranks.glob("rank-*.failed")) or any(self.ranks.glob("rank-*.exit"))
        ):
            return State.FAILED
        if self.results.exists():
            return State.COMPLETED
        return None

    def requeue_request(self, attempt: int) -> Path:
        """Written by rank 0 of a rendered script's job after the checkpoint a stop signal asked for."""
        return self.path / f"{REQUEUE_REQUEST}.{attempt}"

    def master_address(self, attempt: int) -> Path:
        """launch.master_interface: the first host's address, published by its local rank 0 per attempt
        (a requeued job may start on other nodes)."""
        return self.path / f"master-address.{attempt}.json"

    def attempt_dir(self, attempt: int) -> Path:
        return self.ranks / f"attempt-{attempt}"

    def begin_attempt(self, rank: int, attempt: int) -> None:
        """A (re)started rank moves its files of an earlier attempt aside (each rank its own: no race),
        so markers of an attempt that was preempted or lost a node never speak for this one."""
        old = report.read(self.rank_report(rank))
        previous = old.attempt if isinstance(old, Report) else None
        if previous is None or previous >= attempt:
            return  # none, this attempt's, or not what a rank writes: the new report replaces it
        keep = self.attempt_dir(previous)
        keep.mkdir(parents=True, exist_ok=True)
        for path in (self.rank_report(rank), self.rank_failed(rank), self.rank_exit(rank)):
            if path.exists():
                os.replace(path, keep / path.name)

    def attempts(self) -> list[int]:
        """Earlier attempts whose files were kept: the folders `attempt-N` begin_attempt makes (a name that is not
        one, a link or a file of that name is something else, passed over)."""
        if not self.ranks.is_dir() or self.ranks.is_symlink():
            return []
        found = []
        for p in self.ranks.glob("attempt-*"):
            n = _ATTEMPT_DIR.fullmatch(p.name)
            if n and not p.is_symlink() and p.is_dir():
                found.append(int(n.group(1)))
        return sorted(found)

    def notices(self, rank: int = 0) -> list[Notice]:
        """The stops on a notice (SIGTERM, the requeue signal) of every attempt, oldest first, from `rank`'s reports:
        which signal, at which step, which checkpoint it saved."""
        paths = [self.attempt_dir(a) / self.rank_report(rank).name for a in self.attempts()]
        reports = [report.read(p) for p in [*paths, self.rank_report(rank)]]
        return [rep.notice for rep in reports if isinstance(rep, Report) and rep.notice]

    def mark_cancelled(self, why: str) -> None:
        atomic_write_text(self.cancel_marker, why + "\n")

    def tail(self, rank: int, n: int = 15) -> list[str]:
        """The last `n` lines of the rank's log, read from its end in bounded memory (record/logtail.py)."""
        path = self.log(rank)
        return logtail.last_lines(path, n) if path else []
