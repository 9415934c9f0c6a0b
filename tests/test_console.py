"""What a user sees, on a real 80-column pseudo-terminal (tests/pty_term.py), and the rough edges of issue 23."""

import argparse
import json
import re

import pytest

from hpcqa import cli as climod
from tests import pty_term
from tests.conftest import ROOT
from tests.test_nodes import socket_major, write_tree


def test_dry_run_shows_cpu_sets_as_ranges_at_80_columns():
    code, out = pty_term.hpcqa("submit", "configs/squad_spr.toml", "--dry-run", cwd=ROOT)
    assert code == 0, out
    lines = out.splitlines()
    start = next(
        i for i, line in enumerate(lines) if "sbatch script (as it will be submitted)" in line
    )
    end = next(i for i, line in enumerate(lines) if i > start and set(line.strip()) == {"─"})
    assert max(len(line.rstrip()) for line in lines[:start] + lines[end:]) <= 80
    script = json.loads(
        pty_term.hpcqa(
            "submit", "configs/squad_spr.toml", "--dry-run", "--json", cwd=ROOT, cols=400
        )[1]
    )["sbatch"]
    # the script between the rules is the script, line for line: not wrapped or framed, so it can be copied
    token = re.compile(r"%j-[0-9a-f]{6}")  # each submission's own token
    assert [token.sub("%j-T", line.rstrip()) for line in lines[start + 1 : end]] == [
        token.sub("%j-T", line.rstrip()) for line in script.splitlines()
    ]
    assert "proclist=[0-55]" in out and "proclist=[56-111]" in out
    assert not re.search(r"\d+,\d+,\d+,\d+,\d+", out.split("sbatch script")[0]), (
        "a CPU list left unranged"
    )
    assert "ranks: RANK = NODE_RANK x 2 + LOCAL_RANK on each of 4 nodes" in out
    assert re.search(r"│ 0\s+│ 0,2,4,6\s+│ 0-55", out) and re.search(
        r"│ 1\s+│ 1,3,5,7\s+│ 56-111", out
    )
    assert len(lines) < 100, len(lines)


def test_json_keeps_the_exact_values(cli):
    r = cli("submit", "configs/squad_spr.toml", "--dry-run", "--json")
    d = json.loads(r.stdout)
    assert len(d["ranks"]) == 8
    assert "proclist=[0,1,2,3," in d["ranks"][0]["env"]["KMP_AFFINITY"]


def test_every_option_and_argument_has_help():
    missing = []
    for action in climod.build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += [
                    f"{name} {' '.join(a.option_strings) or a.dest}"
                    for a in sub._actions
                    if not isinstance(a, argparse._HelpAction) and not a.help
                ]
    assert missing == []


def test_topology_of_a_saved_node_uses_that_nodes_cpus(tmp_path, cli):
    """Without --allowed, a saved tree of a 2 x 56-core node is read whole, not cut to this machine's 2 CPUs."""
    tree = write_tree(tmp_path, socket_major(2, 56, 2))
    r = cli("topology", "--sysfs", str(tree), "--json")
    assert r.returncode == 0, r.stderr
    node = json.loads(r.stdout)["node"]
    assert [s["cores"] for s in node["sockets"]] == [56, 56] and node["allowed"] == "0-223"
    r = cli("topology", "configs/squad_spr.toml", "--sysfs", str(tree), "--json")
    ranks = json.loads(r.stdout)["ranks"]
    assert [len(x["cpus"]) for x in ranks] == [56, 56]


