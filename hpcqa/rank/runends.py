"""How MLflow runs end when no submit process waits for them (train.report_to with "mlflow").

A sweep's parent run is made by `submit` (executors/tracking.py), tagged with who ends it (PARENT_ENDS):

    submit      the local executor runs the sweep to its end in the submitting process, then ends it FINISHED
    last-child  a grid sweep queued on Slurm: each variant's rank 0, once its own run has ended, lists the parent's
                children; when all `hpcqa.variants` of them exist and have ended, it ends the parent
    follow-up   a search on Slurm: the follow-up job that finds no next batch (or a cancelled trial) ends it

The last-child check is race-free by its order: a child ends its own run first, then lists its siblings. Of two
children ending at once, the later lister sees both ended (both may end the parent: ending it twice is harmless,
MLflow's set_terminated only overwrites the status and end time). A child that resumes (a requeue after a notice,
KILLED meanwhile) sets the parent RUNNING again if a sibling had ended it, and the last to end ends it again.

The functions below take an MlflowClient and let the store's errors through; `call` runs them from a process that
holds no client (a failed job's other rank, the local executor, a search's follow-up): on a thread, waited for a
bounded time, under the SQLite store's lock, any error returned as one line (a warning, never a failure).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from hpcqa.core import tracking

# MLflow's RunStatus names (mlflow.entities.RunStatus), as its client takes and returns them
RUNNING, FINISHED, FAILED, KILLED = "RUNNING", "FINISHED", "FAILED", "KILLED"
ENDED = (FINISHED, FAILED, KILLED)
PARENT_ENDS = "hpcqa.parent_ends"  # the parent's tag: who ends it
BY_SUBMIT, BY_LAST_CHILD, BY_FOLLOW_UP = "submit", "last-child", "follow-up"
VARIANTS = "hpcqa.variants"  # the parent's tag: how many children a grid sweep has
PAGE = 1000


def children(client: Any, parent: Any) -> list[Any]:
    """The runs nested under `parent` (an mlflow Run): its experiment's runs tagged mlflow.parentRunId = its id."""
    found: list[Any] = []
    token = None
    while True:
        page = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
            max_results=PAGE,
            page_token=token,
        )
        found += list(page)
        token = getattr(page, "token", None)
        if not token:
            return found


def grid_status(statuses: Iterable[str]) -> str:
    """A grid sweep's end: FAILED if a variant failed, else KILLED if one was stopped, else FINISHED."""
    seen = set(statuses)
    return next((s for s in (FAILED, KILLED) if s in seen), FINISHED)


def search_status(statuses: Iterable[str], cancelled: bool) -> str:
    """A search's end: KILLED when a trial was cancelled (the search stopped), FINISHED when at least one trial
    finished (failed trials are part of a search), FAILED when none did."""
    if cancelled:
        return KILLED
    return FINISHED if FINISHED in set(statuses) else FAILED


def end_if_last(client: Any, parent_id: str) -> str | None:
    """A child's run has ended: end its parent if it is ended by its last child and every child has ended.
    -> the status set, or None (not this parent's way, not ended yet, or some child still runs)."""
    parent = client.get_run(parent_id)
    tags = parent.data.tags
    if tags.get(PARENT_ENDS) != BY_LAST_CHILD or parent.info.status != RUNNING:
        return None
    given = str(tags.get(VARIANTS, ""))
    want = int(given) if given.isdigit() else 0
    kids = children(client, parent)
    if want < 1 or len(kids) < want or any(k.info.status not in ENDED for k in kids):
        return None
    status = grid_status(k.info.status for k in kids)
    client.set_terminated(parent_id, status)
    return status


def reopen(client: Any, parent_id: str) -> bool:
    """A child resumes: its parent, if ended by its last child and ended already, is RUNNING again -> reopened."""
    parent = client.get_run(parent_id)
    if parent.data.tags.get(PARENT_ENDS) != BY_LAST_CHILD or parent.info.status not in ENDED:
        return False
    client.update_run(parent_id, status=RUNNING)
    return True


def end_search(client: Any, parent_id: str, cancelled: bool) -> str | None:
    """A search is over (no next batch) or stopped (a trial cancelled): its parent ends -> the status set (None: the
    parent had ended already)."""
    parent = client.get_run(parent_id)
    if parent.info.status in ENDED:
        return None
    status = search_status((k.info.status for k in children(client, parent)), cancelled)
    client.set_terminated(parent_id, status)
    return status


def fail_if_running(client: Any, run_id: str) -> bool:
    """The job failed, its run may not know (rank 0 killed, or stopped by the notice that ended the job's other
    ranks: KILLED): FAILED unless it has ended FINISHED or FAILED already -> whether it was set."""
    run = client.get_run(run_id)
    if run.info.status in (FINISHED, FAILED):
        return False
    client.set_terminated(run_id, FAILED)
    return True


def fail_job(uri: str, run_id: str, parent_id: str | None, wait_s: float) -> str | None:
    """A failed job's run ends FAILED (unless ended FINISHED or FAILED already), and a grid's parent with it when
    that was the last variant to end; from a process that holds no client (`call`) -> a warning, or None."""

    def end(client: Any) -> None:
        if fail_if_running(client, run_id) and parent_id:
            end_if_last(client, parent_id)

    return call(uri, end, wait_s)[1]


def fresh(values: Mapping[str, float], step: int, logged: dict[str, int]) -> dict[str, float]:
    """The values of a step a resumed run has not logged yet: a metric at a step after its last logged one."""
    return {k: v for k, v in values.items() if step > logged.get(k, -1)}


def last_steps(client: Any, run_id: str) -> dict[str, int]:
    """Each metric's last logged step in a run (read once when an attempt resumes it): a resumed attempt redoes
    the steps after its checkpoint, and does not log a metric again at a step it already has."""
    run = client.get_run(run_id)
    out: dict[str, int] = {}
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        if steps:
            out[key] = max(steps)
    return out


# a store that does not answer: MLflow's client retries 7 times with a growing backoff (minutes); held to this
CLIENT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_SQLALCHEMYSTORE_POOLCLASS": "NullPool",
}


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """The lock every writer takes around its writes to a SQLite store (a file beside it; see rank/train/tracking)."""
    if tracking.scheme(uri) != "sqlite":
        yield
        return
    path = Path(uri.removeprefix("sqlite:///") + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def call(uri: str, work: Callable[[Any], Any], wait_s: float = 10.0) -> tuple[Any, str | None]:
    """work(MlflowClient(uri)) on a thread, under the store's lock, waited for at most wait_s -> (what it returned,
    None) or (None, why it did not: one line). Never raises: a store that fails is said, not the caller's error."""
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            from mlflow.tracking import MlflowClient

            for k, v in CLIENT_ENV.items():
                os.environ.setdefault(k, v)
            logging.getLogger("mlflow").setLevel(logging.WARNING)
            with store_lock(uri):
                got["value"] = work(MlflowClient(tracking_uri=uri))
        except Exception as e:  # the store's many errors (HTTP, SQL, MLflow's own), mlflow missing
            got["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]

    thread = threading.Thread(target=run, name="hpcqa-mlflow-end", daemon=True)
    thread.start()
    thread.join(wait_s)
    if thread.is_alive():
        return None, f"the store did not answer within {wait_s:.0f} s"
    if "error" in got:
        return None, f"MLflow ({tracking.shown_uri(uri)}): {got['error']}"
    return got.get("value"), None
