import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# shared fixtures' time, apart from the tests' (scripts/citime.py)
pytest_plugins = ["tests.shared_setup"]

ROOT = Path(__file__).resolve().parent.parent
# pytest caches the test modules it rewrote (tests/__pycache__, git-ignored) even where PYTHONDONTWRITEBYTECODE is set
# (this machine's shell and CI set it): rewriting the ~60 modules again took ~4 s of every pytest process's start,
# a sixth of the quick tier. Processes the tests start still inherit the variable.
sys.dont_write_bytecode = False
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
SLURM_HERE = frozenset({"slurm"})  # HostProbe.schedulers where sbatch is on PATH
# `hpcqa tune` results change what ranks_per_socket = "auto" means: tests never see a user's store.
_STORES = tempfile.mkdtemp(prefix="hpcqa-tests-")
# removed when this pytest process ends (each xdist worker has its own); not by a process forked from it
atexit.register(
    lambda pid=os.getpid(): os.getpid() == pid and shutil.rmtree(_STORES, ignore_errors=True)
)
os.environ["HPCQA_TUNE_STORE"] = os.path.join(_STORES, "tuned.json")
# so do the links `hpcqa tune --comm` stored: they add warnings to multi-node submits
os.environ["HPCQA_LINK_STORE"] = os.path.join(_STORES, "links.json")
# and the user's own registry (the default, in the XDG state folder): one for the session, never the user's
os.environ["XDG_STATE_HOME"] = os.path.join(_STORES, "state")
# the fused attention kernel, compiled once per machine (scripts/install.sh builds it): tests that give their jobs a
# cache of their own (HPCQA_CACHE) would each compile it again
os.environ.setdefault(
    "HPCQA_KERNEL_DIR", os.path.join(os.path.expanduser("~"), ".cache", "hpcqa", "kernels")
)


def cli_env(env: dict | None = None) -> dict[str, str]:
    """The environment the CLI gets in the tests: this one without a launcher's or a rank's variables, plus `env`."""
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PMI_", "OMPI_", "SUBMITIT_"))
    }
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        full_env.pop(k, None)
    return {**full_env, **(env or {})}


