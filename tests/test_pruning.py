"""The trial's callback (rank/train/pruning.py) against a real Optuna study and its real median pruner: a trial
behind the completed ones is stopped at an evaluation during training, never at its last one (its training is paid
for: it is told COMPLETE with its metric, and ranks as a completed trial)."""

from types import SimpleNamespace

from hpcqa.core.search import TrialRef
from hpcqa.rank.train.pruning import Prune
from hpcqa.record import study
from tests.test_search import spec_of


def trial_behind(tmp_path):
    """A study whose two completed trials reported 80 at steps 10 and 20; trial 2 runs, its Prune callback ready."""
    spec, url = spec_of(trials=3, parallelism=3), str(tmp_path / "study.journal")
    study.claim(spec, "job", url, study.peek(spec, "job", url).batch, 0)
    for n in (0, 1):
        for step in (10, 20):
            study.reporter(TrialRef(n, "job", url, "f1", "maximize", "median")).report(80.0, step)
        study.tell(spec, "job", url, n, False, 80.0)
    rank = SimpleNamespace(rank=0, world=1, log=lambda *_: None, report={"warnings": []})
    return spec, url, Prune(rank, TrialRef(2, "job", url, "f1", "maximize", "median"))


def evaluate(cb: Prune, step: int, max_steps: int, f1: float):
    control = SimpleNamespace(should_training_stop=False)
    state = SimpleNamespace(global_step=step, max_steps=max_steps)
    cb.on_evaluate(None, state, control, metrics={"eval_f1": f1})
    return control.should_training_stop


def test_a_trial_behind_is_pruned_during_training(tmp_path):
    spec, url, cb = trial_behind(tmp_path)
    assert evaluate(cb, 10, 20, 5.0) and cb.outcome()["state"] == "PRUNED"
    assert cb.outcome()["step"] == 10


def test_a_trial_is_not_pruned_at_its_last_evaluation(tmp_path):
    spec, url, cb = trial_behind(tmp_path)
    assert not evaluate(cb, 20, 20, 5.0)  # behind the median at its last step: reported, not judged
    out = cb.outcome()
    assert out["state"] == "COMPLETED" and out["step"] == 20 and out["value"] == 5.0
    assert study.tell(spec, "job", url, 2, False, 5.0) == "COMPLETE"
    t = study.open_study(spec, "job", url).trials[2]
    assert t.intermediate_values == {20: 5.0} and t.value == 5.0


def test_a_median_of_too_few_trials_at_a_step_judges_nothing(tmp_path):
    """sweep.pruner_min_trials = 3: two completed trials at step 10 are not enough to judge trial 2 there."""
    spec, url, cb = trial_behind(tmp_path)
    cb.ref = TrialRef(2, "job", url, "f1", "maximize", "median", 0, 3)
    assert not evaluate(cb, 10, 20, 5.0) and cb.outcome()["state"] == "COMPLETED"
