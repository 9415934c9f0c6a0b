"""A search on the local executor: batch after batch in this process, each batch's trials one after another (the
same plans a Slurm batch's array would run), the study told how each ended before the next batch is asked. A trial
cancelled (hpcqa cancel SWEEP or its job) stops the search; its trial stays RUNNING in the study, and submitting the
config again runs it again, then goes on."""

from __future__ import annotations

import os
from typing import Any, Callable

from hpcqa.core import kinds
from hpcqa.core.plan import LaunchPlan
from hpcqa.core.search import Search
from hpcqa.core.states import State
from hpcqa.errors import UsageError
from hpcqa.executors import common, searching, snapshot
from hpcqa.executors.interface import Request, Say, Submitted
from hpcqa.record import study
from hpcqa.record.jobdir import JobDir
from hpcqa.text import plural


def check_not_running(
    spec: Search, name: str, url: str, identity: Callable[[int], str | None]
) -> None:
    """A search another live submit on this machine runs is not run twice (its RUNNING trials are live, not
    stale): refused naming that process."""
    who = study.runner(spec, name, url) or ""
    kind, _, rest = who.partition(":")
    pid_text, _, ident = rest.partition(":")
    if kind != kinds.LocalKind.name or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return
    if identity(int(pid_text)) == ident:
        raise UsageError(
            f"the search {name!r} is running: `hpcqa submit` process {pid_text} runs its trials",
            "let it finish, or stop it (Ctrl-C there, or hpcqa cancel SWEEP), then submit again to go on",
        )


def run(ex: Any, request: Request, say: Say) -> Submitted:
    first, sp = request, request.sweep
    spec, ref = sp.search, sp.plans[0].trial
    assert spec is not None and ref is not None
    asked = (
        f"resuming its study, {sp.resumed} of {plural(spec.trials, 'trial')} asked"
        if sp.resumed
        else plural(spec.trials, "trial")
    )
    say(
        f"search {ref.study}: {asked}, {spec.strategy}, batches of {spec.parallelism}, pruner {spec.pruner} "
        f"(study {ref.storage})"
    )
    study.runner(
        spec,
        ref.study,
        ref.storage,
        f"{kinds.LocalKind.name}:{os.getpid()}:{ex.identity(os.getpid())}",
    )
    teller = Teller(spec, say)
    ids, folders, code = [], [], 0
    sweep_id = study.sweep_id(
        spec, ref.study, ref.storage
    )  # a search submitted again: the same sweep
    while True:
        searching.claim(sp)
        for line in searching.refused_lines(sp):
            say(line)
        done = ex._run_sweep(request, say, sweep_id, ended=teller.tell)
        sweep_id = study.sweep_id(spec, ref.study, ref.storage, done.sweep_id)
        ids += done.ids
        folders += done.folders
        code = max(code, done.exit_code)
        if (
            done.exit_code == 130 or teller.cancelled is not None
        ):  # that trial stays RUNNING: it runs again
            break
        nxt = searching.next_batch(sp)
        if nxt is None:
            break
        request = ex.dry_run(nxt)
        common.write_files(request)
        if request.code:
            snapshot.write(request.code, say)
        common.write_work(request)
        sp = request.sweep
    if code != 130 and teller.cancelled is None:
        say(
            f"search {ref.study}: {study.summary(spec, ref.study, ref.storage)}; hpcqa results {sweep_id}"
        )
    return Submitted(first, tuple(ids), sweep_id, tuple(folders), exit_code=code)


class Teller:
    """Tells the study how each trial ended."""

    def __init__(self, spec: Search, say: Say) -> None:
        self.spec, self.say = spec, say
        self.cancelled: int | None = None

    def tell(self, plan: LaunchPlan, jd: JobDir, state_now: str) -> bool:
        """PRUNED (its rank said so), COMPLETE with the metric its results hold (the final evaluation's), or FAIL.
        A cancelled trial stops the search, the study untold: True."""
        spec, ref = self.spec, plan.trial
        assert ref is not None
        if state_now == State.CANCELLED or searching.stopped(jd):
            self.cancelled = ref.number
            self.say(
                f"search {ref.study} stopped: trial {ref.number} was stopped; submit the config again to go on "
                f"(trial {ref.number} runs again)"
            )
            return True
        told = searching.tell(spec, ref.study, ref.storage, ref.number, jd)
        self.say(f"trial {ref.number}: {told}")
        return False
