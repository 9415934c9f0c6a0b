"""Where each rank is (rank/phase.py writes, record/phases.py reads): pure unit tests. The real hang at the
rendezvous is tested end to end in test_local_e2e.py."""

import dataclasses
import json

from hpcqa.core import config
from hpcqa.core.config import load as load_config
from hpcqa.core.plan import HostProbe, build_plan
from hpcqa.rank.phase import Phases
from hpcqa.record import phases
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles import phase
from hpcqa.record.jobfiles.fields import Damaged
from tests.conftest import ROOT

NOW = 1_000_000.0


def test_a_rank_writes_its_phase_and_training_steps_are_throttled(tmp_path, monkeypatch):
    jd = JobDir(tmp_path / "job")
    p = Phases(jd, 3, attempt=2)
    p.enter("rendezvous", "node1:29500")
    got = json.loads(jd.rank_phase(3).read_text())
    assert (got["phase"], got["detail"], got["rank"], got["attempt"]) == (
        "rendezvous",
        "node1:29500",
        3,
        2,
    )
    p.step(1, 40)  # entering training writes at once
    assert json.loads(jd.rank_phase(3).read_text())["phase"] == "training"
    p.step(2, 40)  # within the throttle: not written yet
    assert json.loads(jd.rank_phase(3).read_text()).get("step") == 1
    p.last_write -= 10
    p.step(3, 40)
    assert json.loads(jd.rank_phase(3).read_text())["step"] == 3
    assert [r.rank for r in jd.read_phases(4)] == [3]


def _recs(dicts: list) -> list:
    """Phase records as the job folder's reader gives them (each dict through the schema)."""
    got = [phase.parse(d) for d in dicts]
    assert not any(isinstance(g, Damaged) for g in got), got
    return got


def test_a_phase_file_that_cannot_be_written_does_not_fail_the_rank(tmp_path, capsys):
    (tmp_path / "job").write_text("a file where the folder should be")
    p = Phases(JobDir(tmp_path / "job"), 0)
    p.enter("starting")
    p.enter("loading")
    assert capsys.readouterr().err.count("could not write the phase file") == 1


def test_damaged_or_foreign_phase_files_are_skipped(tmp_path):
    jd = JobDir(tmp_path)
    jd.ranks.mkdir()
    jd.rank_phase(0).write_text("{not json")
    jd.rank_phase(1).write_text(json.dumps({"rank": 5, "phase": "training"}))  # claims another rank
    jd.rank_phase(2).write_text(json.dumps(["a", "list"]))
    jd.rank_phase(3).write_text(
        json.dumps({"rank": 3, "phase": "training", "step": "x", "since": "soon"})
    )  # fields of the wrong type: the file breaks its schema, passed over whole
    jd.rank_phase(4).write_text(
        json.dumps({"rank": 4, "phase": "training", "detail": "two\nlines"})
    )
    got = jd.read_phases(5)
    assert [r.rank for r in got] == [4]
    assert phases.text(got[0], NOW) == "training (two lines)"
    assert isinstance(phase.parse({"rank": 3, "phase": "training", "step": "x"}), Damaged)


def test_phase_text_and_the_list_summary():
    recs = _recs(
        [
            {"rank": 0, "phase": "training", "step": 12, "total_steps": 40, "since": NOW - 65},
            {"rank": 1, "phase": "rendezvous", "detail": "n1:29500", "since": NOW - 200},
            {"rank": 2, "phase": "rendezvous", "detail": "n1:29500", "since": NOW - 190},
        ]
    )
    assert phases.text(recs[0], NOW) == "training step 12/40, for 1:05"
    assert phases.text(recs[1], NOW) == "waiting at the rendezvous (n1:29500), for 3:20"
    assert phases.summary(recs, 4, NOW) == "waiting at the rendezvous 3:20, 2/4 ranks"
    assert phases.summary(recs[:1], 1, NOW) == "training 1:05"
    assert phases.summary(_recs([{"rank": 0, "phase": "bogus"}]), 1, NOW) == ""


