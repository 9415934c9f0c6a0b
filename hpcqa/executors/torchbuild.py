"""Which torch build this environment has, read without importing torch: its version.py (a CPU build says
`cuda = None`), the CUDA libraries installed beside it (PyPI's nvidia-* and triton distributions) and their size,
and whether this node has GPUs at all. `hpcqa doctor` turns it into a line."""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from hpcqa import fsutil

CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's own index of CPU-only builds


@dataclass(frozen=True)
class Build:
    version: str | None  # torch.__version__, None when version.py could not be read
    cuda: str | None  # torch.version.cuda: None for a CPU build
    gpus: int = 0  # NVIDIA GPUs this node shows (/proc/driver/nvidia/gpus)
    cuda_dists: list[str] = field(default_factory=list)
    cuda_bytes: int = 0  # what those distributions' files take
    problem: str = ""


def read_version_py(path: Path) -> tuple[str | None, str | None, str]:
    """(__version__, cuda, problem) from torch/version.py, parsed as data (never run)."""
    try:
        tree = ast.parse(fsutil.read_text(path, 1 << 20, follow=True, errors="replace"))
    except (OSError, SyntaxError, ValueError) as e:
        return None, None, f"{path}: {e.__class__.__name__}"
    found: dict[str, object] = {}
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found[target.id] = value.value
    version, cuda = found.get("__version__"), found.get("cuda")
    if not isinstance(version, str):
        return None, None, f"{path} names no __version__"
    return version, cuda if isinstance(cuda, str) else None, ""


def cuda_distributions() -> tuple[list[str], int]:
    """The installed nvidia-* and triton distributions and the bytes their files take."""
    names, total = [], 0
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if not (name.startswith("nvidia-") or name == "triton"):
            continue
        names.append(name)
        for f in dist.files or []:
            try:
                total += f.size if f.size is not None else Path(str(f.locate())).stat().st_size
            except OSError:
                pass
    return sorted(set(names)), total


def count_gpus(root: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    try:
        return sum(1 for _ in root.iterdir())
    except OSError:
        return 0


def observe() -> Build:
    spec = importlib.util.find_spec("torch")
    where = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    if not where:
        return Build(None, None, problem="torch is not importable here")
    version, cuda, problem = read_version_py(where[0] / "version.py")
    dists, size = cuda_distributions() if cuda else ([], 0)
    return Build(version, cuda, count_gpus(), dists, size, problem)
