"""A search on the local executor: batch after batch in this process, each batch's trials one after another (the
same plans a Slurm batch's array would run), the study told how each ended before the next batch is asked. A trial
cancelled (hpcqa cancel SWEEP or its job) stops the search; its trial stays RUNNING in the study, and submitting the
config again runs it again, then goes on."""

from __future__ import annotations

from typing import Any

from hpcqa.core.plan import LaunchPlan
from hpcqa.core.search import Search
from hpcqa.core.states import State
from hpcqa.executors import common, searching, snapshot
from hpcqa.executors.interface import Request, Say, Submitted
from hpcqa.record import study
from hpcqa.record.jobdir import JobDir


def run(ex: Any, request: Request, say: Say) -> Submitted:
    first, sp = request, request.sweep
    spec, ref = sp.search, sp.plans[0].trial
    assert spec is not None and ref is not None
    asked = (
        f"resuming its study, {sp.resumed} of {spec.trials} trials asked"
        if sp.resumed
        else f"{spec.trials} trials"
    )
    say(
        f"search {ref.study}: {asked}, {spec.strategy}, batches of {spec.parallelism or 1}, pruner {spec.pruner} "
        f"(study {ref.storage})"
    )
    teller = Teller(spec, say)
    ids, folders, code = [], [], 0
    sweep_id = study.sweep_id(
        spec, ref.study, ref.storage
    )  # a search submitted again: the same sweep
    while True:
        study.claim(
            spec, ref.study, ref.storage, [(p.variant_index, dict(p.variant)) for p in sp.plans]
        )
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
        if state_now == State.CANCELLED:
            self.cancelled = ref.number
            self.say(
                f"search {ref.study} stopped: trial {ref.number} was cancelled; submit the config again to go on "
                f"(trial {ref.number} runs again)"
            )
            return True
        res = jd.read_results()
        value = res.number(spec.metric) if res is not None and res.finished() else None
        pruned = res is not None and res.trial is not None and res.trial.state == State.PRUNED
        state = study.tell(spec, ref.study, ref.storage, ref.number, pruned, value)
        shown = f" {spec.metric} {value:.2f}" if value is not None else ""
        at = f" at step {res.trial.step}" if pruned and res and res.trial else ""
        self.say(f"trial {ref.number}: {state}{at}{shown}")
        return False