def test_topology_of_a_config_shows_each_ranks_environment(tmp_path):
    tree = write_tree(tmp_path, socket_major(2, 8, 2))
    code, out = pty_term.hpcqa("topology", "configs/squad_spr.toml", "--sysfs", str(tree), cwd=ROOT)
    assert code == 0, out
    assert "environment of each local rank" in out
    assert re.search(r"KMP_AFFINITY\s+│ granularity=fine,proclist=\[0-7\]", out), out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_sweep_table_shows_whole_keys_once_per_variant_and_what_was_assumed(tmp_path):
    broken = tmp_path / "slurm.conf"
    broken.write_text(
        ""
    )  # scontrol fails at once (a missing file would make it retry for a minute)
    code, out = pty_term.hpcqa(
        "submit",
        "configs/sweep_quickstart.toml",
        "--dry-run",
        "--set",
        "cluster.executor=slurm",
        cwd=ROOT,
        env={"SLURM_CONF": str(broken)},
    )
    assert code == 0, out
    table = out.split("MaxArraySize assumed")[0]
    assert (
        "learning_rate" in table
        and "per_device_train_batch_size" in table
        and "num_train_epochs" in table
    )
    assert "…" not in table
    assert (
        out.count("--array=0-4%2") == 2
    )  # once in the arrays' list, once in the script, not on every row
    assert "MaxArraySize 1001 assumed: Slurm could not be asked" in " ".join(out.split())
    before_script = out.split("sbatch script of array 0")[
        0
    ]  # the script itself is printed unwrapped, to copy
    assert max(len(line) for line in before_script.splitlines()) <= 80


def test_render_prints_the_plans_warnings(cli):
    r = cli(
        "render",
        "configs/squad_spr.toml",
        "--set",
        "launch.openmp=iomp",
        "--set",
        "launch.malloc=jemalloc",
    )
    assert r.returncode == 0 and r.stdout.startswith("#!/bin/bash")
    assert "warning: iomp not found on this host; each rank looks for it on its node" in r.stderr, (
        r.stderr
    )


def _sweep_registry(tmp_path, executor="local"):
    from hpcqa.record import registry

    reg = registry.Registry(tmp_path / "r.sqlite")
    reg.add_many(
        dict(
            id=f"900_{i}",
            name="sw",
            executor=executor,
            folder=str(tmp_path / f"t{i}"),
            config={},
            source="x",
            nodes=1,
            world_size=2,
            sweep_id="900",
            task_index=i,
            variant={"seed": i},
        )
        for i in range(3)
    )
    reg.add(
        id="42",
        name="single",
        executor=executor,
        folder=str(tmp_path / "j42"),
        config={},
        source="x",
        nodes=1,
        world_size=2,
    )
    return str(reg.path)


def test_status_counts_a_sweep_as_one_job_listed_or_expanded(tmp_path):
    path = _sweep_registry(tmp_path)
    code, out = pty_term.hpcqa("status", "--registry", path, cwd=ROOT)
    assert code == 0 and "2 job(s): 2 local (3 sweep task(s))" in out, out
    code, out = pty_term.hpcqa("status", "900", "--registry", path, cwd=ROOT)
    assert code == 0 and "2 job(s)" not in out and "1 job(s): 1 local (3 sweep task(s))" in out, out
    assert "900_2" in out


def test_status_of_a_sweep_task_is_its_detail_view(tmp_path):
    path = _sweep_registry(tmp_path)
    code, one = pty_term.hpcqa("status", "900_1", "--registry", path, cwd=ROOT)
    code42, single = pty_term.hpcqa("status", "42", "--registry", path, cwd=ROOT)
    assert code == code42 == 0
    assert (
        "─ job 900_1 ─" in one and "─ job 42 ─" in single
    )  # the same detail panel as a plain job's
    assert "job(s)" not in one and "│ state" in one


def test_no_such_job_is_said_alike(tmp_path, cli):
    path = _sweep_registry(tmp_path)
    r1 = cli("status", "123", "--registry", path)
    r2 = cli("cancel", "123", "--registry", path)
    assert r1.returncode == r2.returncode == 2
    assert f"no job 123 in {path}" in r1.stderr and f"no job 123 in {path}" in r2.stderr


def test_watch_says_when_and_that_slurm_is_not_answering(tmp_path):
    path = _sweep_registry(tmp_path, executor="slurm")
    broken = tmp_path / "slurm.conf"
    broken.write_text("")
    code, out = pty_term.hpcqa(
        "status",
        "--watch",
        "--registry",
        path,
        cwd=ROOT,
        env={"SLURM_CONF": str(broken)},
        interrupt_after=7,
    )
    headers = re.findall(
        r"hpcqa status at \d\d:\d\d:\d\d, every 5 s \(Ctrl-C stops\); Slurm not answering since "
        r"\d\d:\d\d:\d\d, still asking",
        " ".join(out.split()),
    )
    assert len(headers) >= 1, out
    assert "Traceback" not in out


