import os
import sys
from pathlib import Path


def _venv_python() -> str | None:
    """scripts/install.sh installs into this checkout's venv ($HPCQA_VENV, default .venv of the checkout) unless a
    venv is active. `python3 -m hpcqa` from the checkout, in an interpreter that is not a venv, runs in that venv's
    interpreter instead: the checkout's own packages, not whatever another checkout put into the shared python3.
    None when there is nothing to switch to (a venv is active, or the checkout has none)."""
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):  # a venv: the user's choice
        return None
    venv = Path(os.environ.get("HPCQA_VENV") or Path(__file__).resolve().parent.parent / ".venv")
    python = venv / "bin" / "python"
    if python.is_file() and Path(sys.prefix).resolve() != venv.resolve():
        return str(python)
    return None


if __name__ == "__main__":
    other = _venv_python()
    if other:
        # two short lines: the path whole on its own line, never broken mid-word by an 80-column terminal
        try:
            print(
                f"hpcqa: using this checkout's venv, where scripts/install.sh put hpcqa:\n  {other}",
                file=sys.stderr,
                flush=True,
            )
        except OSError:  # stderr closed or full: the note is not worth stopping for
            pass
        os.execv(other, [other, "-m", "hpcqa", *sys.argv[1:]])
    from hpcqa.cli import main

    sys.exit(main(sys.argv[1:]))
