"""docs/kubernetes.md's walk-through, run as it is written: its bash block, with the real `hpcqa render` and a
stand-in `kubectl` (tests/data/fake_k8s/kubectl.py) that applies the rules of the components that cannot run here:
the Trainer webhook's cached runtime lookup, kubectl's per-document apply and delete, a staging Job that completes
or fails. No API server runs; what is tested is that no step of the walk-through fails, or hangs, by those rules."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import ROOT

KUBECTL = ROOT / "tests/data/fake_k8s/kubectl.py"


def walkthrough() -> str:
    text = (ROOT / "docs/kubernetes.md").read_text()
    start = text.index("From a fresh namespace")
    return re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)


def _bin(tmp: Path) -> Path:
    b = tmp / "bin"
    b.mkdir()
    for name, body in (
        ("kubectl", f'exec {sys.executable} {KUBECTL} "$@"'),
        ("hpcqa", f'exec {sys.executable} -m hpcqa "$@"'),
        ("docker", 'echo "docker $*" >> "$FAKE_KUBE_DOCKER"'),
    ):
        (b / name).write_text(f"#!/bin/sh\n{body}\n")
        (b / name).chmod(0o755)
    return b


def run(tmp: Path, lag: float, stage_result: str = "Complete", timeout: float = 180):
    """The walk-through in a fresh folder (the configs beside it, as in a checkout): (process, state, job name)."""
    work = tmp / "work"
    work.mkdir()
    (work / "configs").symlink_to(ROOT / "configs")
    env = {
        **os.environ,
        "PATH": f"{_bin(tmp)}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "FAKE_KUBE_ROOT": str(ROOT),
        "FAKE_KUBE_STATE": str(tmp / "state.json"),
        "FAKE_KUBE_CACHE_LAG": str(lag),
        "FAKE_KUBE_JOB_RESULT": stage_result,
        "FAKE_KUBE_DOCKER": str(tmp / "docker.log"),
    }
    name = yaml.safe_load(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "hpcqa",
                "render",
                "configs/squad_spr.toml",
                "--kind",
                "trainjob",
                "--set",
                "k8s.image=registry.example.com/hpcqa:1",
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["metadata"]["name"]
    script = walkthrough().replace("<job>", name).replace("<pod>", f"{name}-node-0-0-abcde")
    t0 = time.time()
    p = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    p.seconds = time.time() - t0
    state = json.loads((tmp / "state.json").read_text())
    return p, state, name


def test_the_walkthrough_applies_the_job_on_its_first_real_apply_and_deletes_only_the_job(tmp_path):
    """With a runtime the webhook's cache sees 3 s after it is created, the dry-run wait is what makes the first
    real apply of the TrainJob admitted; deleting the job leaves the shared runtime."""
    p, state, name = run(tmp_path, lag=3.0)
    assert p.returncode == 0, p.stdout + p.stderr
    applies = [c for c in state["calls"] if c[0] == "apply" and "job.yaml" in c]
    dry = [c for c in applies if "--dry-run=server" in c]
    real = [c for c in applies if "--dry-run=server" not in c]
    assert len(dry) >= 2 and len(real) == 1, applies  # refused at first, by the cache's lag
    assert "specified trainingRuntime must be created before" in p.stderr
    assert f"trainjob/{name} created\n" in p.stdout
    kinds = sorted(k.split("/")[0] for k in state["objects"])
    assert kinds == ["Job", "TrainingRuntime"], state[
        "objects"
    ].keys()  # the job deleted, the runtime kept
    assert "staging: Complete" in p.stdout


def test_one_file_applied_at_once_is_refused_by_the_same_rules(tmp_path):
    """The model bites: the runtime and the job in one file (what render wrote before), applied back to back, are
    refused the way the Trainer refused them."""
    p, _, _ = run(tmp_path, lag=0.0)
    assert p.returncode == 0, p.stderr
    work = tmp_path / "work"
    both = work / "both.yaml"
    both.write_text((work / "runtime.yaml").read_text() + "---\n" + (work / "job.yaml").read_text())
    env = {
        **os.environ,
        "FAKE_KUBE_ROOT": str(ROOT),
        "FAKE_KUBE_STATE": str(tmp_path / "state2.json"),
        "FAKE_KUBE_CACHE_LAG": "3",
    }
    r = subprocess.run(
        [sys.executable, str(KUBECTL), "apply", "-n", "team-a", "-f", str(both)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "specified trainingRuntime must be created before" in r.stderr, (
        r.stderr
    )


def test_a_failed_staging_job_ends_the_walkthrough_at_once(tmp_path):
    """The staging wait ends when the Job fails (a kubectl wait for "complete" would sit out its two hours), and
    nothing after it runs."""
    p, state, _ = run(tmp_path, lag=0.0, stage_result="Failed", timeout=120)
    assert p.returncode != 0 and "staging: Failed" in p.stdout, p.stdout + p.stderr
    assert p.seconds < 60
    assert not [c for c in state["calls"] if "job.yaml" in c or "runtime.yaml" in c]
