"""Rank 0's MLflow run (train.report_to with "mlflow"): the params, the Trainer's curves, the final scores, throughput
and MFU, tagged with the job, its array task, its plan and its executor; nested under the sweep's parent run.

MLflow's own client (MlflowClient), not transformers' MLflowCallback: that one takes everything from process-wide
variables (MLFLOW_RUN_ID, MLFLOW_NESTED_RUN, MLFLOW_TAGS), logs the ~150 TrainingArguments and model-config fields,
ends its run at the end of train() (before EM/F1, which hpcqa scores after it), and lets a store's error through
into the training loop. Here every call to MLflow runs on one worker thread: training never waits on the store,
and a store that fails (a server down mid-run) is one warning in the rank's log and in results.json -- training
goes on, the run stops being sent. A requeued attempt continues the run its job folder names (tracking.json),
without logging again the steps it redoes after its checkpoint; its end ends a Slurm grid sweep's parent when it is
the last variant to end (rank/runends.py). A rank other than 0 that fails ends rank 0's run FAILED.

A SQLite store (the job root's, by default) may be written by several jobs at once -- a sweep's array tasks on
several nodes, over NFS, where SQLite's own locks are not to be trusted: each batch of writes holds an flock on a
file beside the store (the NFS client takes it on the server), and opens the database afresh (NullPool), so it
reads what the last writer wrote (close-to-open consistency).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
from typing import Any, Callable, Mapping

from transformers import TrainerCallback

from hpcqa.core import tracking
from hpcqa.core.config import Config
from hpcqa.rank import runends
from hpcqa.rank.train.facts import Rank
from hpcqa.record.jobdir import JobRoot
from hpcqa.record.jobfiles import marks
from hpcqa.resources import __version__

# a store that does not answer: MLflow's client retries 7 times with a growing backoff (minutes); the worker thread
# waits instead of the training, but the job's end would wait as long. A SQLite store: a connection per session.
CLIENT_ENV = runends.CLIENT_ENV
SECTIONS = ("train", "model", "data")
ACTIVE: list[
    "Tracker"
] = []  # this process's tracker: ended as FAILED or KILLED by a failure or a notice


def params(cfg: Config, world: int, plan: Any) -> dict[str, str]:
    """What the run was given: the train, model and data keys (a sweep's swept keys among them), the ranks."""
    d = cfg.to_dict()
    out = {
        f"{s}.{k}": json.dumps(list(v)) if isinstance(v, (list, tuple)) else str(v)
        for s in SECTIONS
        for k, v in d[s].items()
        if not isinstance(v, dict)
    }
    out.update(
        world_size=str(world),
        nodes=str(plan.nodes),
        ranks_per_node=str(plan.ranks_per_node),
        backend=str(plan.backend.resolved),
    )
    return out


def job_id(folder_name: str, env: Mapping[str, str]) -> str:
    """The scheduler's id of this job (an array task's: ARRAY_TASK), else its folder's: <job id>-<submission>."""
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or folder_name.split("-")[0]


def tags(r: Rank, env: Mapping[str, str]) -> dict[str, str]:
    plan = r.plan
    out = {
        "hpcqa.job_id": job_id(r.jd.path.name, env),
        "hpcqa.plan_digest": plan.digest,
        "hpcqa.executor": plan.executor,
        "hpcqa.version": __version__,
        "hpcqa.job_dir": str(r.jd.path),
        "mlflow.source.name": "hpcqa",
    }
    if env.get("SLURM_ARRAY_TASK_ID"):
        out["hpcqa.array_task_id"] = env["SLURM_ARRAY_TASK_ID"]
    if plan.variant:
        out["hpcqa.variant"] = str(plan.variant_index)
    if plan.trial is not None:  # a search's trial: its number and study
        out["hpcqa.trial"] = str(plan.trial.number)
        out["hpcqa.study"] = plan.trial.study
    if env.get(tracking.PARENT_ENV):
        out["mlflow.parentRunId"] = env[
            tracking.PARENT_ENV
        ]  # MLflow's nesting: the child names its parent
    return out


def final_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """EM/F1, throughput, times and MFU of results.json; an MFU withheld as unreliable is not sent."""
    eff = result.get("efficiency") or {}
    found: dict[str, Any] = {
        **{k: result.get(k) for k in ("exact_match", "f1", "best_f1", "train_loss")},
        **{k: result.get(k) for k in ("train_samples_per_second", "steady_samples_per_second")},
        **{k: result.get(k) for k in ("wall_time_s", "train_runtime_s", "step_time_s")},
        "mfu": eff.get("mfu"),
        "mfu_all_tokens": eff.get("mfu") and eff.get("mfu_all_tokens"),
        "achieved_gflops": eff.get("mfu") and (eff.get("achieved_flops") or 0) / 1e9,
    }
    return {k: float(v) for k, v in found.items() if _number(v)}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class Tracker(TrainerCallback):
    """The run, sent from one worker thread; the first error stops the sending and is said once."""

    def __init__(self, r: Rank, uri: str) -> None:
        self.r, self.uri = r, uri
        self.client: Any = None
        self.run_id: str | None = None
        self.parent_id: str | None = None
        self.logged: dict[str, int] = {}  # resumed: each metric's last step before
        self.failed: str | None = None
        self.jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._work, name="hpcqa-mlflow", daemon=True)
        self.thread.start()
        ACTIVE[:] = [self]

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            if self.failed is None:
                try:
                    with runends.store_lock(self.uri):
                        job()
                except Exception as e:  # the store's errors are many (HTTP, SQL, MLflow's own): all are the same here
                    self._fail(
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                    )

    def _fail(self, why: str) -> None:
        """Said in the log now; into the rank's warnings by finish(), on the main thread (which writes the report)."""
        self.failed = f"MLflow ({tracking.shown_uri(self.uri)}): {why}; training goes on, the run is not sent further"
        self.r.log(f"WARNING: {self.failed}")

    def on_train_begin(self, args, state, control, **kw):
        if self.run_id is None:
            self.jobs.put(self._start)

    def on_log(self, args, state, control, logs=None, **kw):
        values = {k: float(v) for k, v in (logs or {}).items() if _number(v)}
        if values:
            step, now = state.global_step, int(time.time() * 1000)
            self.jobs.put(lambda: self._metrics(values, step, now))

    def _start(self) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        for k, v in CLIENT_ENV.items():
            os.environ.setdefault(k, v)
        logging.getLogger("mlflow").setLevel(
            logging.WARNING
        )  # its INFO lines (engines, migrations)
        self.client = MlflowClient(tracking_uri=self.uri)
        before = self.r.jd.read_tracking()
        if before is not None and before.uri == tracking.shown_uri(self.uri):
            self._resume(before.run_id, before.parent_run_id)
            return
        exp = self._experiment(tracking.experiment(self.r.plan.config))
        all_tags = tags(self.r, os.environ)
        run = self.client.create_run(exp, run_name=self._name(all_tags), tags=all_tags)
        self.run_id = run.info.run_id
        self.parent_id = all_tags.get("mlflow.parentRunId")
        given = list(params(self.r.plan.config, self.r.world, self.r.plan).items())
        for i in range(0, len(given), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in given[i : i + 100]])
        marks.write_tracking(
            self.r.jd.tracking,
            {
                "run_id": self.run_id,
                "uri": tracking.shown_uri(self.uri),
                "experiment_id": exp,
                "parent_run_id": all_tags.get("mlflow.parentRunId"),
            },
        )
        self.r.log(
            f"MLflow: run {self.run_id} in experiment {exp} ({tracking.shown_uri(self.uri)})"
        )

    def _resume(self, run_id: str, parent_id: str | None) -> None:
        """A requeued or restarted attempt: the same run goes on, RUNNING again (its parent too, if a sibling ended
        it meanwhile); the steps it redoes after its checkpoint are not logged again."""
        self.run_id, self.parent_id = run_id, parent_id
        self.client.update_run(run_id, status=runends.RUNNING)
        self.logged = runends.last_steps(self.client, run_id)
        if parent_id:
            runends.reopen(self.client, parent_id)
        last = max(self.logged.values(), default=None)
        self.r.log(
            f"MLflow: run {run_id} continues ({tracking.shown_uri(self.uri)})"
            + (f"; curves already logged to step {last} are not logged again" if last else "")
        )

    def _name(self, all_tags: Mapping[str, str]) -> str:
        name = f"{self.r.plan.config.job.name}-{all_tags['hpcqa.job_id']}"
        return (
            f"{name}-variant-{all_tags['hpcqa.variant']}" if "hpcqa.variant" in all_tags else name
        )

    def _experiment(self, name: str) -> str:
        """The experiment's id, made when missing (a sweep's tasks may race to make it: the loser reads it)."""
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:
            again = self.client.get_experiment_by_name(name)
            if again is None:
                raise
            return again.experiment_id

    def _metrics(
        self, values: Mapping[str, float], step: int, ms: int, again: bool = False
    ) -> None:
        """A step's values; a resumed run's curves skip the steps it has (`again`: the end's, sent each attempt)."""
        from mlflow.entities import Metric

        fresh = values if again else runends.fresh(values, step, self.logged)
        if self.run_id is not None and fresh:
            self.client.log_batch(
                self.run_id, metrics=[Metric(k, v, ms, step) for k, v in fresh.items()]
            )

    def _end(self, status: str, values: Mapping[str, float] | None, step: int) -> None:
        if self.run_id is None:
            return
        if values:
            self._metrics(values, step, int(time.time() * 1000), again=True)
        self.client.set_terminated(self.run_id, status)
        if self.parent_id:  # a Slurm grid sweep's last variant to end ends the parent
            runends.end_if_last(self.client, self.parent_id)

    def finish(
        self,
        status: str,
        values: Mapping[str, float] | None = None,
        step: int = 0,
        wait_s: float = 60.0,
    ) -> None:
        """The last values and the run's end, sent; waits up to wait_s for the store to take them."""
        self.jobs.put(lambda: self._end(status, values, step))
        self.jobs.put(None)
        self.thread.join(wait_s)
        if self.thread.is_alive() and self.failed is None:
            self._fail(f"the store did not take the run's last values within {wait_s:.0f} s")
        if self.failed:
            self.r.report["warnings"].append(self.failed)
        ACTIVE.clear()


