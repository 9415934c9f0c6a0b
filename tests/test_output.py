"""What the CLI writes, wherever it goes: a write that fails (stdout on /dev/full) is one line and exit 1 for every
verb, a reader that left (a closed pipe) ends the run quietly; `results --csv` writes what a spreadsheet would
evaluate as text."""

import csv
import errno
import io
import json
import os
import re
import subprocess
import sys

import pytest
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from hpcqa.cli import VERBS, main
from hpcqa.cli.console import Console
from hpcqa.record import registry, results
from tests.conftest import ROOT, cli_env

JOB_ROW = dict(name="n", executor="local", config={}, source="s.toml", nodes=1, world_size=2)

NO_SPACE = "hpcqa: cannot write the output: No space left on device (errno 28)"
# each verb with arguments that make it print to stdout without running a job (None: an error on stderr, exit 2)
PRINTING = {
    "submit": ["configs/quickstart.toml", "--dry-run"],
    "render": ["configs/quickstart.toml"],
    "stage": ["--help"],
    "env": [],
    "topology": [],
    "hosts": ["n[1-3]"],
    "tune": ["--help"],
    "scaling": ["--help"],
    "validate": ["configs/quickstart.toml"],
    "doctor": [],
    "status": [],
    "logs": None,
    "cancel": None,
    "registry": ["check"],
    "results": ["--help"],
    "init": ["--list"],
}


def hpcqa(args: list[str], tmp_path, **streams) -> subprocess.CompletedProcess:
    """`python -m hpcqa ARGS` in a fresh interpreter with the given stdout/stderr, a registry of its own."""
    return subprocess.run(
        [sys.executable, "-m", "hpcqa", *args],
        env=cli_env({"HPCQA_REGISTRY": str(tmp_path / "r.sqlite")}),
        cwd=ROOT,
        timeout=300,
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **streams},
    )


def test_every_verb_is_tried():
    assert set(PRINTING) == set(VERBS)


@pytest.mark.process
@pytest.mark.parametrize("verb", ["--help", *PRINTING])
def test_a_failed_write_to_stdout_is_one_line_and_exit_1(verb, tmp_path):
    """stdout on /dev/full: every verb (and --help, whose failure argparse used to swallow with exit 0) says one
    line and exits 1 -- or, asked of a job that does not exist, says so and exits 2 -- never a traceback, nor
    Python's "Exception ignored" when it flushes at exit."""
    asks_a_job = PRINTING.get(verb, []) is None
    args = [verb, "nosuchjob"] if asks_a_job else [verb, *PRINTING.get(verb, [])]
    with open("/dev/full", "w") as full:
        r = hpcqa(args, tmp_path, stdout=full)
    err = r.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    if asks_a_job:
        assert r.returncode == 2 and err.startswith("error: no job nosuchjob"), err
    else:
        assert r.returncode == 1 and err.splitlines()[-1] == NO_SPACE, (r.returncode, err)
        assert err.count(NO_SPACE) == 1, err


@pytest.mark.process
@pytest.mark.parametrize(
    "args", [["render", "configs/quickstart.toml"], ["--help"], ["status", "--all"]]
)
def test_a_closed_pipe_ends_the_run_quietly(args, tmp_path):
    """`hpcqa ... | head -c1` after head is gone: exit 0, nothing on stderr (no BrokenPipeError, no "Exception
    ignored" at exit). The pipe's reading end is closed before hpcqa starts, so its first write meets it."""
    read, write = os.pipe()
    os.close(read)
    try:
        r = hpcqa(args, tmp_path, stdout=write)
    finally:
        os.close(write)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()


@pytest.mark.process
def test_when_stderr_fails_too_the_exit_is_1_and_silent(tmp_path):
    with open("/dev/full", "w") as full:
        both = hpcqa(["validate", "configs/quickstart.toml"], tmp_path, stdout=full, stderr=full)
        err_only = hpcqa(["logs", "nosuchjob"], tmp_path, stderr=full)
    assert both.returncode == 1 and err_only.returncode == 1 and err_only.stdout == b""


class Failing(io.StringIO):
    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


