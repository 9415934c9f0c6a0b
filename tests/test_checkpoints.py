"""Checkpoints are complete or ignored: a folder is a checkpoint once every rank has saved its part (the completion
mark); on resume the newest complete, readable one is used and damaged ones are set aside, named; a full disk
during a save fails the job with one line naming the path and the free space, and loses no earlier checkpoint."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcqa.record.jobdir import JobDir
from tests.conftest import ROOT
from tests.test_local_e2e import TINY, cache_env, job_dirs  # noqa: F401  (cache_env is a fixture)


def _checkpoint(jd: JobDir, step: int, marked: bool = True, state: str | None = None) -> Path:
    p = jd.checkpoints / f"checkpoint-{step}"
    p.mkdir(parents=True)
    (p / "trainer_state.json").write_text(
        state if state is not None else json.dumps({"global_step": step})
    )
    if marked:
        jd.checkpoint_marker(p).write_text("{}")
    return p


def test_the_newest_complete_readable_checkpoint_wins_and_damaged_ones_are_named(tmp_path):
    jd = JobDir(tmp_path)
    assert jd.usable_checkpoints() == ([], [])
    _checkpoint(jd, 10)
    _checkpoint(jd, 20, state="{not json")  # the mark, but a torn trainer state
    _checkpoint(jd, 30, marked=False)  # killed during the save
    (jd.checkpoints / "checkpoint-40.damaged-0").mkdir()  # set aside earlier: not a candidate
    good, bad = jd.usable_checkpoints()
    assert [p.name for p in good] == ["checkpoint-10"]
    assert [(p.name, why.split(":")[0]) for p, why in bad] == [
        ("checkpoint-30", "incomplete"),
        ("checkpoint-20", "unreadable trainer_state.json"),
    ]
    aside = jd.set_aside(bad[0][0], 1)
    assert (
        aside.parent.name == "set-aside"
        and aside.name == "checkpoint-30.attempt-1"
        and aside.is_dir()
        and not bad[0][0].exists()
    )


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_a_full_disk_during_a_save_fails_with_one_line_and_keeps_the_earlier_checkpoint(
    tmp_path,
    cache_env,  # noqa: F811
):
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "hpcqa-test-small", str(disk)], check=True
    )
    try:
        env = {**os.environ, **cache_env, "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "hpcqa",
                "submit",
                "configs/quickstart.toml",
                *TINY,
                "--set",
                "train.max_steps=40",
                "--set",
                "train.save_steps=4",
                "--set",
                "train.do_eval=false",
                "--set",
                "train.save_total_limit=3",
                "--set",
                f"job.output_dir={json.dumps(str(disk))}",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=600,
        )
        assert r.returncode == 1 and "Traceback" not in r.stderr.split("first failure")[0], (
            r.stderr[-3000:]
        )
        (job,) = job_dirs(disk)
        failed = JobDir(job).failed_ranks()
        assert failed and "disk full while saving" in failed[0].error, r.stderr[
            -3000:
        ]  # the first failure
        first = [line for line in r.stderr.splitlines() if "disk full while saving" in line]
        assert first and "MiB free on" in first[0] and "checkpoint-" in first[0], r.stderr[-3000:]
        good, bad = JobDir(job).usable_checkpoints()
        ((torn, why),) = bad  # the one being saved when the disk filled up
        assert (
            why.startswith("incomplete")
            and str(torn) in first[0]
            and not JobDir.checkpoint_marker(torn).exists()
        )
        step = int(torn.name.split("-")[1])
        # every earlier checkpoint is whole and kept (save_total_limit = 3 keeps them all here)
        assert [p.name for p in good] == [f"checkpoint-{s}" for s in range(step - 4, 0, -4)], (
            good,
            bad,
        )
    finally:
        for _ in range(20):
            if subprocess.run(["umount", str(disk)], capture_output=True).returncode == 0:
                break
            time.sleep(0.5)


def test_a_checkpoint_is_verified_by_the_sizes_and_digests_its_mark_lists(tmp_path):
    jd = JobDir(tmp_path)
    p = _checkpoint(jd, 7)
    (p / "model.safetensors").write_bytes(b"w" * 1000)
    (p / "sub").mkdir()
    (p / "sub" / "x.bin").write_bytes(b"x")
    jd.checkpoint_marker(p).write_text(json.dumps({"step": 7, "files": JobDir.checkpoint_files(p)}))
    assert JobDir.verify_checkpoint(p) is None
    with open(p / "model.safetensors", "r+b") as f:
        f.truncate(500)
    assert "model.safetensors has 500 bytes, 1000" in JobDir.verify_checkpoint(p)
    (p / "model.safetensors").write_bytes(b"v" * 1000)  # same size, other bytes
    assert "model.safetensors differs" in JobDir.verify_checkpoint(p)
    (p / "sub" / "x.bin").unlink()
    assert "sub/x.bin is missing" in JobDir.verify_checkpoint(p)
    jd.checkpoint_marker(p).write_text("{not json")
    assert JobDir.verify_checkpoint(p) == "unreadable completion mark"
    jd.checkpoint_marker(p).write_text(
        json.dumps({"step": 7})
    )  # a mark from before marks listed files
    assert JobDir.verify_checkpoint(p) is None


def test_a_programs_interrupted_checkpoints_are_found_and_nothing_else(tmp_path):
    """A user program's Trainer checkpoints (no completion marks: the program saves them): trainer_state.json is what
    the Trainer writes last, so a checkpoint-N folder without a readable one was cut off mid-save. Only folders
    changed since the job started count; links, hidden folders and other names are not looked into."""
    from hpcqa.record import trainerfiles

    work, ckpts = tmp_path / "work", tmp_path / "checkpoints"
    out = work / "out"
    for n, state in ((10, '{"global_step": 10}'), (20, None), (30, '{"global_st')):
        (out / f"checkpoint-{n}").mkdir(parents=True)
        (out / f"checkpoint-{n}" / "model.safetensors").write_bytes(b"\0" * 64)
        if state is not None:
            (out / f"checkpoint-{n}" / "trainer_state.json").write_text(state)
    (work / "runs" / "a" / "b" / "checkpoint-5").mkdir(
        parents=True
    )  # 4 below: past the depth looked at
    (work / "runs" / "a" / "checkpoint-6").mkdir(
        parents=True
    )  # 3 below (--output_dir runs/a): found
    (work / ".cache" / "checkpoint-7").mkdir(parents=True)  # hidden
    (work / "out" / "checkpoint-40.tmp").mkdir()  # not a name get_last_checkpoint takes
    (ckpts / "checkpoint-3").mkdir(parents=True)  # HPCQA_CHECKPOINT_DIR is looked at too
    elsewhere = tmp_path / "elsewhere" / "checkpoint-9"
    elsewhere.mkdir(parents=True)
    (work / "linked").symlink_to(elsewhere.parent)  # a link is not followed
    found = dict(trainerfiles.interrupted([work, ckpts], since=0))
    assert sorted(found) == sorted(
        [
            out / "checkpoint-20",
            out / "checkpoint-30",
            ckpts / "checkpoint-3",
            work / "runs" / "a" / "checkpoint-6",
        ]
    ), found
    assert "no trainer_state.json" in found[out / "checkpoint-20"]
    assert "does not read as JSON" in found[out / "checkpoint-30"]
    old = time.time() - 3600  # from before this job: not touched
    os.utime(out / "checkpoint-20", (old, old))
    assert out / "checkpoint-20" not in dict(
        trainerfiles.interrupted([work], since=time.time() - 60)
    )
