"""The submit side of MLflow tracking (train.report_to with "mlflow"): what is checked before anything is queued
(mlflow installed here, a tracking server that answers), where the dry run says the runs go, and a sweep's parent
run, made at submit, whose id the ranks inherit (tracking.PARENT_ENV) to nest their runs under it, tagged with who
ends it (rank/runends.py): submit (local), the last variant to end (a grid on Slurm), the follow-up (a search on
Slurm). And the runs the executors end: a failed local job's, a search's parent when its follow-up finds no next
batch."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import urllib.error
import urllib.request
from typing import Any, Iterator, Mapping, Sequence

from hpcqa.core import tracking
from hpcqa.core.plan import LaunchPlan
from hpcqa.errors import ConfigError
from hpcqa.rank import runends
from hpcqa.record.jobdir import JobDir, JobRoot

ANSWER_S = 5.0  # how long a tracking server has to answer the check before queueing
EXTRA = "pip install 'hpcqa[mlflow]'"


def destination(plan: LaunchPlan, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(URI, what chose it) the plan's rank 0 will send to (its environment is this one, inherited)."""
    store = JobRoot.of(plan.config.job.output_dir, plan.config.job.name).tracking_store
    return tracking.destination(plan.config, os.environ if env is None else env, str(store))


def describe(plan: LaunchPlan, sweep: bool = False) -> str | None:
    """The dry run's line: where the runs go (None: not sent to MLflow)."""
    if not tracking.sends_to_mlflow(plan.config):
        return None
    uri, how = destination(plan)
    nested = (
        "; a parent run for the sweep (made at submit), each variant's run nested" if sweep else ""
    )
    return (
        f"MLflow {tracking.shown_uri(uri)} ({how}), experiment "
        f"{tracking.experiment(plan.config)!r}{nested}; rank 0 sends"
    )


def where(plan: LaunchPlan) -> dict[str, str] | None:
    """The dry run's JSON: where the runs go and what chose it (None: not sent to MLflow)."""
    if not tracking.sends_to_mlflow(plan.config):
        return None
    uri, how = destination(plan)
    return {
        "uri": tracking.shown_uri(uri),
        "chosen_by": how,
        "experiment": tracking.experiment(plan.config),
    }


def check(plans: Sequence[LaunchPlan], answers=urllib.request.urlopen) -> None:
    """Before anything is queued: mlflow imports here, a tracking server answers. ConfigError naming the key."""
    sending = [p for p in plans if tracking.sends_to_mlflow(p.config)]
    if not sending:
        return
    p0 = sending[0]
    if not installed():
        raise ConfigError(
            "train.report_to",
            '"mlflow" is asked for, but mlflow is not installed where you submit',
            f'{EXTRA} (here and where the ranks run), or drop "mlflow" from train.report_to',
            p0.config.source,
        )
    for uri, how in dict.fromkeys(destination(p) for p in sending):
        if tracking.scheme(uri) in tracking.SERVER_SCHEMES:
            why = unanswered(uri, answers)
            if why:
                raise ConfigError(
                    "tracking.uri",
                    f"the tracking server {tracking.shown_uri(uri)} ({how}) does not answer: {why}",
                    "start it (mlflow server --host HOST --port PORT), correct the URI, or leave "
                    "tracking.uri empty (and unset $MLFLOW_TRACKING_URI) for the job root's store",
                    p0.config.source,
                )


def installed() -> bool:
    """mlflow importable here (found, not imported: that takes seconds)."""
    return importlib.util.find_spec("mlflow") is not None


def unanswered(uri: str, answers=urllib.request.urlopen) -> str | None:
    """Why nothing answers at `uri` (its /health), or None when something does (an HTTP error is an answer)."""
    try:
        with answers(uri.rstrip("/") + "/health", timeout=ANSWER_S):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return str(reason)[:200] or type(e).__name__


