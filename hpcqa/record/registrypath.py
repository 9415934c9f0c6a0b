"""Where the job registry is: the user's state folder, the default path, and what chose the one in use
(job.registry, $HPCQA_REGISTRY, or the default)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def state_dir() -> Path:
    """The user's own state folder for hpcqa, the platform's place for it: $XDG_STATE_HOME/hpcqa, else
    ~/.local/state/hpcqa (the XDG base directory default, Linux and other Unix); ~/Library/Application
    Support/hpcqa on macOS."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(xdg):  # the spec: a relative value is invalid and is ignored
        return Path(xdg) / "hpcqa"
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "hpcqa"
    return home / ".local" / "state" / "hpcqa"


def default_path() -> Path:
    """The registry every hpcqa of this user finds from any folder, unless job.registry or $HPCQA_REGISTRY names
    another."""
    return state_dir() / "registry.sqlite"


def resolve_path(path: str | None = None) -> Path:
    return Path(path or os.environ.get("HPCQA_REGISTRY") or default_path())


def chosen_by(path: str | Path | None) -> tuple[Path, str]:
    """(the registry `path` resolves to, what chose it: "job.registry", "$HPCQA_REGISTRY" or "your default")."""
    where = resolve_path(str(path) if path else None)
    if _same(where, default_path()):
        return where, "your default"
    return where, "job.registry" if path else "$HPCQA_REGISTRY"


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a.absolute() == b.absolute()
