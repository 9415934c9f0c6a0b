"""A search's next batch, planned: the study asked (record/study.py: an in-memory copy, nothing written) and its
trials turned into validated, digest-checked plans like a grid's tasks (core/sweep.py). The dry run prints the first
batch; submit claims it in the study and runs it; the local executor and the Slurm follow-up job plan each next
batch here as the previous one ends, and tell the study how each trial ended."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

from hpcqa.core import config as configmod
from hpcqa.core import sweep, sweepcheck
from hpcqa.core.frozen import freeze
from hpcqa.core.search import Search, TrialRef, shown_params
from hpcqa.core.states import State
from hpcqa.core.tomlfile import toml_value
from hpcqa.errors import ConfigError, UsageError
from hpcqa.executors import hostprobe, table
from hpcqa.record import failures, study
from hpcqa.record.jobdir import JobDir, JobRoot
from hpcqa.text import one_line, plural


class SearchDone(UsageError):
    """The search has asked all its trials: nothing to run."""


def _base(raw: Mapping[str, Any], source: str) -> configmod.Config:
    return configmod.from_dict({k: v for k, v in raw.items() if k != "sweep"}, source=source)


def where(raw: Mapping[str, Any], spec: Search, source: str) -> tuple[str, str]:
    """(study name, storage) of this search: named after job.name; sweep.storage, or the job root's journal."""
    base = _base(raw, source)
    root = JobRoot.of(base.job.output_dir, base.job.name)
    return base.job.name, study.storage_url(spec, root.search_journal())


def claim(sp: sweep.SweepPlan) -> None:
    """Write this batch, as planned, into its study (study.claim), with what its trials share (sweepcheck.setup,
    from the config the batch was planned from: recorded at the study's first claim)."""
    spec, ref = sp.search, sp.plans[0].trial
    assert spec is not None and ref is not None
    base = _base(json.loads(sp.search_config), sp.source)
    setup = sweepcheck.setup(base, [d.key for d in spec.space])
    batch = [(p.variant_index, dict(p.variant)) for p in sp.plans]
    study.claim(spec, ref.study, ref.storage, batch, sp.resumed, sp.refused, sp.repeats, setup)


def _same_setup(raw: Mapping[str, Any], source: str, spec: Search, name: str, peeked: Any) -> None:
    """A resumed search whose setup is not its trials' (sweepcheck.SETUP) is refused naming the key."""
    now = sweepcheck.setup(_base(raw, source), [d.key for d in spec.space])
    changed = sweepcheck.setup_change(peeked.setup, now) if peeked.trials else None
    if changed:
        key, was, given = changed
        was = one_line(
            toml_value(was), 120
        )  # read back from the study, a file on a shared folder: bounded
        raise ConfigError(
            key,
            f"the search {name!r} ran its {plural(len(peeked.trials), 'trial')} with {key} = {was}, "
            f"this config says {toml_value(given)}: its trials would be compared across two setups (the pruner's "
            "medians, the sampler, the best)",
            f"set {key} = {was} again to go on, or set another job.name (a new search)",
            source,
        )


class AllRefused(UsageError):
    """Every trial the search has left was refused (its values cannot run together) or repeats one that ended (the
    same values): nothing to run."""

    def __init__(
        self,
        refused: list[tuple[int, dict[str, Any], str]],
        held: int,
        repeats: list[tuple[int, dict[str, Any], int]] = [],  # noqa: B006 -- read only
    ) -> None:
        if refused:
            n, params, why = refused[0]
            more = (
                f" (and {len(refused) + len(repeats) - 1} more)"
                if len(refused) + len(repeats) > 1
                else ""
            )
            said = f"every trial the search has left is refused: trial {n} ({shown_params(params)}): {why}{more}"
            fix = "narrow the searched ranges so that every combination runs, then submit again"
        else:
            said = (
                f"every trial the search has left repeats the values of one that ended: trial "
                f"{repeats[0][0]} is trial {repeats[0][2]}'s ({shown_params(repeats[0][1])}), nothing new to run"
            )
            fix = "raise sweep.trials (the sampler asks again), or widen the searched space"
        super().__init__(said, fix)
        self.refused, self.held, self.repeats = refused, held, repeats