@contextlib.contextmanager
def sweep_parent(
    plans: Sequence[LaunchPlan], is_sweep: bool, ends_here: bool
) -> Iterator[str | None]:
    """A sweep sent to MLflow: its parent run, made now, its id in this process's environment while the executor
    submits (local ranks and sbatch inherit it) -> the id (None: no parent). `ends_here`: the executor runs the
    sweep to its end before returning (local): the parent is then FINISHED; a queued grid's is ended by its last
    variant to end, a queued search's by the follow-up job that finds no next batch (rank/runends.py).
    A parent named already in this environment (a search's batches: the study's one parent) is kept, not made."""
    p0 = plans[0]
    given = os.environ.get(tracking.PARENT_ENV)
    if given or not is_sweep or not tracking.sends_to_mlflow(p0.config):
        yield given or None
        return
    if ends_here:
        ends = runends.BY_SUBMIT
    else:
        ends = runends.BY_FOLLOW_UP if p0.trial is not None else runends.BY_LAST_CHILD
    client, run_id = parent_run(p0, len(plans), ends)
    saved = os.environ.get(tracking.PARENT_ENV)
    os.environ[tracking.PARENT_ENV] = run_id
    try:
        yield run_id
    finally:
        if saved is None:
            os.environ.pop(tracking.PARENT_ENV, None)
        else:
            os.environ[tracking.PARENT_ENV] = saved
        if ends_here:
            with runends.store_lock(destination(p0)[0]):
                client.set_terminated(run_id, runends.FINISHED)


def parent_run(plan: LaunchPlan, variants: int, ends: str = runends.BY_SUBMIT) -> tuple[Any, str]:
    """A sweep's parent run in the plan's experiment -> (MlflowClient, its id). A search makes one per study, keeps
    its id with the study, and sets tracking.PARENT_ENV to it for every batch it submits."""
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(
        logging.WARNING
    )  # its INFO lines (engines, migrations) are not submit's
    uri = destination(plan)[0]
    os.environ.setdefault(
        "MLFLOW_SQLALCHEMYSTORE_POOLCLASS", "NullPool"
    )  # as the ranks: see rank/train/tracking
    with runends.store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        name = tracking.experiment(plan.config)
        found = client.get_experiment_by_name(name)
        exp = found.experiment_id if found is not None else client.create_experiment(name)
        run = client.create_run(
            exp,
            run_name=f"{plan.config.job.name}-sweep",
            tags={
                "hpcqa.sweep": "parent",
                runends.VARIANTS: str(variants),
                runends.PARENT_ENDS: ends,
                "hpcqa.executor": plan.executor,
                "mlflow.source.name": "hpcqa",
            },
        )
    return client, run.info.run_id


def end_failed(plan: LaunchPlan, jd: JobDir, wait_s: float = 10.0) -> str | None:
    """A job the executor found FAILED: its run (tracking.json) ends FAILED unless it has ended FINISHED or FAILED
    (rank 0 killed when another rank failed, or stopped KILLED by the notice that ended the job) -> a warning."""
    run = jd.read_tracking()
    if run is None or not tracking.sends_to_mlflow(plan.config):
        return None
    uri = destination(plan)[0]
    if tracking.shown_uri(uri) != run.uri:
        return None
    return runends.fail_job(uri, run.run_id, run.parent_run_id, wait_s)


def end_search(cfg: Any, cancelled: bool, wait_s: float = 30.0) -> tuple[str | None, str | None]:
    """A search on Slurm is over (its follow-up found no next batch) or stopped (a trial cancelled): its parent run,
    named in this environment (tracking.PARENT_ENV, exported by sbatch), ends -> (the status set or None, a warning
    or None). `cfg`: the search's config without its [sweep]."""
    parent = os.environ.get(tracking.PARENT_ENV)
    if not parent or not tracking.sends_to_mlflow(cfg):
        return None, None
    store = JobRoot.of(cfg.job.output_dir, cfg.job.name).tracking_store
    uri = tracking.destination(cfg, os.environ, str(store))[0]
    return runends.call(uri, lambda client: runends.end_search(client, parent, cancelled), wait_s)
