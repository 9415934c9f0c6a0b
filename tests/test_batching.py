"""Length-grouped batches in lockstep across the ranks (hpcqa.rank.train.batching): the order itself, the order as
accelerate's real data-loader shards it among the ranks, and a run that stops mid-epoch and resumes to the weights
of one that did not stop."""

import json
import random

import pytest

from hpcqa.rank.train import batching


def squad_like_lengths(n: int, seed: int = 3) -> list[int]:
    rng = random.Random(seed)
    return [min(384, max(24, int(rng.lognormvariate(5.1, 0.4)))) for _ in range(n)]


def test_every_feature_once_in_an_order_fixed_by_seed_and_epoch():
    lengths = squad_like_lengths(1003)
    a = batching.lockstep_order(lengths, batch=12, world=4, seed=42, epoch=0)
    assert sorted(a) == list(range(1003))
    assert a == batching.lockstep_order(lengths, batch=12, world=4, seed=42, epoch=0)
    assert a != batching.lockstep_order(lengths, batch=12, world=4, seed=42, epoch=1)
    assert a != batching.lockstep_order(lengths, batch=12, world=4, seed=43, epoch=0)


@pytest.mark.torch
def test_the_global_generators_are_left_alone():
    import torch

    state, py = torch.get_rng_state(), random.getstate()
    batching.lockstep_order(squad_like_lengths(500), batch=8, world=2, seed=1, epoch=3)
    assert torch.equal(torch.get_rng_state(), state) and random.getstate() == py


def test_steps_pad_little_and_the_longest_comes_first_the_short_group_last():
    lengths = squad_like_lengths(2000)
    batch, world = 12, 4
    order = batching.lockstep_order(lengths, batch, world, seed=7, epoch=0)
    group = batch * world
    random_order = list(range(len(lengths)))
    random.Random(7).shuffle(random_order)
    grouped = batching.padded_tokens(lengths, order, batch)
    shuffled = batching.padded_tokens(lengths, random_order, batch)
    text = sum(lengths)
    assert grouped < 1.1 * text < shuffled  # under 10 % padding, where random batches pad far more
    assert max(lengths[i] for i in order[:group]) == max(
        lengths
    )  # a memory limit shows at the first step
    full = (
        len(order) - 2000 % group
    )  # the short group, last (the accelerate test shows what it keeps aligned)
    # successive steps are not sorted: the epoch is not a ramp from long to short
    maxima = [max(lengths[i] for i in order[k : k + group]) for k in range(0, full, group)]
    assert maxima != sorted(maxima, reverse=True) and maxima != sorted(maxima)


@pytest.mark.torch
def test_accelerates_shards_hand_every_rank_its_part_of_the_same_length_group():
    """The order as the Trainer's data loader really deals it out: a torch BatchSampler of the per-device batch,
    wrapped in accelerate's BatchSamplerShard for each of the ranks (what Accelerator.prepare does with
    split_batches off). Step k of every rank comes from the same group, dealt so that each rank pads to nearly
    the same length."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    from hpcqa.rank.train.trainer import LockstepLengthSampler

    lengths = squad_like_lengths(1500)
    batch, world = 8, 4
    sampler = LockstepLengthSampler(lengths, batch, world, seed=5)
    sampler.set_epoch(2)
    per_rank = [
        list(BatchSamplerShard(BatchSampler(sampler, batch, drop_last=False), world, rank))
        for rank in range(world)
    ]
    steps = min(len(b) for b in per_rank)
    assert steps == -(-1500 // (batch * world))
    order = batching.lockstep_order(lengths, batch, world, seed=5, epoch=2)
    for k in range(steps - 1):  # the last step may be short (and is padded by accelerate)
        step = [per_rank[rank][k] for rank in range(world)]
        assert sorted(i for b in step for i in b) == sorted(
            order[k * batch * world : (k + 1) * batch * world]
        )
        longest = [max(lengths[i] for i in b) for b in step]
        assert max(longest) - min(longest) <= max(3, 0.03 * max(longest)), (k, longest)


@pytest.mark.slow
def test_a_run_stopped_mid_epoch_resumes_to_the_weights_of_one_that_was_not(cli, tmp_path):
    """Two ranks, length-grouped batches, dynamic padding: a run of 8 steps checkpoints at step 4; another job
    continued from that checkpoint (train.resume_from, as after a preemption with PreemptMode=CANCEL) ends with
    the same weights as the uninterrupted run: the resumed epoch deals out the same batches (the order is the
    seed's and the epoch's, not the process's). The checkpoint is the uninterrupted run's own, the one a run cut
    off after step 4 saves (that one outlives a failure: test_failing_rank_fails_the_job)."""
    from tests.test_local_e2e import TINY, job_dirs

    env = {"HPCQA_CACHE": str(tmp_path / "cache"), "HPCQA_REGISTRY": str(tmp_path / "r.sqlite")}

    def submit(name: str, *extra: str):
        out = tmp_path / name
        r = cli(
            "submit",
            "configs/quickstart.toml",
            *TINY,
            "--set",
            f"job.output_dir={json.dumps(str(out))}",
            "--set",
            "launch.ranks_per_socket=2",
            "--set",
            "train.max_steps=8",
            "--set",
            "train.save_steps=4",
            "--set",
            "train.seed=3",
            *extra,
            env=env,
        )
        return r, job_dirs(out)

    whole, (a,) = submit("whole")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    middle = a / "checkpoints" / "checkpoint-4"
    assert (middle / "trainer_state.json").is_file(), list(a.glob("checkpoints/*"))
    again, (c,) = submit("again", "--set", f"train.resume_from={json.dumps(str(middle))}")
    assert again.returncode == 0, again.stdout + again.stderr
    ra, rc = (json.loads((j / "results.json").read_text()) for j in (a, c))
    assert (
        rc["resumed_from"].endswith("checkpoint-4")
        and ra["global_steps"] == rc["global_steps"] == 8
    )
    assert ra["weights_digest"] == rc["weights_digest"]
    assert ra["efficiency"]["tokens"]["padding_share"] < 0.15