def run_cli(
    *args: str, env: dict | None = None, cwd: str | Path | None = None, **popen
) -> subprocess.CompletedProcess:
    """Run `python -m hpcqa ...` as a user would, in a fresh interpreter (`popen`: e.g. a preexec_fn that sets a
    limit, a shorter timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "hpcqa", *args],
        capture_output=True,
        text=True,
        env=cli_env(env),
        cwd=cwd or ROOT,
        **{"timeout": 600, **popen},
    )


def run_cli_in_process(
    *args: str, env: dict | None = None, cwd: str | Path | None = None
) -> subprocess.CompletedProcess:
    """`hpcqa ...` in this process, as run_cli would run it (same cwd, same environment, its stdout, stderr and exit
    code): for the verbs that are pure, where a fresh interpreter per call costs more than the call (a Kubernetes
    render imports the kubernetes client, ~0.9 s of CPU). The tests that check the CLI as a process use run_cli."""
    import contextlib
    import io
    from unittest import mock

    from hpcqa.cli import main

    before = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, cli_env(env), clear=True):
        try:
            os.chdir(cwd or ROOT)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(list(args))
                except SystemExit as e:  # argparse's own refusals
                    code = e.code if isinstance(e.code, int) else 2
        finally:
            os.chdir(before)
    return subprocess.CompletedProcess(["hpcqa", *args], code, out.getvalue(), err.getvalue())


def run_cli_rendering_in_process(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """run_cli, but `render` in this process (run_cli_in_process)."""
    return (run_cli_in_process if args[:1] == ("render",) else run_cli)(*args, **kwargs)


def pytest_report_header(config):
    from tests.slurm_cluster import slurm_version

    release = os.environ.get("HPCQA_SLURM_RELEASE")
    return [
        f"slurm: {slurm_version() or 'not installed'}"
        + (f" (HPCQA_SLURM_RELEASE={release})" if release else "")
    ]


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
    """A TCP port nothing listens on now, below the ephemeral range (an outgoing connection never takes it between
    this pick and the test's bind) and at random, so tests side by side (pytest-xdist) do not pick the same one."""
    import random
    import socket

    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free TCP port in 20000-32000")


@pytest.fixture
def cli():
    return run_cli


def run_folder(tmp_path_factory) -> Path:
    """The folder this test run's processes share: pytest's basetemp, or the pytest-xdist workers' common parent."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(tmp_path_factory, name: str, make) -> Path:
    """A folder `make(folder)` fills, made once per test run and shared by the tests (and the pytest-xdist workers)
    that only read it: the first to ask makes it under a lock, the others wait for it and reuse it. A make that
    failed leaves nothing behind, and the next test to ask tries again."""
    import fcntl

    done = run_folder(tmp_path_factory) / "made-once" / name
    done.parent.mkdir(exist_ok=True)
    with open(done.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            part = done.parent / f"{name}.part-{os.getpid()}"
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir()
            make(part)
            part.rename(done)
    return done


def qa_data(tmp_path_factory) -> Path:
    """examples/qa_data.py's SQuAD-format files (train.json, train_flat.json ...), made once per test run."""
    return made_once(
        tmp_path_factory,
        "qa-data",
        lambda d: subprocess.run(
            [sys.executable, str(ROOT / "examples/qa_data.py"), str(d)],
            check=True,
            cwd=ROOT,
            capture_output=True,
        ),
    )


def tiny_model(tmp_path_factory) -> Path:
    """builtin:tiny-bert saved as a model folder (what --model_name_or_path takes), made once per test run."""
    from hpcqa.rank.train import model

    return (
        made_once(tmp_path_factory, "tiny-bert", lambda d: model.build_tiny_bert(d / "model"))
        / "model"
    )


def tiny_bert_config(vocab: int = 100, hidden: int = 32, layers: int = 1, heads: int = 2, **more):
    """A BertConfig a step runs in milliseconds on: `hidden` wide, its feed-forward twice that, `more` on top."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        **more,
    )


def tiny_bert(attn: str | None = None, seed: int = 0, **config):
    """A random BertForQuestionAnswering of tiny_bert_config(**config), its weights drawn from `seed`; `attn` its
    attention implementation (transformers' name, or hpcqa's once registered), else the model's default."""
    import torch
    from transformers import BertForQuestionAnswering

    cfg = tiny_bert_config(**config)
    torch.manual_seed(seed)
    if attn is None:
        return BertForQuestionAnswering(cfg)
    return BertForQuestionAnswering._from_config(cfg, attn_implementation=attn)


def run_qa_like(tmp_path: Path, tmp_path_factory) -> tuple[Path, list[str]]:
    """tests/data/run_qa_like (a run_qa.py-shaped HF Trainer script: load_dataset("json", field="data"), a
    relative --output_dir whose last checkpoint it resumes, the Trainer's own files) in a folder of its own, and
    its arguments as run_qa.py's README gives them, on data and a model the project makes."""
    data, tiny = qa_data(tmp_path_factory), tiny_model(tmp_path_factory)
    prog = tmp_path / "question-answering"
    shutil.copytree(ROOT / "tests/data/run_qa_like", prog)
    return prog, [
        "python",
        "run_qa.py",
        "--model_name_or_path",
        str(tiny),
        "--train_file",
        str(data / "train_flat.json"),
        "--do_train",
        "--do_eval",
        "--per_device_train_batch_size",
        "4",
        "--max_train_samples",
        "64",
        "--output_dir",
        "out",
    ]


# ---------------------------------------------------------------- the suite leaves the checkout as it found it


def checkout_state() -> set[str] | None:
    """`git status --porcelain` of the checkout (untracked files each listed), or None outside a git checkout."""
    r = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
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
            + "\n  ".join(left),
            red=True,
        )
        session.exitstatus = 1


