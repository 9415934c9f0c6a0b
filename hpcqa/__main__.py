import os
import sys
from pathlib import Path


def _venv_python() -> str | None:
    """On an externally managed system Python (PEP 668) scripts/install.sh installs into a venv ($HPCQA_VENV,
    default .venv of the checkout). `python3 -m hpcqa` from the checkout, with that python3 lacking hpcqa's
    dependencies, runs in that venv's interpreter instead. None when there is nothing to switch to."""
    import importlib.util
    if importlib.util.find_spec("submitit") is not None:  # hpcqa's dependencies are here: stay
        return None
    venv = Path(os.environ.get("HPCQA_VENV") or Path(__file__).resolve().parent.parent / ".venv")
    python = venv / "bin" / "python"
    if python.is_file() and Path(sys.prefix).resolve() != venv.resolve():
        return str(python)
    return None


if __name__ == "__main__":
    other = _venv_python()
    if other:
        print(f"hpcqa: using {other} (this python has not hpcqa's dependencies; scripts/install.sh put them there)",
              file=sys.stderr)
        os.execv(other, [other, "-m", "hpcqa", *sys.argv[1:]])
    from hpcqa.cli import main
    sys.exit(main(sys.argv[1:]))
