"""hpcqa installed, not cloned: the wheel `pip wheel .` builds (what `pip install git+...`, a site's shared
environment or an image's `pip install .` produce), installed into a fresh venv outside the checkout and run from a
scratch folder with the commands the README gives for an installed copy: --version, init, the dry run, render for
every target, the quickstart on the local executor, status and logs.

The fresh venv gets hpcqa from the wheel alone; its dependencies (torch, transformers, ...: gigabytes) are this
test environment's, seen through a .pth path line, which adds their folder without running the checkout's
editable-install hook -- so `import hpcqa` finds the wheel's copy, never the checkout (asserted)."""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from hpcqa.core.targets import RENDER_TARGETS
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the venv's bin folder, the wheel) -- the wheel built from this checkout, installed into a fresh venv."""
    base = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(base / "dist")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (base / "dist").glob("hpcqa-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies of this environment, as a plain path (its .pth hooks, the checkout's editable one, stay off)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr
    return venv / "bin", wheel


def _run(bin_dir: Path, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "HPCQA_REGISTRY")
           and not k.startswith(("SLURM_", "SUBMITIT_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", XDG_STATE_HOME=str(cwd / ".state"),
               HPCQA_CACHE=str(cwd / ".cache"))
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_carries_the_templates_and_the_example_configs(installed):
    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("sbatch_templates", "configs", "examples"):
        for f in (ROOT / folder).iterdir():
            if f.name == "__pycache__":
                continue
            assert f"hpcqa/_data/{folder}/{f.name}" in names, (folder, f.name, sorted(names)[:20])
    assert not any(n.startswith(("tests/", "examples/", "logs/")) for n in names)


def test_installed_from_the_wheel_it_runs_from_any_folder(installed, tmp_path):
    bin_dir, _ = installed
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    where = _run(bin_dir, scratch, "python", "-c", "import hpcqa, hpcqa.resources as r; print(hpcqa.__file__); "
                                                    "print(r.folder('sbatch_templates'))")
    assert where.returncode == 0, where.stderr
    package, templates = where.stdout.split()
    assert not package.startswith(str(ROOT)) and "site-packages" in package, package   # the wheel's copy
    assert templates.endswith("hpcqa/_data/sbatch_templates")
    version = _run(bin_dir, scratch, "hpcqa", "--version")
    assert version.returncode == 0 and version.stdout.startswith("hpcqa 0.") and "site-packages" in version.stdout
    listed = _run(bin_dir, scratch, "hpcqa", "init", "--list")
    assert "quickstart" in listed.stdout and "squad_spr" in listed.stdout, listed.stderr
    init = _run(bin_dir, scratch, "hpcqa", "init")
    assert init.returncode == 0 and (scratch / "quickstart.toml").is_file(), init.stderr
    assert "hpcqa submit quickstart.toml --dry-run" in init.stdout
    again = _run(bin_dir, scratch, "hpcqa", "init")
    assert again.returncode == 2 and "exists: nothing was written" in again.stderr and "Traceback" not in again.stderr
    dry = _run(bin_dir, scratch, "hpcqa", "submit", "quickstart.toml", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _run(bin_dir, scratch, "hpcqa", "init", "squad_spr").returncode == 0
    # the example programs the docs run (`-- python examples/ddp_loop.py`), which a wheel user has no checkout of
    prog = _run(bin_dir, scratch, "hpcqa", "init", "ddp_loop.py")
    assert prog.returncode == 0 and "hpcqa submit quickstart.toml -- python ddp_loop.py" in prog.stdout, prog.stderr
    assert (scratch / "ddp_loop.py").read_text() == (ROOT / "examples" / "ddp_loop.py").read_text()
    planned = _run(bin_dir, scratch, "hpcqa", "submit", "quickstart.toml", "--dry-run", "--", "python", "ddp_loop.py")
    assert planned.returncode == 0 and "ddp_loop.py" in planned.stdout, planned.stderr
    for target in RENDER_TARGETS:   # as the README's sections do: the cluster example, the image named
        out = scratch / f"rendered-{target}"
        r = _run(bin_dir, scratch, "hpcqa", "render", "squad_spr.toml", "--target", target, "-o", str(out),
                 "--set", "k8s.image=registry.example.com/hpcqa:1")
        assert r.returncode == 0 and "Traceback" not in r.stderr, (target, r.stderr[-2000:])
        assert out.exists() and out.stat().st_size > 0, target
    # the quickstart itself on the local executor, then status and logs, as the README runs them
    run = _run(bin_dir, scratch, "hpcqa", "submit", "quickstart.toml", "--set", "train.max_steps=6",
               "--set", "data.synthetic_train_examples=96", "--set", "data.synthetic_eval_examples=24")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "COMPLETED" in run.stdout, run.stdout
    (job,) = json.loads(_run(bin_dir, scratch, "hpcqa", "status", "--json").stdout)
    assert job["state"] == "COMPLETED" and job["results"]["f1"] is not None, job
    code = json.loads((Path(job["folder"]) / "results.json").read_text()).get("code") or {}
    assert str(ROOT) not in json.dumps(code), code   # the ranks ran the installed copy's snapshot
    logs = _run(bin_dir, scratch, "hpcqa", "logs", job["id"])
    assert logs.returncode == 0 and logs.stdout, logs.stderr
    assert sorted(p.name for p in scratch.iterdir() if not p.name.startswith((".", "rendered-"))) == \
        ["ddp_loop.py", "logs", "quickstart.toml", "squad_spr.toml"]
