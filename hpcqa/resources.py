"""What hpcqa reads at run time besides its code: the script templates (sbatch_templates/: srun and mpirun job
scripts, the Kubernetes pod's entry point), the example configs (configs/) and the example programs (examples/:
a torchrun-style loop, an HF Trainer QA script and its data), and its version. Standard library only.

An installed hpcqa (a wheel: `pip install .`, `pip install git+...`, a site's environment, an image) carries them
as package data under hpcqa/_data/ (setup.py copies the top-level folders there when it builds), found through
the package with importlib.resources; a source checkout used in place (an editable install, `python -m hpcqa`
from the checkout) has them at its top level, next to the package.
"""

from __future__ import annotations

import importlib.resources
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path

from hpcqa import fsutil
from hpcqa.errors import UsageError

__version__ = "0.1.0"  # pyproject.toml says the same (a test holds them together)

FOLDERS = ("sbatch_templates", "configs", "examples")


def folder(name: str) -> Path:
    """The folder of one kind of package data: the installed copy, else the source checkout's."""
    assert name in FOLDERS, name
    packaged = importlib.resources.files("hpcqa") / "_data" / name
    if packaged.is_dir():
        return Path(str(packaged))
    source = Path(__file__).resolve().parent.parent / name
    if source.is_dir():
        return source
    raise UsageError(
        f"{name}/ is missing from this hpcqa ({Path(__file__).resolve().parent}): it was installed "
        "without its package data",
        "reinstall it from a wheel or the source tree (pip install .)",
    )


PACKAGE_DATA_MAX_BYTES = 4 << 20  # a template, an example config or program: kilobytes


def read_text(path: Path) -> str:
    """A file of the package data (a template, an example), read through the one door (fsutil.read_text)."""
    return fsutil.read_text(path, PACKAGE_DATA_MAX_BYTES, follow=True)


def example_configs() -> dict[str, Path]:
    """name (the file's stem) -> path, of the example configs this hpcqa carries."""
    return {p.stem: p for p in sorted(folder("configs").glob("*.toml"))}


def example_programs() -> dict[str, Path]:
    """file name -> path, of the example programs this hpcqa carries (what `hpcqa submit CONFIG -- python X` runs)."""
    return {p.name: p for p in sorted(folder("examples").glob("*.py"))}


def version() -> str:
    """This hpcqa's version from its package metadata ("unknown" when it is not installed at all)."""
    try:
        return dist_version("hpcqa")
    except PackageNotFoundError:
        return "unknown (not installed: run from a source tree)"
