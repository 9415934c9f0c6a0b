"""A search's next batch, planned: the study asked (record/study.py: an in-memory copy, nothing written) and its
trials turned into validated, digest-checked plans like a grid's tasks (core/sweep.py). The dry run prints the first
batch; submit claims it in the study and runs it; the local executor plans each next batch here as the previous one
ends."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

from hpcqa.core import config as configmod
from hpcqa.core import kinds, sweep
from hpcqa.core.search import Search, TrialRef
from hpcqa.errors import ConfigError, UsageError
from hpcqa.executors import hostprobe, table
from hpcqa.record import study
from hpcqa.record.jobdir import JobRoot


class SearchDone(UsageError):
    """The search has asked all its trials: nothing to run."""


def where(raw: Mapping[str, Any], spec: Search, source: str) -> tuple[str, str]:
    """(study name, storage) of this search: named after job.name; sweep.storage, or the job root's journal."""
    base = configmod.from_dict({k: v for k, v in raw.items() if k != "sweep"}, source=source)
    root = JobRoot.of(base.job.output_dir, base.job.name)
    return base.job.name, study.storage_url(spec, root.search_journal())


def plan_batch(raw: Mapping[str, Any], source: str, spec: Search) -> sweep.SweepPlan:
    """The search's next batch as a sweep plan (trials a dead submit left RUNNING first, as they were). A search
    that has asked all its trials is a UsageError saying so (nothing to run)."""
    sweep.check_space(raw, spec, source)
    name, url = where(raw, spec, source)
    batch, trials = study.peek(spec, name, url)
    if not batch:
        done = sum(1 for t in trials if t.state.is_finished())
        raise SearchDone(
            f"the search {name!r} has asked all its {spec.trials} trials ({done} ended; study {url})",
            "raise sweep.trials to go on; hpcqa results shows its trials",
        )

    def ref(number: int) -> TrialRef:
        return TrialRef(number, name, url, spec.metric, spec.direction, spec.pruner)

    sp = sweep.build_search(
        raw, source, hostprobe.probe_host(), spec, batch, ref, table.max_array_size
    )
    if sp.executor != kinds.LocalKind.name:
        raise ConfigError(
            "sweep.strategy",
            f"a {spec.strategy} search runs on the local executor in this version, not {sp.executor}",
            'set cluster.executor = "local", or strategy = "grid" to sweep on Slurm',
            source,
        )
    return replace(
        sp, search_config=json.dumps(raw, sort_keys=True), source=source, resumed=len(trials)
    )


def next_batch(sp: sweep.SweepPlan) -> sweep.SweepPlan | None:
    """After a batch has ended: the next one, or None when the search has asked all its trials."""
    assert sp.search is not None
    try:
        return plan_batch(json.loads(sp.search_config), sp.source, sp.search)
    except SearchDone:
        return None
