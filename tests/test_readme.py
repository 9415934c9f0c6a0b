"""The README's examples against what the commands print: every transcript block (lines starting with `$ `) is run
as written and its output compared line by line (`...` in an expected line stands for any text); the numbers the
README states about output are measured; every `hpcqa` command line of its usage block parses."""

import os
import re
import shlex
import subprocess
import sys

import pytest

from hpcqa import cli as climod
from tests import pty_term
from tests.conftest import ROOT

# the README and the documentation pages: an example is checked wherever it lives
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README = "\n".join(p.read_text() for p in PAGES)


def blocks() -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", README, re.M | re.S)


def transcripts() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each `$ ` command in the README; a command runs on while its quotes
    are open or its line ends with a backslash."""
    out = []
    for block in blocks():
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            command = lines[i][2:]
            i += 1
            while command.endswith("\\") or not _complete(command):
                command += "\n" + lines[i]
                i += 1
            expected = []
            while i < len(lines) and not lines[i].startswith("$ "):
                expected.append(lines[i])
                i += 1
            out.append((command, expected))
    return out


def _complete(command: str) -> bool:
    try:
        shlex.split(command)
        return True
    except ValueError:
        return False


def matches(expected: str, actual: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in expected.rstrip().split("..."))
    return re.fullmatch(pattern, actual.rstrip()) is not None


TRANSCRIPTS = transcripts()


def test_the_readme_has_transcripts():
    assert len(TRANSCRIPTS) >= 3, TRANSCRIPTS


@pytest.mark.parametrize(
    "command,expected", TRANSCRIPTS, ids=[c.split("\n")[0][:60] for c, _ in TRANSCRIPTS]
)
def test_each_transcript_prints_what_the_readme_shows(command, expected):
    env = {
        k: v for k, v in os.environ.items() if k not in ("COLUMNS", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PATH"] = (
        os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    )  # `hpcqa`, `python3` as installed
    r = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    actual = (r.stdout + r.stderr).splitlines()
    assert len(actual) == len(expected) and all(matches(e, a) for e, a in zip(expected, actual)), (
        "\n".join(["README:", *expected, "printed:", *actual])
    )


def test_the_dry_run_line_count_the_readme_states():
    stated = int(
        re.search(
            r"`configs/squad_spr.toml` dry run is under (\d+) lines on an 80-column terminal",
            README,
        )[1]
    )
    code, out = pty_term.hpcqa("submit", "configs/squad_spr.toml", "--dry-run", cwd=ROOT)
    assert code == 0 and len(out.rstrip("\n").splitlines()) < stated, len(out.splitlines())


def test_every_hpcqa_line_of_the_usage_block_parses():
    """`hpcqa ...` lines with their placeholders filled in (JOB -> 123, [a|b] -> a, [--x] dropped)."""
    usage = next(
        b for b in blocks() if b.startswith("hpcqa submit configs/squad_spr.toml --dry-run ")
    )
    parser = climod.build_parser()
    for line in usage.splitlines():
        if not line.startswith("hpcqa "):
            continue
        text = " ".join(shlex.split(line, comments=True))
        text = re.sub(r"\[([^\]|]*)\|[^\]]*\]", r"\1", text)  # [a|b] -> a
        text = re.sub(r"\s\[[^\]]*\]", "", text)  # optional parts
        text = re.sub(r"(\w+)\|\w+", r"\1", text)  # check|recover -> check
        text = text.replace("JOB", "123").replace("CONFIG", "configs/quickstart.toml")
        try:
            parser.parse_args(shlex.split(text, comments=True)[1:])
        except SystemExit as e:
            raise AssertionError(f"README usage line does not parse: {line!r} ({text!r})") from e