def test_ranks_waiting_more_than_a_minute_at_the_rendezvous_are_named():
    recs = _recs(
        [
            {"rank": 0, "phase": "loading", "since": NOW - 100},
            {"rank": 1, "phase": "rendezvous", "detail": "n1:29500", "since": NOW - 61},
            {"rank": 2, "phase": "address", "detail": "of ib0", "since": NOW - 3700},
        ]
    )
    line = phases.stuck_at_rendezvous(recs, NOW)
    assert line.startswith(
        "rank(s) 1, 2 have waited 1:01:40 at the rendezvous for n1:29500, of ib0"
    )
    assert "1 other rank(s)" in line and "train.ddp_timeout_s" in line
    assert phases.stuck_at_rendezvous(recs[1:2], NOW - 2) is None  # 59 s: not yet
    assert (
        "(" not in line.rsplit("train.ddp_timeout_s", 1)[1]
    )  # no timeout in the records: none said


def test_a_short_ddp_timeout_is_warned_of_at_half_of_it_and_said():
    """train.ddp_timeout_s = 40: a minute's warning would come after the ranks gave up; it comes at 20 s, with
    when they give up. A damaged timeout (a string, a bool, inf, negative, past the config's bound) is a minute's,
    as before, and not said."""
    rec = {
        "rank": 0,
        "phase": "rendezvous",
        "detail": "n1:29500",
        "since": NOW - 21,
        "timeout_s": 40,
    }
    line = phases.stuck_at_rendezvous(_recs([rec]), NOW)
    assert line.startswith("rank(s) 0 have waited 0:21") and line.endswith(
        "give up after train.ddp_timeout_s (0:40)"
    ), line
    assert phases.stuck_at_rendezvous(_recs([rec]), NOW - 2) is None  # 19 s
    assert phases.warn_after(_recs([{**rec, "timeout_s": 1800}])[0]) == 60
    for bad in ("40", True, [40], float("inf"), float("nan")):  # not a finite number: passed over
        assert isinstance(phase.parse({**rec, "timeout_s": bad}), Damaged), bad
    for bad in (-5, 0, None, 1e308):  # numbers, none a timeout
        assert phases.warn_after(_recs([{**rec, "timeout_s": bad}])[0]) == 60, bad
        assert phases.stuck_at_rendezvous(_recs([{**rec, "timeout_s": bad}]), NOW) is None, bad
        late = phases.stuck_at_rendezvous(
            _recs([{**rec, "timeout_s": bad, "since": NOW - 61}]), NOW
        )
        assert late.endswith("give up after train.ddp_timeout_s"), (bad, late)
    bound = {f.name: f for f in dataclasses.fields(config.TrainConfig)}["ddp_timeout_s"]
    # the largest timeout the config lets through is said
    assert phases.TIMEOUT_MAX_S == bound.metadata["max"]
    assert phases.warn_after(_recs([{**rec, "timeout_s": phases.TIMEOUT_MAX_S}])[0]) == 60
    mixed = _recs([rec, {**rec, "rank": 1, "timeout_s": 50, "since": NOW - 30}])
    assert phases.stuck_at_rendezvous(mixed, NOW).endswith("give up after train.ddp_timeout_s")


def test_a_submitting_environment_s_master_addr_is_shown_and_warned(tmp_path):
    cfg = load_config(ROOT / "configs" / "quickstart.toml")
    plan = build_plan(cfg, HostProbe(inherited={"MASTER_ADDR": "login7"}))
    assert plan.deferred_env["MASTER_ADDR"] == "login7 (from the submitting environment)"
    assert any(w.startswith("MASTER_ADDR=login7 is set where you submit") for w in plan.warnings)
    plain = build_plan(cfg, HostProbe())
    assert plain.deferred_env["MASTER_ADDR"] == "127.0.0.1" and not any(
        "MASTER_ADDR" in w for w in plain.warnings
    )