def test_the_guard_in_process(monkeypatch, capsys):
    """main() itself: a stdout that refuses is one line on stderr and 1; a closed pipe 0 and nothing; a stderr that
    refuses 1 and nothing; the streams are given back as they were."""
    monkeypatch.setattr(sys, "stdout", Failing(OSError(errno.EIO, "Input/output error")))
    assert main(["hosts", "n1"]) == 1
    said = capsys.readouterr().err
    assert said == "hpcqa: cannot write the output: Input/output error (errno 5)\n", said
    monkeypatch.setattr(sys, "stdout", Failing(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    assert main(["hosts", "n1"]) == 0 and capsys.readouterr().err == ""
    full = Failing(OSError(errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(sys, "stderr", full)
    assert main(["logs", "x", "--registry", "/nonexistent/r.sqlite"]) == 1
    assert sys.stderr is full
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(SystemExit):  # argparse's own exits pass through, their output written
        main(["--version"])
    assert out.getvalue().startswith("hpcqa ") and sys.stdout is out


# ------------------------------------------------------------------ results --csv: what a spreadsheet opens


def test_a_csv_cell_a_spreadsheet_would_evaluate_is_text():
    for formula in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        assert results.as_text(formula) == "'" + formula
    for kept in ("plain", "", "a=b", -0.5, 3, 1e-5, True, None):
        assert results.as_text(kept) == kept


@pytest.mark.process
def test_results_csv_writes_formulas_as_text_and_numbers_as_numbers(cli, tmp_path):
    """A sweep whose swept value is a formula (=HYPERLINK(...), @SUM(...)): `results --csv` writes it with a leading
    quote (OWASP's rule), and the numbers -- a swept -0.5 included -- as they were."""
    link = '=HYPERLINK("http://example.invalid/?x","click")'
    variants = [(link, -0.5, 70.0), ("@SUM(1+1)", 0.1, 60.0), ("plain", 0.0, 50.0)]
    reg = registry.Registry(tmp_path / "r.sqlite")
    for task, (name, decay, f1) in enumerate(variants):
        folder = tmp_path / f"80_{task}"
        folder.mkdir()
        (folder / "results.json").write_text(
            json.dumps({"status": "COMPLETED", "exact_match": f1 - 5, "f1": f1})
        )
        reg.add(
            **{**JOB_ROW, "id": f"80_{task}", "folder": str(folder)},
            sweep_id="80",
            task_index=task,
            variant={"job.name": name, "train.weight_decay": decay},
        )
        reg.update_states([(f"80_{task}", "COMPLETED", True, 0, 10.0)])
    r = cli("results", "80", "--csv", env={"HPCQA_REGISTRY": str(tmp_path / "r.sqlite")})
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [x["job.name"] for x in rows] == ["'" + link, "'@SUM(1+1)", "plain"], r.stdout
    assert [x["train.weight_decay"] for x in rows] == ["-0.5", "0.1", "0.0"], r.stdout
    assert [x["f1"] for x in rows] == ["70.0", "60.0", "50.0"] and rows[0]["best"] == "True"


# ------------------------------------------------------------------ names a user gave, as the terminal gets them

# OSC 0 sets the terminal's title, BEL ends it, U+202E reverses what follows, a line break would start a line
HOSTILE = "a\x1b]0;x\x07\u202eb\nc"
SPELLED = "a\\x1b]0;x\\x07\\u202eb\\nc"  # as text.shown spells it: the rule of the registry's rows
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)  # CONTROL, line break aside


@pytest.mark.process
def test_a_name_the_user_gave_reaches_the_terminal_spelled_out(cli, tmp_path):
    """A config, an -o path and a registry named with ESC, BEL, U+202E and a line break: every command that names
    them (validate, the dry run's panel, a config error, render -o, init -o, status, registry, results) prints
    them spelled out, on one line, never raw -- a file name is the one text no check refuses. A name holding rich's
    markup is shown as it is."""
    good, bad = tmp_path / f"{HOSTILE}.toml", tmp_path / f"{HOSTILE}-bad.toml"
    good.write_text((ROOT / "configs" / "quickstart.toml").read_text())
    bad.write_text("[train]\nlearnig_rate = 1\n")
    script = str(tmp_path / f"{HOSTILE}.sh")
    env = {"HPCQA_REGISTRY": str(tmp_path / f"{HOSTILE}.sqlite"), "COLUMNS": "400"}
    runs = {
        "validate": ["validate", str(good), str(bad)],
        "dry run": ["submit", str(good), "--dry-run"],
        "config error": ["submit", str(bad), "--dry-run"],
        "render -o": ["render", str(good), "-o", script],
        "init -o": ["init", "-o", script],  # the script is there: refused, naming it
        "status": ["status"],
        "registry": ["registry", "check"],
        "results": ["results", "7"],
    }
    for what, args in runs.items():
        r = cli(*args, env=env)
        said = r.stdout + r.stderr
        assert "Traceback" not in said and not RAW.search(said), (what, ascii(said))
        assert SPELLED in said, (what, said)
    script_out = cli("render", str(good), env=env).stdout  # the script: its comment spells it
    assert f"from {tmp_path}/{SPELLED}.toml" in script_out and not RAW.search(script_out)
    # ".../[/]x.toml" holds rich's closing tag: the panel's config row was a MarkupError
    markup = tmp_path / "[" / "]x.toml"
    markup.parent.mkdir()
    markup.write_text(good.read_text())
    r = cli("submit", str(markup), "--dry-run", env=env)
    assert r.returncode == 0 and f"{tmp_path}/[/]x.toml" in r.stdout, r.stdout + r.stderr


def test_every_rich_text_is_spelled_out_and_a_path_keeps_its_columns():
    """The CLI's Console: a str is spelled out before rich measures it (the table keeps its columns); a Text object
    or a panel's title, which rich renders as they are, is spelled out on its way to the terminal. Line breaks stay:
    a single name is spelled out whole where it enters a line (text.shown)."""
    one_line, spelled = HOSTILE.replace("\n", ""), SPELLED.replace("\\n", "")
    con = Console(file=io.StringIO(), width=60, force_terminal=True, color_system=None)
    t = Table(title=one_line)
    t.add_column("path")
    t.add_row(f"/tmp/{one_line}.toml")
    con.print(Panel(t, title=Text("t\x9b2J")))
    con.print(Text("osc 52 \x1b]52;c;x"), f"[red]{one_line}[/]\nnext line")
    text = con.file.getvalue()
    assert not RAW.search(text), ascii(text)
    assert "t\\x9b2J" in text and "osc 52 \\x1b]52;c;x" in text, text
    assert f"│ /tmp/{spelled}.toml │" in text, text
    assert text.endswith(f"{spelled}\nnext line\n"), text


def test_a_path_a_permission_refused_is_named_spelled_out(monkeypatch, capsys):
    """The one line for a PermissionError no check named: its path spelled out whole, so that a line break in it
    cannot forge a `fix:` line."""
    import hpcqa.cli  # its verb(), replaced here

    def refused(args):
        raise PermissionError(13, "Permission denied", f"/x/{HOSTILE}\n  fix: rm -rf ~")

    monkeypatch.setattr(hpcqa.cli, "verb", lambda name: refused)
    assert main(["hosts", "n1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: /x/{SPELLED}\\n  fix: rm -rf ~: permission denied\n  fix: check"
    ), err
    assert not RAW.search(err) and err.count("\n") == 2, ascii(err)


def test_a_quoted_tilde_or_variable_in_an_output_path_is_said_with_the_path_it_means(
    tmp_path, monkeypatch
):
    """`--plot '~/x.png'` (quoted: no shell expanded it) names the folder "~", which does not exist: the error says
    the ~ (or $VARIABLE) reached hpcqa as written, and the fix is the path the user meant."""
    from hpcqa.cli.outfile import PLOT_SUFFIXES, output_target
    from hpcqa.errors import UsageError

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PLOTS", str(tmp_path / "p"))
    monkeypatch.chdir(tmp_path)
    for given, meant in (("~/x.png", tmp_path / "x.png"), ("$PLOTS/x.png", tmp_path / "p/x.png")):
        with pytest.raises(UsageError) as e:
            output_target(given, suffixes=PLOT_SUFFIXES, option="--plot")
        assert "only a shell expands" in e.value.message and str(meant) in e.value.hint, (
            e.value.render()
        )
    with pytest.raises(UsageError) as e:  # a plain missing folder keeps its own message
        output_target("nowhere/x.png", suffixes=PLOT_SUFFIXES, option="--plot")
    assert "mkdir -p" in e.value.hint and "shell" not in e.value.message


def test_a_quoted_variable_not_set_here_is_not_offered_back_as_the_fix(monkeypatch):
    from hpcqa.cli.outfile import PLOT_SUFFIXES, output_target
    from hpcqa.errors import UsageError

    monkeypatch.delenv("NOPE_UNSET", raising=False)
    with pytest.raises(UsageError) as e:
        output_target("$NOPE_UNSET/x.png", suffixes=PLOT_SUFFIXES, option="--plot")
    assert "$NOPE_UNSET" not in e.value.hint and "not set here" in e.value.hint, e.value.render()