# ---------------------------------------------------------------- the quick tests: `pytest -m quick`
# The pure unit tests: no process started, no training, no Slurm, no root -- under a minute. Every test that is
# neither slow nor slurm is quick unless its module starts processes (the CLI as a user runs it, a pseudo-terminal,
# the pod script under bash, an install): those modules are listed here, and single tests elsewhere are marked
# `process`. A quick test that starts a process anyway fails, saying so (quick_guard), so the marker cannot
# quietly grow slow.
STARTS_PROCESSES = {
    "test_trainjob",
    "test_k8s",
    "test_hostile",
    "test_console",
    "test_bad_input",
    "test_install",
    "test_scaling",
    "test_preload_e2e",
    "test_cli",
    "test_wheel",
    "test_readme",
    "test_stage",
    "test_layout_e2e",
    "test_local_e2e",
    "test_slurmroot",
    "test_doctor",
    "test_registry_home",
    "test_command",
    "test_secrets",
    "test_render",
    "test_tune",
    "test_status",
    "test_k8s_walkthrough",
}
# Modules whose import loads torch (and transformers): seconds before the first test, so not quick; `pytest -m
# quick` does not even import them (pytest_ignore_collect), which kept the quick tier ~7 s longer. Nor does a run
# that can select only cluster tests (scripts/test.sh's `alone` and other-release passes: 7 s of CPU each).
IMPORTS_TORCH = {
    "test_attention",
    "test_data",
    "test_stage",
    "test_opsplit",
    "test_fused",
    "test_master",
    "test_pruning",
}
CLUSTER_MARKS = (
    "slurm",
    "alone",
    "each_release",
)  # never on a test of IMPORTS_TORCH (checked below)


def pytest_ignore_collect(collection_path, config):
    if collection_path.stem not in IMPORTS_TORCH:
        return None
    expr = (config.getoption("markexpr", "") or "").strip()
    if expr == "quick" or (expr and not _selects_without(expr, CLUSTER_MARKS)):
        return True
    return None