def test_quickstart_on_an_80_column_terminal(tmp_path):
    """The README's first command as a user's terminal shows it: the progress bar (rich, on a tty) and the final
    lines, nothing wider than the terminal."""
    from tests.test_local_e2e import TINY

    code, out = pty_term.hpcqa(
        "submit",
        "configs/quickstart.toml",
        *TINY,
        "--set",
        "train.max_steps=12",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        cwd=ROOT,
        env={"HPCQA_CACHE": str(tmp_path / "cache"), "HPCQA_REGISTRY": str(tmp_path / "r.sqlite")},
    )
    assert code == 0, out
    lines = [line.rstrip() for line in out.splitlines()]
    # nothing wider than the terminal but a path or command to copy (kept whole: a terminal wraps it)
    wide = [
        line
        for line in lines
        if len(line) > 80 and not any("/" in t and len(t) > 30 for t in line.split())
    ]
    assert not wide, wide
    bar = [line for line in lines if "12/12 steps" in line]
    assert bar and "━" in bar[-1] and "loss" in bar[-1], out[-3000:]  # the bar, drawn and finished
    tail = "\n".join(lines[-12:])
    assert "COMPLETED" in tail and re.search(r"EM \d+\.\d\d\s+F1 \d+\.\d\d", tail), tail
    assert "samples/s over 2 rank(s)" in tail and "backend gloo; bf16 False" in tail


def _too_wide(out: str, cols: int = 80) -> list[str]:
    """Lines wider than the terminal, but for a line that is one word (a path or value to copy, kept whole)."""
    return [
        line
        for line in (x.rstrip() for x in out.splitlines())
        if len(line) > cols and len(line.split()) > 1
    ]


def test_every_help_and_the_usual_messages_fit_80_columns(tmp_path):
    """On a real 80-column terminal: the top-level and every subcommand's --help, errors with their fix lines, render's
    warnings, doctor, a typo'd command. Wrapped lines keep their indent under the text."""
    commands = [["--help"]] + [[name, "--help"] for name in climod.VERBS]
    commands += [
        ["submit", "configs/quickstart.toml", "--set", "train.learning_rat=1e-4", "--dry-run"],
        ["submit", "configs/quickstart.toml", "--set", "train.warmup=1", "--dry-run"],
        ["render", "configs/squad_spr.toml", "-o", str(tmp_path / "job.sbatch")],
        [
            "render",
            "configs/squad_spr.toml",
            "--kind",
            "pytorchjob",
            "-o",
            str(tmp_path / "job.yaml"),
        ],
        ["validate", "configs/quickstart.toml", "configs/squad_spr.toml"],
        ["doctor"],
        ["sumbit"],
        ["topology", "configs/squad_spr.toml"],
    ]
    for args in commands:
        code, out = pty_term.hpcqa(
            *args, cwd=ROOT, env={"HPCQA_REGISTRY": str(tmp_path / "r.sqlite")}
        )
        assert code in (0, 1, 2) and "Traceback" not in out, (args, out)
        assert not _too_wide(out), (args, _too_wide(out))
    code, out = pty_term.hpcqa(
        "submit", "configs/quickstart.toml", "--set", "train.zzz=1", "--dry-run", cwd=ROOT
    )
    lines = out.splitlines()
    fix = next(i for i, line in enumerate(lines) if line.startswith("  fix: "))
    assert lines[fix + 1].startswith("       ") and "warmup_ratio" in out, (
        out
    )  # the list wraps under its text
    code, out = pty_term.hpcqa(
        "submit", "configs/quickstart.toml", "--set", "train.warmup=1", "--dry-run", cwd=ROOT
    )
    assert "fix: rename it to train.warmup_ratio" in out, out
    code, out = pty_term.hpcqa(
        "render", "configs/squad_spr.toml", "-o", str(tmp_path / "j.sbatch"), cwd=ROOT
    )
    warned = [i for i, line in enumerate(out.splitlines()) if line.startswith("warning: ")]
    assert warned and any(out.splitlines()[i + 1].startswith("  ") for i in warned), out


