"""`hpcqa tune` and launch.ranks_per_socket = "auto", the pure parts."""

import json

import pytest

from hpcqa.core import config, plan, ranklayout
from hpcqa.errors import UsageError
from hpcqa.executors import hostprobe
from hpcqa.record import tuned as tune
from tests.conftest import ROOT


def quick(*overrides):
    return config.load(ROOT / "configs/quickstart.toml", list(overrides))


def test_candidates_and_their_parsing():
    assert tune.default_candidates(2) == [1, 2]
    assert tune.default_candidates(16) == [1, 2, 4, 8, 16]
    assert tune.default_candidates(56) == [1, 2, 4, 8, 56]
    assert tune.parse_candidates("2, 1", 2) == [1, 2]
    for bad in ("0", "3", "x", ""):
        with pytest.raises(UsageError):
            tune.parse_candidates(bad, 2)


def test_heuristic_one_rank_per_four_cores_or_per_core_on_small_sockets():
    assert [ranklayout.heuristic_ranks_per_domain(n) for n in (1, 2, 4, 7, 8, 16, 56, 60)] == [
        1,
        2,
        4,
        7,
        2,
        4,
        14,
        15,
    ]


def test_the_key_is_the_shape_a_measurement_applies_to():
    base = ranklayout.shape_key(quick())
    assert ranklayout.shape_key(quick("train.learning_rate=1e-3")) == base  # doesn't change speed
    for other in (
        "train.max_seq_length=256",
        "train.per_device_train_batch_size=8",
        "train.bf16=false",
        'model.name_or_path="builtin:tiny-bert"',
        "cluster.cores_per_socket=4",
    ):
        assert ranklayout.shape_key(quick(other)) != base, other


def test_auto_uses_a_stored_result_for_its_shape_only(tmp_path, monkeypatch):
    store = tmp_path / "tuned.json"
    monkeypatch.setenv("HPCQA_TUNE_STORE", str(store))
    cfg = quick()
    before = plan.build_plan(cfg, hostprobe.probe_host())
    assert before.ranks_per_domain == 2 and "heuristic" in before.layout_source
    entry = tune.record(cfg, {1: 9.5, 2: 7.25}, "lap", 0.0)
    assert (
        entry["ranks_per_socket"] == 1
        and "1x2 fastest on lap: 1x2 9.50, 2x1 7.25" in entry["summary"]
    )
    after = plan.build_plan(cfg, hostprobe.probe_host())
    assert (after.ranks_per_domain, after.world_size, after.cpus_per_task) == (1, 1, 2)
    assert after.layout_source.startswith("auto: `hpcqa tune` (1x2 fastest")
    other = plan.build_plan(quick("train.max_seq_length=256"), hostprobe.probe_host())
    assert other.ranks_per_domain == 2  # not measured for that shape
    fixed = plan.build_plan(quick("launch.ranks_per_socket=2"), hostprobe.probe_host())
    assert fixed.ranks_per_domain == 2 and fixed.layout_source == "launch.ranks_per_socket = 2"
    store.write_text("not json")  # a broken store only costs speed
    assert plan.build_plan(cfg, hostprobe.probe_host()).ranks_per_domain == 2


def test_dry_run_says_where_the_layout_came_from(cli, tmp_path):
    r = cli("submit", "configs/quickstart.toml", "--dry-run", "--json")
    d = json.loads(r.stdout)
    assert d["ranks_per_domain"] == 2 and "heuristic" in d["layout_source"]
    r = cli("submit", "configs/quickstart.toml", "--dry-run")
    assert "layout" in r.stdout and "heuristic" in r.stdout