def plan_batch(raw: Mapping[str, Any], source: str, spec: Search) -> sweep.SweepPlan:
    """The search's next batch as a sweep plan (trials a dead submit left RUNNING first, as they were). Trials whose
    values cannot run together are asked, not run (sp.refused: told FAIL at claim). A search that has asked all its
    trials is a UsageError saying so (nothing to run)."""
    sweep.check_space(raw, spec, source)
    name, url = where(raw, spec, source)
    host = hostprobe.probe_host()
    peeked = study.peek(spec, name, url, lambda _n, p: sweep.trial_problem(raw, source, host, p))
    _same_setup(raw, source, spec, name, peeked)
    if not peeked.batch and (peeked.refused or peeked.repeats):
        raise AllRefused(peeked.refused, len(peeked.trials), peeked.repeats)
    if not peeked.batch:
        done = sum(1 for t in peeked.trials if t.state.is_finished())
        raise SearchDone(
            f"the search {name!r} has asked all its {plural(spec.trials, 'trial')} ({done} ended; study {url})",
            "raise sweep.trials to go on; hpcqa results shows its trials",
        )

    def ref(number: int) -> TrialRef:
        return spec.trial_ref(number, name, url)

    sp = sweep.build_search(raw, source, host, spec, peeked.batch, ref, table.max_array_size)
    refused = tuple((n, freeze(p), why) for n, p, why in peeked.refused)
    return replace(
        sp,
        search_config=json.dumps(raw, sort_keys=True),
        source=source,
        resumed=len(peeked.trials),
        refused=refused,
        repeats=tuple((n, freeze(p), of) for n, p, of in peeked.repeats),
    )


def next_batch(sp: sweep.SweepPlan) -> sweep.SweepPlan | None:
    """After a batch has ended: the next one, or None when the search has asked all its trials."""
    assert sp.search is not None
    return next_or_none(json.loads(sp.search_config), sp.source, sp.search)


def next_or_none(raw: Mapping[str, Any], source: str, spec: Search) -> sweep.SweepPlan | None:
    """The next batch, or None when the search is over: all its trials asked, or every one left refused (those are
    told FAIL here, so that the study shows why)."""
    try:
        return plan_batch(raw, source, spec)
    except SearchDone:
        return None
    except AllRefused as e:
        name, url = where(raw, spec, source)
        study.claim(spec, name, url, [], e.held, e.refused, e.repeats)
        return None


def refused_lines(sp: sweep.SweepPlan, dry: bool = False) -> list[str]:
    """A line per trial asked with this batch and not run: its values and why; told FAIL, or (a repeat) the outcome
    of the trial whose values it has."""
    told = "the study will be told" if dry else "told"
    return [
        f"trial {n} ({shown_params(p)}) is not run, its values do not go together: {why}; {told} FAIL"
        for n, p, why in sp.refused
    ] + [
        f"trial {n} is not run, it has the values of trial {of} (the same values and seed train the same model); "
        f"{told} trial {of}'s outcome"
        for n, _p, of in sp.repeats
    ]


def stopped(jd: JobDir) -> bool:
    """Was this trial stopped by its user (hpcqa cancel, Ctrl-C, a signal) rather than ended? Such a trial is not
    told: it stays RUNNING in the study and runs again, as it was, when the search is submitted again."""
    if jd.cancel_marker.exists():
        return True
    if jd.read_results() is not None:
        return False
    gone = jd.failed_ranks()
    return bool(gone) and all(failures.by_an_interrupt(f.error) for f in gone)


def tell(spec: Search, name: str, url: str, number: int, jd: JobDir) -> str:
    """Tell the study how a trial ended, from what its job folder holds: PRUNED (its rank 0 said so), COMPLETE with
    the metric its results hold (the final evaluation's), or FAIL. -> what was told, for a line."""
    res = jd.read_results()
    value = res.number(spec.metric) if res is not None and res.finished() else None
    pruned = res is not None and res.trial is not None and res.trial.state == State.PRUNED
    told = study.tell(spec, name, url, number, pruned, value)
    at = f" at step {res.trial.step}" if pruned and res and res.trial else ""
    return told + at + (f" {spec.metric} {value:.2f}" if value is not None else "")
