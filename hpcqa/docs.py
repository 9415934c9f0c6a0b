"""`python -m hpcqa.docs`: rewrite the documentation's generated parts (docs/configuration.md, docs/architecture.md,
the test commands' timing table in README.md and docs/development.md)
-- the config reference from the schema in
config.py, the layout from the maps in the packages' docstrings (each folder's __init__.py names its modules: a
structure test holds every module to it) -- so neither can drift from the code."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

from hpcqa import fsutil
from hpcqa.core.config import reference_rows
from hpcqa.errors import UsageError

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"
LAYOUT_START, LAYOUT_END = "<!-- layout:start -->", "<!-- layout:end -->"
TIMINGS_START, TIMINGS_END = "<!-- timings:start -->", "<!-- timings:end -->"
PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
# "name.py   what it is" in a folder's docstring, at the map's indent (`ruff format` dedents a docstring's body:
# either is read); its continuation lines are indented deeper
MAP_LINE = re.compile(r"^( *)(\S+(?:\.py|/))\s{2,}\S")
# the checkout's other folders, listed by file (what the documentation's layout names of them is what is there)
OTHERS = {
    "sbatch_templates": "the job scripts' templates (read by render)",
    "docs": "the documentation pages (mkdocs.yml builds them into a site)",
    "configs": "example configs",
    "examples": "user programs and the Python API, run under hpcqa",
    "scripts": "install, test, the local Slurm test clusters, the lock file",
    "benchmarks": "scripts that print numbers (BENCHMARKS.md)",
}


def _text(path: Path) -> str:
    """A file of the checkout (a folder map, timings.json, a docs page), read through the one door."""
    return fsutil.read_text(path, 16 << 20, follow=True)


def table() -> str:
    """One table per config section, each under its own heading (`## [job]` ...: the site's sidebar lists them)."""
    lines: list[str] = []
    section = None
    for key, tp, default, help_ in reference_rows():
        if key.split(".", 1)[0] != section:
            section = key.split(".", 1)[0]
            lines += [
                *([""] if lines else []),
                f"## [{section}]",
                "",
                "| key | type | default | meaning |",
                "|---|---|---|---|",
            ]
        lines.append(f"| `{key}` | {tp} | `{default}` | {help_.replace('|', '/')} |")
    return "\n".join(lines)


def folder_map(folder: Path) -> dict[str, list[str]]:
    """A package's map, from its __init__.py docstring: entry name (`x.py`, `sub/`) -> its lines."""
    doc = ast.get_docstring(ast.parse(_text(folder / "__init__.py")), clean=False) or ""
    out: dict[str, list[str]] = {}
    current: list[str] = []
    indent = -1  # the map's, from its first line
    for line in doc.splitlines():
        m = MAP_LINE.match(line)
        if m and indent in (-1, len(m.group(1))):
            indent = len(m.group(1))
            current = out.setdefault(m.group(2), [])
            current.append(line[indent:])
        elif current and line.strip() and len(line) - len(line.lstrip(" ")) > indent + 1:
            current.append(line[indent:])
        elif out:
            break  # the map is one block: what follows it is prose
    return out


def unmapped(folder: Path) -> list[str]:
    """Modules and sub-packages of `folder` its map does not name."""
    named = set(folder_map(folder))
    present = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"} | {
        f"{p.parent.name}/" for p in folder.glob("*/__init__.py")
    }
    return sorted(present - named)


def _tree(folder: Path, depth: int) -> list[str]:
    lines = []
    for name, text in folder_map(folder).items():
        pad = "  " * depth
        lines += [pad + t for t in text]
        if name.endswith("/") and (folder / name / "__init__.py").exists():
            lines += _tree(folder / name, depth + 1)
    return lines


def layout(root: Path = ROOT) -> str:
    lines = ["hpcqa/", *_tree(root / "hpcqa", 1)]
    for name, what in OTHERS.items():
        files = sorted(
            p.name for p in (root / name).iterdir() if p.is_file() and not p.name.startswith(".")
        )
        lines.append(f"{name + '/':<18}{what}:")
        row = " " * 18
        for f in files:
            if len(row) + len(f) + 2 > 118:
                lines.append(row.rstrip().rstrip(","))
                row = " " * 18
            row += f + ", "
        lines.append(row.rstrip().rstrip(","))
    tests = sorted((root / "tests").glob("test_*.py"))
    lines.append(
        f"{'tests/':<18}{len(tests)} test modules (test_*.py: unit, golden scripts, hostile text, real Slurm, "
        "structure) and their helpers"
    )
    return "\n".join(lines)


def timings(root: Path = ROOT) -> str:
    """The test commands' table (what each runs, how long it took, where and when), from docs/timings.json: one
    source for the README and docs/development.md, so the two cannot say different things."""
    data = json.loads(_text(root / "docs" / "timings.json"))
    lines = [
        f"Measured on {data['machine']}, {data['date']} (docs/timings.json):",
        "",
        "| command | what | time |",
        "|---|---|---|",
    ]
    lines += [f"| `{r['command']}` | {r['what']} | {r['time']} |" for r in data["rows"]]
    return "\n".join(lines)


def _replace(text: str, start: str, end: str, body: str, readme: str) -> str:
    if start not in text or end not in text:
        raise UsageError(
            f"{readme}: markers {start} / {end} not found",
            "put them back around the generated part",
        )
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


REFERENCE_PAGE, LAYOUT_PAGE = "docs/configuration.md", "docs/architecture.md"


def main(docs: str = "docs") -> int:
    """Rewrite the generated parts of the documentation pages under `docs` (the checkout's docs/)."""
    for page, start, end, body in (
        (Path(docs) / "configuration.md", START, END, table()),
        (Path(docs) / "architecture.md", LAYOUT_START, LAYOUT_END, f"```\n{layout()}\n```"),
        (Path(docs) / "development.md", TIMINGS_START, TIMINGS_END, timings()),
        (Path(docs).parent / "README.md", TIMINGS_START, TIMINGS_END, timings()),
    ):
        fsutil.atomic_write_text(page, _replace(_text(page), start, end, body, str(page)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(*sys.argv[1:]))
    except UsageError as e:
        print(e.render(), file=sys.stderr)
        sys.exit(e.exit_code)
