import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
SLURM_HERE = frozenset({"slurm"})   # HostProbe.schedulers where sbatch is on PATH
# `hpcqa tune` results change what ranks_per_socket = "auto" means: tests never see a user's store.
_STORES = tempfile.mkdtemp(prefix="hpcqa-tests-")
os.environ["HPCQA_TUNE_STORE"] = os.path.join(_STORES, "tuned.json")
# so do the links `hpcqa tune --comm` stored: they add warnings to multi-node submits
os.environ["HPCQA_LINK_STORE"] = os.path.join(_STORES, "links.json")
# and the user's own registry (the default, in the XDG state folder): one for the session, never the user's
os.environ["XDG_STATE_HOME"] = os.path.join(_STORES, "state")


def run_cli(*args: str, env: dict | None = None, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run `python -m hpcqa ...` as a user would, in a fresh interpreter."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_", "OMPI_", "SUBMITIT_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        full_env.pop(k, None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "hpcqa", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or ROOT, timeout=600)


def pytest_report_header(config):
    from tests.slurm_cluster import slurm_version
    release = os.environ.get("HPCQA_SLURM_RELEASE")
    return [f"slurm: {slurm_version() or 'not installed'}" + (f" (HPCQA_SLURM_RELEASE={release})" if release else "")]


@pytest.fixture
def cli():
    return run_cli


# ---------------------------------------------------------------- the suite leaves the checkout as it found it

def checkout_state() -> set[str] | None:
    """`git status --porcelain` of the checkout (untracked files each listed), or None outside a git checkout."""
    r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                       text=True)
    return set(r.stdout.splitlines()) if r.returncode == 0 else None


def pytest_sessionstart(session):
    session.config._hpcqa_checkout = checkout_state()


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, "_hpcqa_checkout", None)
    after = checkout_state()
    if before is None or after is None or hasattr(session.config, "workerinput"):
        return
    left = sorted(after - before)
    if left:
        session.config.get_terminal_writer().line(
            "the test suite changed the checkout (write into tmp_path, or pass --output to sbatch):\n  "
            + "\n  ".join(left), red=True)
        session.exitstatus = 1
