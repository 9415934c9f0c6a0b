"""The product of a fine-tune: the trained model and its tokenizer, saved as run_qa.py saves them (save_pretrained's
files, no optimizer state), so that `AutoModelForQuestionAnswering.from_pretrained(<job folder>/model)` and
`AutoTokenizer.from_pretrained` load it. Rank 0 writes it; the weights are the same on every rank (DDP).

Written into a folder beside the final one and renamed into place: a rank killed while saving leaves no half model
under the name `status` shows (a leftover `.model-*` folder is a partial one, removed by the next save)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from hpcqa.record.jobdir import JobDir


def save(jd: JobDir, model: Any, tokenizer: Any) -> Path:
    """model (DDP's wrapper or the model itself) and tokenizer -> jd.model, replacing an earlier attempt's."""
    inner = getattr(model, "module", model)
    final = jd.model
    for stale in final.parent.glob(".model-*"):  # an earlier attempt's, cut short
        shutil.rmtree(stale, ignore_errors=True)
    part = final.parent / f".model-{os.getpid()}"
    inner.save_pretrained(str(part), safe_serialization=True)
    tokenizer.save_pretrained(str(part))
    if final.is_dir() and not final.is_symlink():
        old = final.parent / f".model-old-{os.getpid()}"
        final.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    elif final.exists() or final.is_symlink():
        final.unlink()
    part.rename(final)
    return final
