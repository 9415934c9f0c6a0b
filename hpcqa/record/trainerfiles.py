"""What a Hugging Face Trainer program leaves in its working folder, read back for a user command's job with no change
to the program: `trainer_state.json` (written at every checkpoint, and by `save_state()`: global step, max steps,
the loss history) for its progress, and `all_results.json` / `eval_results.json` / `train_results.json`
(`save_metrics()`, as run_qa.py writes them) for its results. Files from another program are read as data: any
field may be missing or of the wrong type."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from hpcqa.record.jobdir import read_json
from hpcqa.record.jobfiles.fields import number

STATE = "trainer_state.json"
RESULTS = (
    "all_results.json",
    "eval_results.json",
    "train_results.json",
)  # the first found wins; the others add
MAX_DEPTH = 3  # out/checkpoint-12/trainer_state.json is 2 below the working folder
MAX_ENTRIES = 5000  # a folder walked for them: never more than this many entries
MAX_BYTES = 8 << 20  # a file larger than this is not read (a loss history of millions of steps)
CHECKPOINT = re.compile(
    r"checkpoint-\d+"
)  # the names transformers' get_last_checkpoint() resumes from


def _walk(roots: list[Path], depth: int, skip=lambda name: False):
    """(folder, its sub-folders, its files) under `roots`, at most `depth` below each, MAX_ENTRIES entries in all;
    hidden folders, links and the sub-folders `skip` names are not gone into."""
    seen = 0
    for root in roots:
        base = len(Path(root).parts)
        for top, dirs, files in os.walk(root):
            seen += len(dirs) + len(files)
            if seen > MAX_ENTRIES:
                return
            yield top, list(dirs), files
            dirs[:] = (
                []
                if len(Path(top).parts) - base >= depth
                else [
                    d
                    for d in dirs
                    if not d.startswith(".")
                    and not skip(d)
                    and not os.path.islink(os.path.join(top, d))
                ]
            )


def newest(roots: list[Path], names: tuple[str, ...]) -> dict[str, Path]:
    """The newest file of each name under `roots` (at most MAX_DEPTH below, MAX_ENTRIES entries looked at)."""
    best: dict[str, tuple[float, Path]] = {}
    for top, _, files in _walk(roots, MAX_DEPTH):
        for name in set(files) & set(names):
            path = Path(top) / name
            try:
                st = path.lstat()  # a link is not followed out of the folder
            except OSError:
                continue
            regular = stat.S_ISREG(
                st.st_mode
            )  # a FIFO of that name would block the reader for ever
            if (
                regular
                and st.st_size <= MAX_BYTES
                and (name not in best or st.st_mtime > best[name][0])
            ):
                best[name] = (st.st_mtime, path)
    return {k: v[1] for k, v in best.items()}


def progress(roots: list[Path]) -> dict[str, Any] | None:
    """{"step", "total_steps", "epoch", "loss", "source"} from the newest trainer_state.json; None without one."""
    path = newest(roots, (STATE,)).get(STATE)
    state = read_json(path) if path else None
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return None
    history = state.get("log_history")
    if not isinstance(history, list):
        history = []
    losses = [number(h.get("loss")) for h in history if isinstance(h, dict)]
    losses = [x for x in losses if x is not None]
    total = state.get("max_steps")
    return {
        "step": state["global_step"],
        "total_steps": total if isinstance(total, int) and total > 0 else None,
        "epoch": number(state.get("epoch")),
        "loss": losses[-1] if losses else None,
        "source": str(path),
    }


def metrics(roots: list[Path]) -> dict[str, Any] | None:
    """The Trainer's saved metrics (all_results.json first; eval_ and train_results.json add what it lacks), and
    where they came from; None when the program saved none."""
    found = newest(roots, RESULTS)
    out: dict[str, Any] = {}
    sources = []
    for name in RESULTS:
        got = read_json(found[name]) if name in found else None
        if isinstance(got, dict):
            out.update({k: v for k, v in got.items() if k not in out and isinstance(k, str)})
            sources.append(str(found[name]))
    return {"metrics": out, "sources": sources} if out else None


def interrupted(roots: list[Path], since: float) -> list[tuple[Path, str]]:
    """The Trainer's checkpoint-N folders under `roots` (at most MAX_DEPTH below) changed since `since` whose save
    did not finish: the Trainer writes trainer_state.json last, so a folder without a readable one was cut off (a
    preemption, a node lost mid-save). transformers' get_last_checkpoint() picks the highest number whatever is in
    it, and the program's resume then dies on the missing file. Pure reading; [(folder, why)]."""
    found: list[tuple[Path, str]] = []
    for top, dirs, _ in _walk(roots, MAX_DEPTH - 1, skip=CHECKPOINT.fullmatch):
        for d in [d for d in dirs if CHECKPOINT.fullmatch(d)]:
            path = Path(top) / d
            try:
                st = path.lstat()
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_mtime < since:
                continue
            state = path / STATE
            if not state.is_file():
                found.append((path, f"no {STATE}: its save was interrupted"))
            elif state.stat().st_size <= MAX_BYTES and not isinstance(read_json(state), dict):
                found.append((path, f"{STATE} does not read as JSON: its save was interrupted"))
    return found