def _selects_without(expr: str, absent: tuple[str, ...]) -> bool:
    """Whether the -m expression can select a test that has none of `absent` (whatever its other marks)."""
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expr)
    return any(
        compiled.evaluate(lambda name, *_, other=other, **__: name not in absent and other)
        for other in (False, True)
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in IMPORTS_TORCH and any(
            item.get_closest_marker(m) for m in CLUSTER_MARKS
        ):
            raise pytest.UsageError(
                f"{item.nodeid}: a cluster test in a module that imports torch at collection (IMPORTS_TORCH), "
                "which the cluster-only passes do not collect: move it to a module of its own"
            )
        if item.get_closest_marker("alone") and item.get_closest_marker("each_release"):
            raise pytest.UsageError(
                f"{item.nodeid}: `alone` and `each_release` together -- scripts/test.sh runs the "
                "other releases' tests beside the first pass only; drop one of the two"
            )
        module = item.module.__name__.rsplit(".", 1)[-1]
        if (
            module in STARTS_PROCESSES
            or module in IMPORTS_TORCH
            or any(item.get_closest_marker(m) for m in ("slow", "slurm", "process", "torch"))
        ):
            continue
        item.add_marker(pytest.mark.quick)
    if os.environ.get("HPCQA_TEST_MODULES_REVERSED") == "1":
        reverse_modules(items)


def reverse_modules(items: list) -> None:
    """The modules in reverse order, each module's tests in their own (a module-scoped cluster stays one run of
    tests). scripts/test.sh's pass beside pass 1 (the other Slurm release) runs so: pass 1's workers start with
    the largest modules, test_slurm.py's four-rank job first, and the pass beside started with the same job at the
    same moment (two 4-rank jobs and the wheel's pip at once: ~80 s each, the run's slowest Slurm tests)."""
    first = {m: k for k, m in enumerate(dict.fromkeys(i.module.__name__ for i in items))}
    items.sort(
        key=lambda i: -first[i.module.__name__]
    )  # sort is stable: within a module, as collected


# ---------------------------------------------------------------- side by side: `pytest -n 3 --dist loadgroup`
# scripts/test.sh runs the suite on pytest-xdist workers. The tests of a module with a module-scoped fixture (a Slurm
# cluster, a node's venv) go to one worker as a unit, which sets the fixture up once; every other test goes
# wherever a worker is free, the largest units first. Each worker brings up its own clusters (tests/slurm_cluster.py:
# one devcluster instance per worker). A test that must not share the machine (it times runs, or a cold compile takes
# both cores for a minute) is marked `alone`: test.sh runs those after the rest, one at a time.
# The scheduler is ours, not xdist's loadgroup: under pytest 9.2 loadgroup no longer groups anything (the nodeid
# suffix it relies on is dropped: pytest-dev/pytest-xdist#1386, seen here), and nothing fails to say so.


def shared_fixture_modules(folder: Path = ROOT / "tests") -> frozenset[str]:
    """The test modules (as nodeid prefixes, tests/test_x.py) that define a module-scoped fixture."""
    import ast

    found = set()
    for path in sorted(folder.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "scope"
                and getattr(node.value, "value", None) == "module"
            ):
                found.add(f"{folder.name}/{path.name}")
    return frozenset(found)


def split_scope(nodeid: str, shared: frozenset[str]) -> str:
    """The unit a test is scheduled in: its module when the module shares a fixture, an xdist_group's name when a
    test names one (pytest < 9.2 appends it to the nodeid), else the test alone."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    module = nodeid.split("::", 1)[0]
    return module if module in shared else nodeid


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: known only where it is installed
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared = shared_fixture_modules()

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return split_scope(nodeid, shared)

    return SharedFixtureScheduling(config, log)


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
    """A quick test starts no process and imports no torch: one that does fails here, naming the fix (torch and
    transformers cost seconds to import, most of the quick tier's time when six tests did)."""
    quick = request.node.get_closest_marker("quick")
    if quick:

        def refuse(*args, **kwargs):
            raise AssertionError(
                "a quick test (pytest -m quick) starts no process: mark this test "
                "@pytest.mark.process, or add its module to STARTS_PROCESSES in tests/conftest.py"
            )

        monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    had_torch = "torch" in sys.modules
    yield
    if quick and not had_torch and "torch" in sys.modules:
        pytest.fail(
            "a quick test (pytest -m quick) imports no torch: mark this test @pytest.mark.torch",
            pytrace=False,
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """HPCQA_TEST_CPU_LOG=FILE: one line per test, the CPU seconds of the processes it started and waited for (its
    CLI calls, the local executor's ranks; not a Slurm job's, whose processes are slurmd's), its wall seconds, when
    it started (epoch seconds) and on which xdist worker, then its id -- where the suite's CPU goes and how the
    workers filled the run, for scripts that sort it. The Slurm jobs' own lines come from tests/slurm_cluster.py
    (log_jobs_cpu), as each cluster goes down."""
    path = os.environ.get("HPCQA_TEST_CPU_LOG")
    if not path:
        yield
        return
    import resource
    import time

    def cpu() -> float:
        c, s = (
            resource.getrusage(resource.RUSAGE_CHILDREN),
            resource.getrusage(resource.RUSAGE_SELF),
        )
        return c.ru_utime + c.ru_stime + s.ru_utime + s.ru_stime

    before, t, start = cpu(), time.monotonic(), time.time()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(path, "a") as f:
        f.write(
            f"{cpu() - before:.1f} {time.monotonic() - t:.1f} {start:.1f} {worker} {item.nodeid}\n"
        )


def typed_view(**kw):
    """A JobView from plain dicts, each job file's dict read through its schema as the job folder's reader does: a
    dict that breaks its schema is left out (a rank's record) or None (results, progress), as status shows it."""
    from hpcqa.record.jobfiles import failure, fields, phase, progress, report, results
    from hpcqa.record.jobfiles.parts import Notice
    from hpcqa.record.status import JobView

    def ok(x):
        return None if isinstance(x, fields.Damaged) else x

    one = {"results": results.parse, "progress": progress.parse}
    many = {"ranks": report.parse, "failed": failure.parse, "phases": phase.parse}
    for k, parse in one.items():
        if isinstance(kw.get(k), dict):
            kw[k] = ok(parse(kw[k]))
    for k, parse in many.items():
        if kw.get(k):
            got = [ok(parse(x)) if isinstance(x, dict) else x for x in kw[k]]
            kw[k] = [x for x in got if x is not None]
    if kw.get("notices"):
        kw["notices"] = [
            fields.build(Notice, x) if isinstance(x, dict) else x for x in kw["notices"]
        ]
    return JobView(**kw)