def test_piped_messages_stay_one_line_each(cli):
    """Scripts and grep read errors and warnings one per line: only a terminal gets them wrapped."""
    r = cli("submit", "configs/quickstart.toml", "--set", "train.warmup=1", "--dry-run")
    assert r.returncode == 2
    assert [line[:7] for line in r.stderr.splitlines()] == ["error: ", "  fix: "], r.stderr


def test_the_bar_gets_the_last_word_of_a_job_that_ends_between_two_polls(tmp_path):
    """A short job writes its last progress (12/12, evaluating) and ends within one poll: the follower still passes
    that last line on, so the bar a user is left with says 12/12, not the step it saw a second earlier."""
    from hpcqa.executors import common
    from hpcqa.record.jobdir import JobDir

    jd = JobDir(tmp_path)
    seen, polls = [], []

    def is_done() -> bool:
        polls.append(1)
        if len(polls) == 1:
            jd.progress.write_text(json.dumps({"phase": "training", "step": 10, "total_steps": 12}))
            return False
        jd.progress.write_text(json.dumps({"phase": "evaluating", "step": 12, "total_steps": 12}))
        return True  # the job wrote its last line and ended before the next poll

    common.watch(jd, is_done, seen.append, poll_s=0.01)
    assert [p.step for p in seen] == [10, 12], seen


@pytest.mark.slow
def test_the_bar_of_a_program_shows_its_phase_or_the_trainers_steps_never_none(
    tmp_path, tmp_path_factory
):
    """On a terminal: a program that writes no Trainer files shows its phase and the elapsed time (no step count,
    no `None`, no bar claiming it is done); a run_qa.py-shaped Trainer script shows the Trainer's own step count."""
    from tests.conftest import run_qa_like

    (tmp_path / "sleepy.py").write_text("import time\ntime.sleep(4)\n")
    env = {"HPCQA_REGISTRY": str(tmp_path / "r.sqlite")}
    code, out = pty_term.hpcqa(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={tmp_path / 'a'}",
        "--",
        "python",
        str(tmp_path / "sleepy.py"),
        cwd=ROOT,
        env=env,
    )
    assert code == 0, out
    bar = [line for line in out.splitlines() if line.startswith("job ") and "[" in line]
    assert bar and "None" not in out and "steps" not in " ".join(bar), out[-2000:]
    # the elapsed time, at least the program's 4 s less the bar's refresh (how much more is the machine's load)
    assert any(
        "[command]" in line
        and (m := re.search(r"\b0:(\d\d):(\d\d)\b", line))
        and int(m[1]) * 60 + int(m[2]) >= 3
        for line in bar
    ), bar
    # the Trainer's files: step and total from trainer_state.json
    prog, argv = run_qa_like(tmp_path, tmp_path_factory)
    code, out = pty_term.hpcqa(
        "submit",
        str(ROOT / "configs/quickstart.toml"),
        "--set",
        f"job.output_dir={tmp_path / 'b'}",
        "--",
        *argv,
        "--max_steps",
        "6",
        "--save_steps",
        "3",
        cwd=prog,
        env=env,
    )
    assert code == 0, out[-3000:]
    assert "None" not in out and any("6/6 steps" in line for line in out.splitlines()), out[-3000:]


def test_validate_and_the_dry_runs_tokens_fit_80_columns():
    """validate's lines fit (a long one goes on under its path); the dry run keeps a value whole on a line of its
    own (KMP_AFFINITY's proclist), and a warning wraps under its own text, as render's do."""
    configs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.toml"))
    code, out = pty_term.hpcqa("validate", *configs, cwd=ROOT)
    assert code == 0 and not _too_wide(out) and out.count("ok  configs/") == len(configs) >= 5, out
    code, out = pty_term.hpcqa("submit", "configs/squad_spr.toml", "--dry-run", cwd=ROOT)
    assert code == 0, out
    assert (
        "granularity=fine,proclist=[0-55],explicit" in out
        and "granularity=fine,proclist=[56-111],explicit" in out
    )
    lines = out.splitlines()
    warned = [i for i, line in enumerate(lines) if line.startswith("warning: launch.ccl_workers")]
    assert warned and lines[warned[0] + 1].startswith(" " * len("warning: ")), lines[
        warned[0] : warned[0] + 2
    ]