def tracker(r: Rank) -> Tracker | None:
    """Rank 0's tracker when train.report_to names mlflow; None (with a warning) when mlflow does not import here."""
    if r.rank != 0 or not tracking.sends_to_mlflow(r.plan.config):
        return None
    try:
        import mlflow  # noqa: F401  (optional: the [mlflow] extra)
    except ImportError as e:
        warning = f"no MLflow run: {e} (pip install 'hpcqa[mlflow]' where the ranks run)"
        r.log(f"WARNING: {warning}")
        r.report["warnings"].append(warning)
        return None
    store = JobRoot(r.jd.path.parent).tracking_store
    uri, _ = tracking.destination(r.plan.config, os.environ, str(store))
    return Tracker(r, uri)


def finish(result: dict[str, Any], step: int) -> None:
    """The job's end on rank 0: EM/F1, throughput and MFU sent, the run FINISHED; results.json, written next, says
    where it went (`tracking`) and any warning of the store's."""
    for t in ACTIVE[:]:
        t.finish("FINISHED", final_metrics(result), step)
        if t.run_id is not None:
            result["tracking"] = {"run_id": t.run_id, "uri": tracking.shown_uri(t.uri)}


def abandon(status: str) -> None:
    """A failure (FAILED) or a notice (KILLED: a requeued attempt sets it RUNNING again) ends the run as such,
    waiting a little: the rank is on its way out."""
    for t in ACTIVE[:]:
        t.finish(status, wait_s=10.0)


def fail_job_run(plan: Any, jd: Any, rank: int, wait_s: float = 10.0) -> str | None:
    """A rank other than 0 failed, so the job fails: rank 0's run (named in the job folder) ends FAILED now, as rank
    0 may be killed, or blocked on its lost peer, before its own failure path runs. -> a warning, or None."""
    if rank == 0 or plan is None or not tracking.sends_to_mlflow(plan.config):
        return None
    before = jd.read_tracking()
    if before is None:  # rank 0 had not started its run: it fails on its own (its peer is gone)
        return None
    store = JobRoot(jd.path.parent).tracking_store
    uri, _ = tracking.destination(plan.config, os.environ, str(store))
    if tracking.shown_uri(uri) != before.uri:
        return None
    why = runends.fail_job(uri, before.run_id, before.parent_run_id, wait_s)
    return f"rank 0's MLflow run was not ended FAILED: {why}" if why else None
