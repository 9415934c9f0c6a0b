"""Checkpoints read back: where to resume (the newest complete checkpoint whose files are the ones its mark lists,
verified by rank 0 and broadcast), the Trainer's train() around it, and a save that hit a full disk."""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file

from hpcqa.errors import HpcqaError, RankError
from hpcqa.rank.train.facts import Rank
from hpcqa.rank.train.stop import StopNotice, attempt, save_at_notice
from hpcqa.record.jobdir import JobDir


def train(r: Rank, trainer, jd: JobDir):
    """Train, resuming from the newest complete checkpoint in the job folder (what a requeue does)."""
    last = resume_point(r, jd)
    wanted = r.plan.config.train.resume_from
    if not last and wanted:
        if not Path(wanted, "trainer_state.json").is_file():
            raise RankError(
                f"train.resume_from = {wanted!r} is not a Trainer checkpoint (no trainer_state.json)",
                "point it at a checkpoint-N folder (hpcqa status JOB names the stopped job's)",
            )
        last = wanted
    if last and r.rank == 0:
        r.log(f"resuming from {last}")
    t0 = time.time()
    try:
        out = trainer.train(resume_from_checkpoint=last)
    except (
        StopNotice
    ):  # agreed during an evaluation between steps: this step's checkpoint, then the stop
        save_at_notice(r, trainer, "evaluation")
        return None, last, time.time() - t0
    except (
        Exception
    ) as e:  # torch.save says RuntimeError, safetensors SafetensorError, plain writes OSError
        full = disk_full(jd, e)
        if full:
            raise full from None
        began = any(
            getattr(cb, "t0", 0.0) for cb in trainer.callback_handler.callbacks
        )  # the step timer's
        if last and not began and not isinstance(e, HpcqaError):
            first = str(e).splitlines()[0][:200] if str(e) else ""
            raise RankError(
                f"could not resume from {last}: {type(e).__name__}: {first}",
                "it verified and read back, yet the Trainer could not load it: move it aside and "
                "requeue or re-submit (the next older checkpoint is used)",
            ) from None
        raise
    return out, last, time.time() - t0


def resume_point(r: Rank, jd: JobDir) -> str | None:
    """The newest checkpoint that is complete (every rank's part saved: the mark), whose files are the ones the mark
    lists (sizes and sha256) and that loads (its weights and optimizer state read back). Rank 0 decides and tells the
    others (one reader of a shared file system, one verdict); the ones that fail are set aside with a warning naming
    them and why, and the next older one is tried."""
    choice: list = [None, []]
    if r.rank == 0:
        good, bad = jd.usable_checkpoints()
        for path in good:
            why = jd.verify_checkpoint(path) or _load_problem(path)
            if why is None:
                choice[0] = str(path)
                break
            bad.append((path, why))
        choice[1] = [(str(p), why) for p, why in bad]
    _broadcast(r, choice)
    if r.rank == 0:
        for path, why in choice[1]:
            try:
                aside = jd.set_aside(Path(path), attempt())
            except (
                OSError
            ) as e:  # checkpoints/set-aside is a link (a program's) or the disk refuses: leave it
                r.log(
                    f"WARNING: checkpoint {path} is damaged ({why}) and could not be set aside ({e.strerror})"
                )
                r.report["warnings"].append(
                    f"checkpoint {Path(path).name} damaged, not set aside: {why}"
                )
                continue
            r.log(f"WARNING: checkpoint {path} set aside ({why}): now {aside.name}")
            r.report["warnings"].append(f"checkpoint {Path(path).name} set aside: {why}")
        if choice[1]:
            r.save_report()
    barrier(r)
    return choice[0]


def _load_problem(checkpoint: Path) -> str | None:
    """Read back what the Trainer will load first -- the weights (safetensors) and the optimizer state
    (torch.load with weights_only, as the Trainer does) -- before it loads them: a failure here sends the resume to
    the next older checkpoint instead of ending the job in a loader traceback."""
    try:
        for p in sorted(checkpoint.glob("*.safetensors")):
            load_file(str(p))
        for p in sorted(checkpoint.glob("optimizer.pt")):
            torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever the loader raises, the verdict is "does not load"
        return (
            f"does not load ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
        )
    return None


def _broadcast(r: Rank, box: list) -> None:
    """Rank 0's `box` to every rank (in place)."""
    if r.world > 1:
        if dist.is_available() and dist.is_initialized():
            dist.broadcast_object_list(box, src=0)


def barrier(r: Rank) -> None:
    if r.world > 1:
        if dist.is_available() and dist.is_initialized():
            dist.barrier()


def disk_full(jd: JobDir, e: BaseException) -> RankError | None:
    """A save that failed because the disk filled up: one line naming the checkpoint and the free space."""
    where = jd.checkpoints if jd.checkpoints.is_dir() else jd.path
    free = shutil.disk_usage(where).free
    nospace = (
        (isinstance(e, OSError) and e.errno == errno.ENOSPC)
        or "No space left" in str(e)
        or ("write" in str(e).lower() and free < 1 << 20)
    )
    if not nospace:
        return None
    good, bad = jd.usable_checkpoints()
    saving = bad[0][0] if bad else where
    kept = (
        f"the last complete checkpoint, {good[0].name}, is kept and a requeue resumes from it"
        if good
        else "no complete checkpoint yet"
    )
    return RankError(
        f"disk full while saving {saving}: {free / 2**20:.1f} MiB free on {where}",
        f"free space there, or set job.output_dir on a larger filesystem; {kept}",
    )
