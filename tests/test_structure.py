"""The module map holds: one owner for the job folder's file names, for subprocess, and short functions."""

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "hpcqa"
# Every file name of the job folder (see hpcqa/jobdir.py); only jobdir.py may spell them.
JOB_FOLDER_NAMES = ("results.json", "progress.json", "predictions.json", "null_odds.json", "plan.json", "rank-", "task-", "_log.",
                    ".failed")
JOB_FOLDER_DIRS = {"plans", "checkpoints", "hostfile"}   # as whole strings (they are also English words)
SUBPROCESS_OWNERS = {"slurmcli.py"}


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def docstrings(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_job_folder_names_are_spelled_only_in_jobdir():
    offenders = []
    for path, tree in modules():
        if path.name == "jobdir.py":
            continue
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                if any(n in node.value for n in JOB_FOLDER_NAMES) or node.value in JOB_FOLDER_DIRS:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not offenders, "job-folder names outside hpcqa/jobdir.py:\n" + "\n".join(offenders)


def test_only_the_scheduler_module_and_the_executors_import_subprocess():
    offenders = []
    for path, tree in modules():
        allowed = path.name in SUBPROCESS_OWNERS or path.parent.name == "executors"
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) else []
            if "subprocess" in names and not allowed:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_no_function_over_60_lines():
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, tree in modules() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60]
    assert not long, long


def test_the_structure_checks_can_fail(tmp_path):
    """The checks above read real code: a planted offender is found."""
    tree = ast.parse('def f():\n    """results.json in a docstring is fine"""\n    return "results.json"\n')
    skip = docstrings(tree)
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in skip and any(name in n.value for name in JOB_FOLDER_NAMES)]
    assert found == ["results.json"]
