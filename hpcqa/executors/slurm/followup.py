"""The search's follow-up job, on a node (executors/slurm/searchnext.py queues it): tell the study how each trial of
the batch ended, then submit the next batch and its own follow-up, or end the search (and its MLflow parent run:
KILLED when a trial was cancelled, else FINISHED if a trial finished, FAILED if none did)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hpcqa.core import config as configmod
from hpcqa.core import sweep
from hpcqa.core.states import State
from hpcqa.executors import searching, tracking
from hpcqa.executors.interface import Say
from hpcqa.executors.slurm import searchnext
from hpcqa.executors.slurm.cli import Slurm
from hpcqa.executors.slurm.executor import SubmititSlurm
from hpcqa.record import study
from hpcqa.record.jobdir import JobDir


def next_batch(path: str, say: Say) -> int:
    """The follow-up job: tell the study, then submit the next batch (and its follow-up), or end the search."""
    state = searchnext.read_state(path)
    os.environ["HPCQA_REGISTRY"] = state["registry"]
    raw = json.loads(state["config"])
    spec = sweep.searched(raw, state["source"])
    if spec is None or spec.digest != state["digest"]:
        raise ValueError(f"{path}: its config is not the search it was written for")
    name, url = searching.where(raw, spec, state["source"])
    slurm = Slurm()
    live, _ = slurm.query([t["job"] for t in state["trials"].values()])
    for number, t in sorted(state["trials"].items(), key=lambda kv: int(kv[0])):
        rec = live.get(t["job"])
        by_user = searching.stopped(
            JobDir(Path(t["folder"]))
        )  # hpcqa cancel's mark, a signal, or Slurm
        if by_user or (rec is not None and rec.state == State.CANCELLED):
            say(
                f"search {name} stopped: trial {number} (job {t['job']}) was cancelled; submit the config again to go on"
            )
            end_parent(raw, state["source"], True, say)
            return 0
    for number, t in sorted(state["trials"].items(), key=lambda kv: int(kv[0])):
        told = searching.tell(spec, name, url, int(number), JobDir(Path(t["folder"])))
        say(f"trial {number} (job {t['job']}): {told}")
    sp = searching.next_or_none(raw, state["source"], spec)
    if sp is None:
        say(f"search {name}: {study.summary(spec, name, url)}; hpcqa results {state['sweep_id']}")
        end_parent(raw, state["source"], False, say)
        return 0
    ex = SubmititSlurm(slurm, snapshot=state["snapshot"])
    ex.submit(ex.dry_run(sp), say)
    return 0


def end_parent(raw: dict, source: str, cancelled: bool, say: Say) -> None:
    """The search's MLflow parent run (if it has one: train.report_to with "mlflow") ends with the search."""
    base = configmod.from_dict({k: v for k, v in raw.items() if k != "sweep"}, source=source)
    status, warning = tracking.end_search(base, cancelled)
    if status:
        say(f"  MLflow: the search's parent run ended {status}")
    if warning:
        say(f"WARNING: the search's MLflow parent run was not ended: {warning}")
