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


def as_foreground() -> None:
    """preexec_fn: the signals as a shell leaves them for a foreground command (Ctrl-C's SIGINT, SIGQUIT, SIGHUP at
    their defaults), even when the tests run in a background job (`nohup pytest &`, some CI runners)."""
    import signal
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def as_background() -> None:
    """preexec_fn: as `nohup cmd &` from a script starts a command: SIGINT and SIGHUP ignored."""
    import signal
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick): tests side by side (pytest-xdist) never share one."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cli():
    return run_cli


def run_qa_like(tmp_path: Path, tmp_path_factory) -> tuple[Path, list[str]]:
    """tests/data/run_qa_like (a run_qa.py-shaped HF Trainer script: load_dataset("json", field="data"), a
    relative --output_dir whose last checkpoint it resumes, the Trainer's own files) in a folder of its own, and
    its arguments as run_qa.py's README gives them, on data and a model the project makes."""
    import shutil

    from hpcqa.rank.train import model
    data = tmp_path_factory.mktemp("qa-data-flat")
    subprocess.run([sys.executable, str(ROOT / "examples/qa_data.py"), str(data)], check=True, cwd=ROOT,
                   capture_output=True)
    tiny = model.build_tiny_bert(tmp_path_factory.mktemp("tiny-flat") / "tiny")
    prog = tmp_path / "question-answering"
    shutil.copytree(ROOT / "tests/data/run_qa_like", prog)
    return prog, ["python", "run_qa.py", "--model_name_or_path", str(tiny), "--train_file",
                  str(data / "train_flat.json"), "--do_train", "--do_eval", "--per_device_train_batch_size", "4",
                  "--max_train_samples", "64", "--output_dir", "out"]


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


# ---------------------------------------------------------------- the quick tests: `pytest -m quick`
# The pure unit tests: no process started, no training, no Slurm, no root -- under a minute. Every test that is
# neither slow nor slurm is quick unless its module starts processes (the CLI as a user runs it, a pseudo-terminal,
# the pod script under bash, an install): those modules are listed here, and single tests elsewhere are marked
# `process`. A quick test that starts a process anyway fails, saying so (quick_guard), so the marker cannot
# quietly grow slow.
STARTS_PROCESSES = {"test_trainjob", "test_k8s", "test_hostile", "test_console", "test_bad_input", "test_install",
                    "test_scaling", "test_preload_e2e", "test_cli", "test_wheel", "test_readme", "test_stage",
                    "test_layout_e2e", "test_local_e2e", "test_slurmroot", "test_doctor", "test_registry_home",
                    "test_command", "test_secrets", "test_render", "test_tune", "test_status", "test_k8s_walkthrough"}


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist's own hook reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("alone") and item.get_closest_marker("each_release"):
            raise pytest.UsageError(f"{item.nodeid}: `alone` and `each_release` together -- scripts/test.sh runs the "
                                    "other releases' tests beside the first pass only; drop one of the two")
        group = shared_fixture_group(item)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
        module = item.module.__name__.rsplit(".", 1)[-1]
        if module in STARTS_PROCESSES or any(item.get_closest_marker(m) for m in ("slow", "slurm", "process")):
            continue
        item.add_marker(pytest.mark.quick)


# ---------------------------------------------------------------- side by side: `pytest -n 3 --dist loadgroup`
# scripts/test.sh runs the suite on pytest-xdist workers. Tests of a module with a module-scoped fixture (a Slurm
# cluster, a built wheel, a venv) go to one worker as a group, which sets it up once; a module may split its tests
# into groups of its own (@pytest.mark.xdist_group), each then on a worker with its own copy of the fixture (a
# cluster per worker: tests/slurm_cluster.py). Every other test goes wherever a worker is free. A test that must not
# share the machine (it measures time or speed) is marked `alone`: test.sh runs those after the rest, one at a time.

def shared_fixture_group(item) -> str | None:
    """The module's name when the test uses a module-scoped fixture, else None."""
    defs = getattr(item, "_fixtureinfo", None)
    if defs is None:
        return None
    if any(d.scope == "module" for fixturedefs in defs.name2fixturedefs.values() for d in fixturedefs):
        return item.module.__name__.rsplit(".", 1)[-1]
    return None


@pytest.fixture(scope="session")
def matplotlib_fonts():
    """matplotlib with its font cache built: the first import in a home without one runs fc-list (a process), which
    a quick test may not start. Session-scoped, so it is set up before quick_guard (function-scoped) refuses it."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.font_manager  # noqa: F401 -- builds the cache
    return matplotlib


@pytest.fixture(autouse=True)
def quick_guard(request, monkeypatch):
    """A quick test starts no process: one that does fails here, naming the fix."""
    if request.node.get_closest_marker("quick"):
        def refuse(*args, **kwargs):
            raise AssertionError("a quick test (pytest -m quick) starts no process: mark this test "
                                 "@pytest.mark.process, or add its module to STARTS_PROCESSES in tests/conftest.py")
        monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    yield
