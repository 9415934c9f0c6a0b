"""Bad input, as users meet it: each case exits 2 with one line naming what and where plus a fix,
no traceback, nothing queued or started, and the registry untouched."""

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcqa.core import config
from hpcqa.errors import ConfigError
from hpcqa.record import registry, registryfix
from tests.conftest import ROOT

OK_ROW = dict(
    id="7", name="n", executor="local", folder="/x", config={}, source="s", nodes=1, world_size=2
)


def assert_clean_error(r, *needles):
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and any(
        x.strip().startswith("fix: ") for x in lines[1:]
    ), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def damaged(tmp_path, kind):
    path = tmp_path / "registry.sqlite"
    if kind == "garbage":
        path.write_bytes(b"\x00not sqlite at all\xff" * 200)
    elif kind == "truncated":
        reg = registry.Registry(path)
        reg.add_many([{**OK_ROW, "id": str(i)} for i in range(300)])
        reg.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        reg.db.close()
        data = path.read_bytes()
        path.write_bytes(data[:100])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    return path


@pytest.mark.parametrize("kind", ["garbage", "truncated", "empty", "directory"])
@pytest.mark.parametrize(
    "verb", [["status"], ["logs", "7"], ["cancel", "7"], ["results", "7"], ["registry", "check"]]
)
def test_damaged_registry_is_one_clear_line(cli, tmp_path, kind, verb):
    path = damaged(tmp_path, kind)
    before = path.read_bytes() if path.is_file() else None
    r = cli(*verb, "--registry", str(path))
    assert_clean_error(r, str(path))
    assert (path.read_bytes() if path.is_file() else None) == before


@pytest.mark.parametrize("kind", ["garbage", "empty", "directory"])
def test_submit_with_a_damaged_registry_starts_nothing(cli, tmp_path, kind):
    path = damaged(tmp_path, kind)
    out = tmp_path / "out"
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(out))}",
        "--set",
        'model.name_or_path="builtin:tiny-bert"',
        env={"HPCQA_REGISTRY": str(path)},
    )
    assert_clean_error(r, str(path))
    assert not out.exists()


def test_recover_keeps_the_damaged_file_and_saves_the_rows(cli, tmp_path):
    path = tmp_path / "registry.sqlite"
    reg = registry.Registry(path)
    reg.add_many([{**OK_ROW, "id": str(i)} for i in range(3)])
    reg.db.close()  # (an open connection's WAL would still hold readable pages)
    r = cli("registry", "recover", "--registry", str(path))
    assert r.returncode == 0 and "nothing to recover" in r.stdout
    path.write_bytes(b"garbage" * 100)
    r = cli("registry", "recover", "--registry", str(path))
    assert r.returncode == 0, r.stderr
    kept = list(tmp_path.glob("registry.sqlite.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"garbage" * 100
    assert cli("registry", "check", "--registry", str(path)).stdout.strip().endswith("ok, 0 job(s)")


def test_recover_reads_back_what_it_can(tmp_path):
    path = tmp_path / "registry.sqlite"
    reg = registry.Registry(path)
    reg.add_many([{**OK_ROW, "id": str(i)} for i in range(5)])
    reg.db.close()
    new, aside, n, bad = registryfix.recover(path)
    assert n == 5 and bad == 0 and aside.exists() and len(registry.Registry(new).jobs()) == 5
    assert sqlite3.connect(aside).execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 5


def _three_jobs(tmp_path):
    path = tmp_path / "registry.sqlite"
    reg = registry.Registry(path)
    # configs of ~6 KB each: the rows sit on pages of their own
    reg.add_many([{**OK_ROW, "id": str(i), "config": {"pad": "x" * 6000}} for i in range(3)])
    reg.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    reg.db.close()
    return path


@pytest.mark.parametrize("damage", ["not utf-8", "deeply nested json"])
def test_one_damaged_row_is_named_and_the_others_still_list(cli, tmp_path, damage):
    path = _three_jobs(tmp_path)
    db = sqlite3.connect(path)
    if damage == "not utf-8":
        db.execute("UPDATE jobs SET name = CAST(X'ff41fe' AS TEXT) WHERE id = '1'")
    else:
        db.execute("UPDATE jobs SET config = ? WHERE id = '1'", ("[" * 100000 + "]" * 100000,))
    db.commit()
    db.close()
    r = cli("status", "--all", "--json", "--registry", str(path))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    ids = sorted(v["id"] for v in json.loads(r.stdout))
    assert ids == (["0", "1", "2"] if damage == "not utf-8" else ["0", "2"]), ids
    check = cli("registry", "check", "--registry", str(path))
    assert "Traceback" not in check.stderr
    if damage != "not utf-8":
        assert check.returncode == 2 and "damaged row" in check.stderr, check.stderr


def test_a_zeroed_page_is_one_line_and_recover_salvages_the_rest(cli, tmp_path):
    """One page of a three-job registry zeroed (a bad disk, a torn write): status, check and recover give one line
    each, never a DatabaseError traceback; recover keeps the file aside and reads back what it can."""
    path = _three_jobs(tmp_path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    assert len(data) >= 4 * page
    data[2 * page : 3 * page] = bytes(page)  # the third page: a leaf of the jobs table
    path.write_bytes(bytes(data))
    for verb in (["status", "--all"], ["registry", "check"]):
        r = cli(*verb, "--registry", str(path))
        assert r.returncode == 2 and "Traceback" not in r.stderr and "recover" in r.stderr, (
            verb,
            r.stderr,
        )
    r = cli("registry", "recover", "--registry", str(path))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "fresh registry" in r.stdout and list(tmp_path.glob("registry.sqlite.damaged-*"))
    assert cli("status", "--all", "--registry", str(path)).returncode == 0


# ------------------------------------------------------------------------------------ pre-flight


def squad(tmp_path, name, qas, context="The cat sat on the mat."):
    doc = {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
    }
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def good_qa(i=0, start=4):
    return {
        "id": f"q{i}",
        "question": "Who sat?",
        "answers": [{"text": "cat", "answer_start": start}],
    }


def submit_files(cli, tmp_path, train, *extra):
    out = tmp_path / "out"
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(out))}",
        "--set",
        'data.dataset=""',
        "--set",
        f"data.train_file={json.dumps(str(train))}",
        "--set",
        'model.name_or_path="builtin:tiny-bert"',
        *extra,
        env={"HPCQA_REGISTRY": str(tmp_path / "registry.sqlite")},
    )
    return r, out


def bad_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"data": [\n  {"title": "t",\n   "paragraphs": [}\n]}\n')
    return p


def jsonl_with_bad_line(tmp_path):
    p = tmp_path / "train.jsonl"
    good = {
        "id": "a",
        "context": "The cat sat.",
        "question": "Who?",
        "answers": {"text": ["cat"], "answer_start": [4]},
    }
    p.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n{oops\n")
    return p


CASES = {
    "missing file": (lambda t: t / "nope.json", ["data.train_file", "nope.json", "not found"]),
    "malformed JSON": (bad_json, ["data.train_file", "bad.json", "line 3"]),
    "bad JSON line": (jsonl_with_bad_line, ["train.jsonl", "line 3"]),
    "no examples": (lambda t: squad(t, "empty.json", []), ["no examples"]),
    "empty file": (
        lambda t: (t / "zero.json").write_text("") and t / "zero.json" or t / "zero.json",
        ["zero.json"],
    ),
    "answer_start off": (
        lambda t: squad(t, "off.json", [good_qa(i, start=5) for i in range(20)]),
        ["20 of 20 answers", "'q0' (answer 'cat' at 5)", "max_misaligned_answers"],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_data_is_refused_before_anything_starts(cli, tmp_path, case):
    make, needles = CASES[case]
    r, out = submit_files(cli, tmp_path, make(tmp_path))
    assert_clean_error(r, *needles)
    assert not list(out.glob("*/[0-9]*")) and not (tmp_path / "registry.sqlite").exists()


def test_a_few_misaligned_answers_pass_within_the_tolerance(tmp_path):
    from hpcqa import preflight
    from hpcqa.core import config

    path = squad(tmp_path, "ok.json", [good_qa(i) for i in range(99)] + [good_qa(99, start=0)])
    cfg = config.load(
        "configs/quickstart.toml",
        [
            'data.dataset=""',
            f"data.train_file={json.dumps(str(path))}",
            f"job.output_dir={json.dumps(str(tmp_path))}",
        ],
    )
    notes = preflight.check(cfg)
    assert len(notes) == 1 and "1 of 100 answers misaligned" in notes[0]


def submit_model(cli, tmp_path, name: str):
    """submit with good data and model.name_or_path = name."""
    r, _ = submit_files(
        cli,
        tmp_path,
        squad(tmp_path, "ok.json", [good_qa()]),
        "--set",
        f"model.name_or_path={json.dumps(name)}",
    )
    return r


@pytest.mark.parametrize(
    "name,needles",
    [
        ("builtin:nosuch", ["unknown built-in"]),
        ("./models/missing", ["model directory './models/missing' not found"]),
        ("some-org/not-cached-model", ["not-cached-model", "cache", "allow_download"]),
    ],
)
def test_unloadable_model_is_refused(cli, tmp_path, name, needles):
    assert_clean_error(submit_model(cli, tmp_path, name), "model.name_or_path", *needles)


def test_directory_without_a_model_is_refused(cli, tmp_path):
    (tmp_path / "m").mkdir()
    assert_clean_error(submit_model(cli, tmp_path, str(tmp_path / "m")), "without config.json")
    weights = tmp_path / "m" / "model.safetensors"  # the weights file named instead of its folder
    weights.write_bytes(b"")
    assert_clean_error(submit_model(cli, tmp_path, str(weights)), "is not a folder")


def test_output_folder_not_writable(cli, tmp_path):
    blocker = tmp_path / "file-in-the-way"
    blocker.write_text("")
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(blocker))}",
        env={"HPCQA_REGISTRY": str(tmp_path / "registry.sqlite")},
    )
    assert_clean_error(r, "job.output_dir", "file-in-the-way")
    assert not (tmp_path / "registry.sqlite").exists()


# ---------------------------------------------------------------- values that are not sane (issue 30)


@pytest.mark.parametrize(
    "override,key",
    [
        ("train.learning_rate=nan", "train.learning_rate"),
        ("train.warmup_ratio=inf", "train.warmup_ratio"),
        ("train.num_train_epochs=0", "train.num_train_epochs"),
        ("train.ddp_timeout_s=1000000000000000", "train.ddp_timeout_s"),
        ("cluster.nodes=100000", "cluster.nodes"),
    ],
)
def test_values_that_are_not_sane_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/squad_spr.toml", [override])
    assert e.value.key == key


def test_sizes_are_bounded_before_anything_is_expanded(cli, tmp_path):
    """64 sockets x 4096 cores on 100,000 nodes, and a 10^10-variant grid: one line each, at once, nothing written."""
    t0 = time.time()
    r = cli(
        "validate",
        "configs/squad_spr.toml",
        "--set",
        "cluster.nodes=100000",
        "--set",
        "cluster.sockets_per_node=64",
        "--set",
        "cluster.cores_per_socket=4096",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
    )
    assert r.returncode == 2 and "CPUs per node" in r.stderr and "Traceback" not in r.stderr, (
        r.stderr
    )
    sweep = tmp_path / "big.toml"
    axis = json.dumps(list(range(100000)))
    sweep.write_text(
        (ROOT / "configs/quickstart.toml").read_text()
        + f'\n[sweep]\n"train.seed" = {axis}\n"train.max_steps" = {axis}\n'
    )
    r = cli(
        "submit", str(sweep), "--dry-run", "--set", f"job.output_dir={json.dumps(str(tmp_path))}"
    )
    assert (
        r.returncode == 2 and "10,000,000,000 variants" in r.stderr and "at most 10,000" in r.stderr
    ), r.stderr
    assert time.time() - t0 < 20 and [p.name for p in tmp_path.iterdir()] == ["big.toml"]


def test_more_local_ranks_than_this_machine_has_cores_is_refused_before_anything_is_written(
    cli, tmp_path
):
    """512 ranks declared on a machine that lets hpcqa use far fewer cores: the local executor observes the
    machine and refuses (the fix names its real shape); the dry run says submit would refuse."""
    big = [
        "--set",
        "cluster.sockets_per_node=2",
        "--set",
        "cluster.cores_per_socket=256",
        "--set",
        "launch.ranks_per_socket=256",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
        "--set",
        f"job.registry={json.dumps(str(tmp_path / 'r.sqlite'))}",
    ]
    t0 = time.time()
    r = cli("submit", "configs/quickstart.toml", *big)
    assert_clean_error(r, "would start 512 ranks on this machine", "cluster.sockets_per_node = 1")
    assert re.search(r"lets it use \d+ core", r.stderr), r.stderr
    assert (
        time.time() - t0 < 20
        and not (tmp_path / "out").exists()
        and not (tmp_path / "r.sqlite").exists()
    )
    dry = cli("submit", "configs/quickstart.toml", *big, "--dry-run")
    assert dry.returncode == 0 and "submit would refuse" in " ".join(
        dry.stderr.split() + dry.stdout.split()
    )


def test_a_non_utf8_set_is_one_line_and_writes_nothing(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcqa",
            "submit",
            "configs/quickstart.toml",
            "--set",
            os.fsencode("job.name=a") + b"\xff",
            "--set",
            f"job.output_dir={json.dumps(str(tmp_path))}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 2 and "UTF-8" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- rough edges a new user meets (issue 30)


def test_a_misspelt_command_gets_did_you_mean(cli):
    r = cli("sumbit", "configs/quickstart.toml")
    assert r.returncode == 2 and "did you mean 'submit'" in r.stderr and "Traceback" not in r.stderr


def test_kubernetes_as_an_executor_points_to_render(cli):
    r = cli("validate", "configs/quickstart.toml", "--set", "cluster.executor=kubernetes")
    assert r.returncode == 2 and "render CONFIG --kind pytorchjob" in r.stderr


def test_a_toml_syntax_error_shows_the_line(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nlearning_rate = 3e-5\nname = hello world\n")
    r = cli("validate", str(bad))
    assert r.returncode == 2 and "'name = hello world'" in r.stderr and "line 3" in r.stderr, (
        r.stderr
    )


def test_render_writes_python3_unless_told_and_yaml_is_not_executable(cli, tmp_path):
    r = cli("render", "configs/squad_spr.toml")
    assert (
        r.returncode == 0
        and " python3 -m hpcqa.rank --plan" in r.stdout
        and sys.executable not in r.stdout
    )
    out = tmp_path / "job.yaml"
    r = cli("render", "configs/squad_spr.toml", "--kind", "pytorchjob", "-o", str(out))
    assert r.returncode == 0 and not out.stat().st_mode & 0o111, r.stderr
    script = tmp_path / "job.sbatch"
    assert cli("render", "configs/squad_spr.toml", "-o", str(script)).returncode == 0
    assert script.stat().st_mode & 0o100


def test_stage_of_a_built_in_model_does_not_crash(cli, tmp_path):
    r = cli(
        "stage",
        "configs/quickstart.toml",
        "--set",
        "model.name_or_path=builtin:tiny-bert",
        "--set",
        "data.synthetic_train_examples=40",
        "--set",
        "data.synthetic_eval_examples=10",
        env={"HPCQA_CACHE": str(tmp_path / "cache")},
    )
    assert (
        r.returncode == 0 and "manifest" in r.stdout + r.stderr and "Traceback" not in r.stderr
    ), r.stderr


def test_submit_check_with_no_controller_says_so_not_that_the_request_is_bad(tmp_path):
    """`scontrol ping` as Slurm answers with its controller down (a fake runner: a unit test of the verdict)."""
    from hpcqa.errors import SchedulerUnreachable
    from hpcqa.executors.slurm.cli import Slurm
    from hpcqa.executors.slurm.executor import test_only

    def runner(argv):
        out = "Slurmctld(primary) at c1 is DOWN\n" if "ping" in argv else ""
        return subprocess.CompletedProcess(argv, 1, out, "")

    with pytest.raises(SchedulerUnreachable) as e:
        test_only(Slurm(runner), "#!/bin/bash\n")
    assert "not answering" in e.value.message and "hpcqa doctor" in e.value.hint


def test_submit_where_slurm_is_not_installed_says_so(cli, tmp_path):
    """A machine without Slurm's commands (a laptop): not "the controller is not answering, try again", which
    waiting would never fix, but that Slurm is not here and how to run anyway; exit 2, nothing submitted."""
    bare = tmp_path / "bin"
    bare.mkdir()
    slurm = {"scontrol", "sbatch", "srun", "squeue", "sacct", "sinfo", "scancel", "salloc"}
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name not in slurm and not (bare / name).exists():
                    (bare / name).symlink_to(Path(d) / name)
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        "cluster.executor=slurm",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
        env={"PATH": str(bare), "SLURM_CONF": ""},
    )
    text = " ".join(r.stderr.split())
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Slurm is not installed here" in text and "cluster.executor=local" in text, text
    # every line of the answer fits 80 columns, even unwrapped (not a terminal)
    assert max(len(line) for line in r.stderr.splitlines()) <= 80, r.stderr
    assert "not answering" not in text and "Traceback" not in r.stderr


def test_validate_checks_every_file(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nlearning_rate = \n")
    r = cli("validate", str(bad), "configs/quickstart.toml")
    assert (
        r.returncode == 2 and "ok  configs/quickstart.toml" in r.stdout and "bad.toml" in r.stderr
    )


def test_submit_takes_a_registry(cli, tmp_path):
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--dry-run",
        "--json",
        "--registry",
        str(tmp_path / "r.sqlite"),
    )
    assert r.returncode == 0 and json.loads(r.stdout)["config"]["job"]["registry"] == str(
        tmp_path / "r.sqlite"
    )


# ---------------------------------------------------------------- a registry that is not what it should be (issue 30)


def _registry_with(tmp_path, n=36):
    """n jobs with a real config each, each submitted on its own (as they are: one transaction per submit)."""
    path = tmp_path / "registry.sqlite"
    reg = registry.Registry(path)
    cfg = config.load(ROOT / "configs/quickstart.toml").to_dict()
    for i in range(n):
        reg.add_many([{**OK_ROW, "id": str(i), "folder": f"/jobs/{i}", "config": cfg}])
    reg.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    reg.db.close()
    return path


def test_damaged_rows_are_found_skipped_with_one_line_and_left_out_by_recover(cli, tmp_path):
    path = _registry_with(tmp_path, 4)
    db = sqlite3.connect(path)
    db.execute("UPDATE jobs SET config = '{not json' WHERE id = '1'")
    db.execute("UPDATE jobs SET nodes = 'many' WHERE id = '2'")
    db.commit()
    db.close()
    env = {"HPCQA_REGISTRY": str(path)}
    r = cli("registry", "check", env=env)
    assert r.returncode == 2 and "2 damaged row(s)" in r.stderr and "Traceback" not in r.stderr, (
        r.stdout + r.stderr
    )
    r = cli("status", "--all", env=env)
    assert r.returncode == 0 and "2 damaged row(s)" in r.stderr and "Traceback" not in r.stderr, (
        r.stderr
    )
    r = cli("registry", "recover", env=env)
    assert r.returncode == 0 and "2 job(s) read back, 2 damaged row(s) left out" in r.stdout, (
        r.stdout + r.stderr
    )
    assert cli("registry", "check", env=env).returncode == 0


def test_recover_salvages_the_rows_before_a_truncation(tmp_path):
    path = _registry_with(tmp_path, 36)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(Exception):  # SQLite itself reads nothing of it
        sqlite3.connect(path).execute("SELECT COUNT(*) FROM jobs").fetchone()
    new, aside, n, bad = registryfix.recover(path)
    assert n >= 12 and bad == 0 and len(registry.Registry(new).jobs()) == n, n


def test_another_programs_database_is_refused_and_left_untouched(cli, tmp_path):
    other = tmp_path / "app.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    before = other.read_bytes()
    for args in (
        ["status"],
        ["registry", "check"],
        [
            "submit",
            "configs/quickstart.toml",
            "--set",
            f"job.output_dir={json.dumps(str(tmp_path / 'o'))}",
        ],
    ):
        r = cli(*args, env={"HPCQA_REGISTRY": str(other)})
        assert (
            r.returncode == 2
            and "not an hpcqa job registry" in r.stderr
            and "Traceback" not in r.stderr
        ), r.stderr
    assert other.read_bytes() == before and not (tmp_path / "app.sqlite-wal").exists()
    assert not (tmp_path / "o").exists()


def test_a_reused_job_id_never_replaces_the_older_job(tmp_path):
    reg = registry.Registry(tmp_path / "r.sqlite")
    reg.add_many([{**OK_ROW, "id": "7", "folder": "/old/7-aaa"}])
    reg.update_states([("7", "COMPLETED", True, "0:0", "1:00", "/old/7-aaa")])
    reg.add_many(
        [{**OK_ROW, "id": "7", "folder": "/new/7-bbb"}]
    )  # a reset controller gave out 7 again
    rows = reg.jobs(["7"])
    assert sorted(r.folder for r in rows) == ["/new/7-bbb", "/old/7-aaa"]
    assert {r.folder: r.state for r in rows}["/old/7-aaa"] == "COMPLETED"


def test_a_registry_from_before_is_migrated_keeping_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        registry.SCHEMA.replace("id            TEXT NOT NULL,", "id TEXT PRIMARY KEY,")
        .replace(",\n    UNIQUE (id, folder)", "")
        .replace("    target        ", "    executor      ")
    )
    db.execute(
        "INSERT INTO jobs (id, name, executor, folder, config, source, submitted_at, nodes, world_size) "
        "VALUES ('3', 'q', 'local', '/f/3', '{}', 'x.toml', 1.0, 1, 2)"
    )
    db.commit()
    db.close()
    reg = registry.Registry(path)
    assert [r.id for r in reg.jobs()] == ["3"]
    reg.add_many([{**OK_ROW, "id": "3", "folder": "/g/3"}])
    assert len(reg.jobs(["3"])) == 2


def _schema_1_registry(path):
    """A registry as hpcqa wrote it before the column "executor" was named "target" (application id, no version)."""
    db = sqlite3.connect(path)
    db.executescript(registry.SCHEMA.replace("    target        ", "    executor      "))
    db.execute(f"PRAGMA application_id = {registry.APPLICATION_ID}")
    db.execute(
        "INSERT INTO jobs (id, name, executor, folder, config, source, submitted_at, nodes, world_size) "
        "VALUES ('5', 'q', 'slurm', '/f/5', '{}', 'x.toml', 1.0, 1, 2)"
    )
    db.commit()
    db.close()


def test_a_registry_of_schema_1_is_migrated_in_place(tmp_path):
    path = tmp_path / "v1.sqlite"
    _schema_1_registry(path)
    reg = registry.Registry(path)
    assert [(r.id, r.executor) for r in reg.jobs()] == [("5", "slurm")]
    cols = [r[1] for r in reg.db.execute("PRAGMA table_info(jobs)")]
    assert "executor" in cols and "target" not in cols
    assert reg.db.execute("PRAGMA user_version").fetchone()[0] == registry.SCHEMA_VERSION
    reg.add_many([{**OK_ROW, "id": "6", "folder": "/g/6"}])
    assert sorted(r.id for r in reg.jobs()) == ["5", "6"]


def test_a_registry_of_schema_2_gets_its_column_executor_back(tmp_path):
    """Schema version 2 named the column "target"; the word users write is cluster.executor, and version 3 says it
    again: the rows are kept, the column renamed in place, a row added after reads back."""
    path = tmp_path / "v2.sqlite"
    db = sqlite3.connect(path)
    db.executescript(registry.SCHEMA.replace("    executor      ", "    target        "))
    db.execute(f"PRAGMA application_id = {registry.APPLICATION_ID}")
    db.execute("PRAGMA user_version = 2")
    db.execute(
        "INSERT INTO jobs (id, name, target, folder, config, source, submitted_at, nodes, world_size) "
        "VALUES ('8', 'q', 'local', '/f/8', '{}', 'x.toml', 1.0, 1, 2)"
    )
    db.commit()
    db.close()
    reg = registry.Registry(path)
    assert [(r.id, r.executor) for r in reg.jobs()] == [("8", "local")]
    cols = [r[1] for r in reg.db.execute("PRAGMA table_info(jobs)")]
    assert "executor" in cols and "target" not in cols
    assert reg.db.execute("PRAGMA user_version").fetchone()[0] == 3 == registry.SCHEMA_VERSION


def test_a_job_whose_folder_was_deleted_is_said_alike_by_status_and_logs(cli, tmp_path):
    path = tmp_path / "r.sqlite"
    reg = registry.Registry(path)
    reg.add_many([{**OK_ROW, "id": "4242", "folder": str(tmp_path / "gone" / "4242-abc")}])
    env = {"HPCQA_REGISTRY": str(path)}
    s = cli("status", "4242", env=env)
    assert s.returncode == 0 and "is gone" in " ".join((s.stdout + s.stderr).split()), (
        s.stdout + s.stderr
    )
    r = cli("logs", "4242", env=env)
    assert r.returncode == 2 and "is gone" in r.stderr and "pending" not in r.stderr, r.stderr


def test_recover_of_a_crafted_file_is_bounded_and_leaves_a_working_registry(cli, tmp_path):
    """The salvage reader trusts nothing in the file: a page size of 0 in the header (was ZeroDivisionError, with the
    registry already renamed aside and no fresh one), a record claiming more bytes than the file has, overflow
    pages in a cycle (was unbounded memory). recover always ends with the damaged file kept aside and a working
    registry in its place."""
    from hpcqa.record import sqlitescan

    path = _three_jobs(tmp_path)
    data = bytearray(path.read_bytes())
    data[16:18] = b"\x00\x00"  # page size 0
    path.write_bytes(bytes(data))
    r = cli("registry", "recover", "--registry", str(path))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert list(tmp_path.glob("registry.sqlite.damaged-*"))
    assert cli("registry", "check", "--registry", str(path)).returncode == 0
    for bad in (
        b"\x00\x01",
        b"\x02\x00",
        b"\x03\x00",
    ):  # 65536 is 1; 512 is the least; not a power of two
        data[16:18] = bad
        (tmp_path / "x.sqlite").write_bytes(bytes(data))
        sqlitescan.table_rows(
            tmp_path / "x.sqlite", len(registry.COLUMNS)
        )  # no exception, whatever it finds
    usable = 4096
    pages = {n: bytes(usable) for n in range(4, 12)}  # a file of ten pages...
    pages.update(
        {
            2: (3).to_bytes(4, "big") + bytes(usable - 4),
            3: (2).to_bytes(4, "big") + bytes(usable - 4),
        }
    )
    least = (usable - 12) * 32 // 255 - 23  # ...whose overflow chain runs 2 -> 3 -> 2 -> ...
    page = bytes(least) + (2).to_bytes(4, "big")
    with pytest.raises(ValueError, match="larger than the file"):  # a record of a terabyte
        sqlitescan._payload(page, 0, 10**12, usable, pages)
    with pytest.raises(
        ValueError, match="cycle"
    ):  # within the file's size, but the chain comes back
        sqlitescan._payload(page, 0, 6 * usable, usable, pages)
    with pytest.raises(ValueError):
        sqlitescan._record(bytes([0x7F, 1, 2]))  # a header of 127 bytes in a record of 3


def test_a_registry_path_that_is_a_fifo_or_under_a_file_is_one_line(cli, tmp_path):
    """status on a FIFO used to hang for ever in SQLite's open; a registry path under a regular file answered
    "no jobs", exit 0. Both are one line naming the path, exit 2."""
    fifo = tmp_path / "registry.fifo"
    os.mkfifo(fifo)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for path, what in (
        (fifo, "not a regular file"),
        (afile / "registry.sqlite", "is a file, not a folder"),
    ):
        for verb in (["status", "--all"], ["registry", "check"]):
            r = cli(*verb, "--registry", str(path))
            assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr, (
                verb,
                r.stderr,
            )


def test_the_first_rounds_leftovers_are_one_line_at_submit_and_in_the_dry_run(cli, tmp_path):
    """From the first round's corpus, what was still silent: a 5,000-character model name (a traceback at submit),
    train.seed = 2**63-1 (every rank failed at start: numpy takes seeds below 2**32), train.resume_from that is
    not a checkpoint, k8s.mount_path over the image's system folders. Each is one line, exit 2, naming the key;
    and the dry run of a request submit would refuse says so instead of showing a plan that is never queued."""
    out = ["--set", f"job.output_dir={json.dumps(str(tmp_path / 'out'))}"]
    for setting, key in (
        (f'model.name_or_path="{"a" * 5000}"', "model.name_or_path"),
        (f"train.seed={2**63 - 1}", "train.seed"),
    ):
        for dry in ([], ["--dry-run"]):
            r = cli("submit", "configs/quickstart.toml", *out, "--set", setting, *dry)
            assert r.returncode == 2 and key in r.stderr and "Traceback" not in r.stderr, (
                setting,
                r.stderr,
            )
            assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error:")]) == 1
    r = cli("submit", "configs/quickstart.toml", *out, "--set", 'model.name_or_path="not a hub id"')
    assert (
        r.returncode == 2
        and "neither a local directory" in r.stderr
        and "Traceback" not in r.stderr
    ), r.stderr
    for path, why in (
        ("/etc", "without trainer_state.json"),
        (str(tmp_path / "nope"), "is not there"),
    ):
        r = cli(
            "submit",
            "configs/quickstart.toml",
            *out,
            "--set",
            f"train.resume_from={json.dumps(path)}",
        )
        assert r.returncode == 2 and "train.resume_from" in r.stderr and why in r.stderr, r.stderr
        dry = cli(
            "submit",
            "configs/quickstart.toml",
            *out,
            "--set",
            f"train.resume_from={json.dumps(path)}",
            "--dry-run",
            "--json",
        )
        assert dry.returncode == 0 and why in json.loads(dry.stdout)["would_refuse"]["error"], (
            dry.stdout[-500:]
        )
        assert (
            "submit here would refuse it" not in dry.stderr
        )  # --json: in the object, not on stderr
    missing = cli(
        "submit",
        "configs/quickstart.toml",
        *out,
        "--set",
        'data.dataset=""',
        "--set",
        f"data.train_file={json.dumps(str(tmp_path / 'train.json'))}",
        "--dry-run",
    )
    assert (
        missing.returncode == 0
        and "would refuse it" in missing.stderr
        and "data.train_file" in missing.stderr
        and "\n  fix: " in missing.stderr  # the fix submit's error would give
    ), missing.stderr
    assert not (tmp_path / "out").exists()
    for mount in ("/", "/dev/shm", "/mnt/../etc", "/etc/hpcqa", "/usr/local/data"):
        r = cli(
            "render",
            "configs/squad_spr.toml",
            "--kind",
            "trainjob",
            "--set",
            "k8s.image=r/x:1",
            "--set",
            f"k8s.mount_path={json.dumps(mount)}",
        )
        assert r.returncode == 2 and "k8s.mount_path" in r.stderr and "Traceback" not in r.stderr, (
            mount,
            r.stderr,
        )
    ok = cli(
        "render",
        "configs/squad_spr.toml",
        "--kind",
        "trainjob",
        "--set",
        "k8s.image=r/x:1",
        "--set",
        'k8s.mount_path="/data/hpcqa"',
    )
    assert ok.returncode == 0, ok.stderr


def test_init_writes_a_new_or_regular_file_whole_or_nothing(cli, tmp_path):
    """hpcqa init --force: a FIFO is not opened (it would block), a link is not written through to its target, a
    device is refused; an existing regular file is replaced whole. Each refusal is one line, exit 2."""
    os.mkfifo(tmp_path / "fifo.toml")
    target = tmp_path / "elsewhere.txt"
    target.write_text("mine\n")
    (tmp_path / "link.toml").symlink_to(target)
    for name, kind in (
        ("fifo.toml", "a FIFO"),
        ("link.toml", "a link"),
        ("/dev/null", "not a regular file (a device or a socket)"),
    ):
        r = cli("init", "-o", str(tmp_path / name), "--force")
        assert r.returncode == 2 and f"is {kind}: nothing was written" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert target.read_text() == "mine\n"
    (tmp_path / "old.toml").write_text("old\n")
    assert cli("init", "-o", str(tmp_path / "old.toml")).returncode == 2
    r = cli("init", "-o", str(tmp_path / "old.toml"), "--force")
    assert r.returncode == 0 and "[cluster]" in (tmp_path / "old.toml").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "elsewhere.txt",
        "fifo.toml",
        "link.toml",
        "old.toml",
    ]


def test_a_registry_that_cannot_be_created_stops_submit_before_anything_runs(cli, tmp_path):
    """The registry is made before the job is queued or started: one that cannot be (under /proc here; a read-only
    folder for a normal user) is one line, exit 2, and no job -- not a job queued, run and left unrecorded."""
    out = tmp_path / "out"
    r = cli(
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(out))}",
        env={"HPCQA_REGISTRY": "/proc/hpcqa-no-such/registry.sqlite"},
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "cannot create the job registry /proc/hpcqa-no-such/registry.sqlite" in r.stderr
    assert "recover" not in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() or not any(out.rglob("*.err"))


def test_render_writes_only_over_a_regular_file(cli, tmp_path):
    """render -o replaces a regular file whole, as before; anything else it names is refused, one line, exit 2,
    and left as it was. Written by a rename, a FIFO, a link or a device node would be swapped for the script: `hpcqa
    render -o /dev/full` as root replaced the device node with a file, and a link would lose its target."""
    os.mkfifo(tmp_path / "fifo.sbatch")
    target = tmp_path / "elsewhere.txt"
    target.write_text("mine\n")
    (tmp_path / "link.sbatch").symlink_to(target)
    (tmp_path / "folder").mkdir()
    for name, kind in (
        ("fifo.sbatch", "a FIFO"),
        ("link.sbatch", "a link"),
        ("folder", "a folder"),
    ):
        r = cli("render", "configs/squad_spr.toml", "-o", str(tmp_path / name))
        assert r.returncode == 2 and f"is {kind}: nothing was written" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert (tmp_path / "fifo.sbatch").is_fifo() and (tmp_path / "link.sbatch").is_symlink()
    assert target.read_text() == "mine\n" and not any((tmp_path / "folder").iterdir())
    (tmp_path / "old.sbatch").write_text("old\n")
    r = cli("render", "configs/squad_spr.toml", "-o", str(tmp_path / "old.sbatch"))
    assert r.returncode == 0, r.stderr
    assert "#SBATCH" in (tmp_path / "old.sbatch").read_text()
    assert os.stat(tmp_path / "old.sbatch").st_mode & 0o777 == 0o755  # a script: run, so executable


def test_a_config_path_that_is_not_a_config_file_is_one_line(cli, tmp_path):
    """A FIFO named as the config used to hang submit (read_text waits for a writer for ever) and /dev/zero was read
    until the memory ran out; a folder, an oversized file, TOML nested past Python's recursion limit and an integer
    of 5,000 digits (tomllib raises RecursionError and ValueError for those, not its own error) were tracebacks or
    worse. Each is one line now, exit 2, in `submit --dry-run` and `validate`, from the file and from --set."""
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "big.toml").write_text("# " + "x" * (5 << 20) + "\n")
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "digits.toml").write_text("[train]\nseed = " + "9" * 5000 + "\n")
    cases = {
        "fifo.toml": "not a regular file",
        "/dev/zero": "not a regular file",
        str(tmp_path): "a folder, not a file",
        "big.toml": "larger than 4 MiB",
        "deep.toml": "nested too deeply",
        "digits.toml": "a number that cannot be read",
    }
    for path, said in cases.items():
        for verb in (("submit", "--dry-run"), ("validate",)):
            r = cli(verb[0], str(tmp_path / path), *verb[1:])
            assert r.returncode == 2 and said in r.stderr, (path, verb, r.stderr)
            assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 4, r.stderr
    for value in ("[" * 5000 + "]" * 5000, "9" * 5000):
        r = cli("submit", "configs/quickstart.toml", "--dry-run", "--set", f"train.seed={value}")
        assert r.returncode == 2 and "--set train.seed: the value cannot be read" in r.stderr, (
            r.stderr
        )
        assert "Traceback" not in r.stderr


def test_what_a_message_repeats_reaches_the_terminal_as_text(cli, tmp_path):
    """An error names what it was given: a job id (from a script, a pasted log line) holding an escape sequence --
    OSC 52 writes the terminal's clipboard, a bidi override reverses what follows -- is spelled out in the
    message, never sent to the terminal as a command."""
    for job in ("\x1b]52;c;cHduZWQ=\x07", "a\u202eb", "x\x9by"):
        r = cli("status", job, env={"HPCQA_REGISTRY": str(tmp_path / "registry.sqlite")})
        assert r.returncode == 2 and "no job" in r.stderr, r.stderr
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", r.stderr), ascii(r.stderr)
    r = cli("status", "\x1b]52;c;x\x07", env={"HPCQA_REGISTRY": str(tmp_path / "registry.sqlite")})
    assert "\\x1b]52;c;x\\x07" in r.stderr, ascii(r.stderr)


def test_logs_spell_out_what_a_program_printed_for_a_terminal_to_obey(cli, tmp_path):
    """A log holds whatever the program printed (a dataset's text included): on a terminal, `hpcqa logs` passes line
    ends, tabs, a progress bar's \\r and the colours and cursor moves bars draw with, and spells out the rest -- OSC 52
    (writes the clipboard), OSC 8 (a link), CSI 6n (makes the terminal type into the shell), a bidi override.
    Piped, the bytes go through as they are, as `cat` would (a file is not a terminal)."""
    from tests import pty_term

    path = tmp_path / "r.sqlite"
    folder = tmp_path / "4242-abc"
    folder.mkdir()
    hostile = (
        "step 1\r\x1b[32mok\x1b[0m\x1b[K\n\x1b]52;c;cHduZWQ=\x07 \x1b]8;;http://x\x07link \x1b[6n a\u202eb\n"
        "\x1b[2Jcleared\n"
    )
    (folder / "4242_0_log.err").write_text(hostile)
    registry.Registry(path).add_many([{**OK_ROW, "id": "4242", "folder": str(folder)}])
    env = {"HPCQA_REGISTRY": str(path)}
    piped = cli("logs", "4242", env=env)
    # (text mode reads the \r as a line end)
    assert piped.returncode == 0 and piped.stdout == hostile.replace("\r", "\n"), ascii(
        piped.stdout
    )
    code, screen = pty_term.hpcqa("logs", "4242", env=env, timeout=60)
    assert code == 0, screen
    for spelled in (
        "\\x1b]52;c;cHduZWQ=\\x07",
        "\\x1b]8;;http://x\\x07link",
        "\\x1b[6n",
        "a\\u202eb",
        "\\x1b[2Jcleared",  # clearing the whole screen would hide what came before
    ):
        assert spelled in screen, (spelled, screen)
    assert (
        "ok" in screen and "\\x1b[32m" not in screen
    )  # the colour was passed to the terminal, not spelled


@pytest.fixture
def as_a_user():
    """(run, folder): `run(*args, env=...)` is `python -m hpcqa ARGS` as a normal user -- UID 1000 through setpriv when
    the tests run as root (CI does: root reads every file, so no permission is ever refused), else as this user --
    from `folder`/work, in a fresh folder of theirs under /tmp that is their HOME too."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="hpcqa-user-", dir="/tmp"))
    (folder / "work").mkdir()
    prefix = []
    if os.geteuid() == 0:
        for p in (folder, folder / "work"):
            os.chown(p, 1000, 1000)
        prefix = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--"]

    def run(*args, env=None):
        full = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCQA_"))},
            "HOME": str(folder),
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        return subprocess.run(
            [*prefix, sys.executable, "-m", "hpcqa", *args],
            capture_output=True,
            text=True,
            cwd=folder / "work",
            env=full,
            timeout=120,
        )

    yield run, folder
    shutil.rmtree(folder, ignore_errors=True)


def test_paths_a_user_may_not_read_are_one_line_each(as_a_user, tmp_path):
    """As a normal user (pathlib's exists()/is_dir() raise PermissionError in a folder they may not enter): another
    user's registry named by --registry or $HPCQA_REGISTRY, job.output_dir under such a folder, a config or a file
    the command names that they may not read. Each was a traceback or is refused in one line, exit 2, with nothing
    queued; the dry run says what submit would refuse."""
    run, folder = as_a_user
    closed = tmp_path / "closed"  # under pytest's root-owned 0700 base: closed to UID 1000
    closed.mkdir(mode=0o700)
    registry.Registry(closed / "registry.sqlite").add_many([{**OK_ROW, "id": "77"}])
    work = folder / "work"
    (work / "p.py").write_text("print(1)\n")
    config = work / "job.toml"
    config.write_text(
        '[cluster]\nexecutor = "local"\nsockets_per_node = 1\ncores_per_socket = 2\n'
        "[launch]\nranks_per_socket = 1\nccl_workers = 0\n"
    )
    (folder / "secret.txt").write_text("s\n")
    if os.geteuid() == 0:
        for p in (work / "p.py", config, folder / "secret.txt"):
            os.chown(p, 1000, 1000)
    (folder / "secret.txt").chmod(0)
    theirs = str(closed / "registry.sqlite")
    for args, env in (
        (("status", "--registry", theirs), None),
        (("logs", "77", "--registry", theirs), None),
        (("status",), {"HPCQA_REGISTRY": theirs}),
    ):
        r = run(*args, env=env)
        assert r.returncode == 2 and f"job registry {theirs} cannot be read" in r.stderr, r.stderr
    r = run("submit", "job.toml", "--", "python", "p.py", env={"HPCQA_REGISTRY": theirs})
    assert r.returncode == 2 and "cannot be read" in r.stderr and "Traceback" not in r.stderr
    assert not (work / "logs").exists()  # nothing started
    out = f'job.output_dir="{closed / "out"}"'
    r = run("submit", "job.toml", "--dry-run", "--set", out, "--", "python", "p.py")
    assert r.returncode == 0 and "permission denied" in r.stderr and "Traceback" not in r.stderr
    r = run("submit", "job.toml", "--set", out, "--", "python", "p.py")
    assert r.returncode == 2 and "job.output_dir" in r.stderr and "permission denied" in r.stderr
    r = run("submit", "job.toml", "--dry-run", "--", "python", "p.py", str(folder / "secret.txt"))
    assert r.returncode == 2 and "cannot be read here (Permission denied)" in r.stderr, r.stderr
    (work / "data").mkdir(mode=0)  # a folder the copy cannot list was left out of it, silently
    if os.geteuid() == 0:
        os.chown(work / "data", 1000, 1000)
    r = run("submit", "job.toml", "--dry-run", "--", "python", "p.py")
    assert r.returncode == 2 and f"the folder {work / 'data'} cannot be read" in r.stderr, r.stderr
    (work / "data").rmdir()
    config.chmod(0)
    r = run("submit", "job.toml", "--dry-run", "--", "python", "p.py")
    assert r.returncode == 2 and "cannot read config 'job.toml': Permission denied" in r.stderr


def test_an_error_in_the_program_after_dashes_is_said_of_it(cli):
    """The program after `--` reaches the config as job.command: its errors named a `--set` the user never typed,
    or (for one argument, job.command[2]) the config file. They name the program after --; a --set job.command
    is named as the --set; a control character's fix no longer talks of cluster.setup."""
    r = cli("submit", "configs/quickstart.toml", "--dry-run", "--", "python", "p.py", "a\tb")
    assert r.returncode == 2, r.stderr
    assert (
        "error: the program after -- (on configs/quickstart.toml): job.command[2]: contains a control"
        in (" ".join(r.stderr.split()))
    ), r.stderr
    assert "cluster.setup" not in r.stderr
    r = cli(
        "submit", "configs/quickstart.toml", "--dry-run", "--set", 'job.command=["python", "a\\tb"]'
    )
    assert r.returncode == 2 and "--set (on configs/quickstart.toml): job.command[1]" in r.stderr, (
        r.stderr
    )
    r = cli("submit", "configs/quickstart.toml", "--dry-run", "--set", 'cluster.setup=["a\\nb"]')
    assert r.returncode == 2 and "several lines, several entries" in r.stderr, r.stderr


# ---------------------------------------------------------------- launch.env and the kernel's exec (issue 72)


def test_a_launch_env_value_past_the_kernels_limit_is_one_line(cli, tmp_path):
    """A 200 KiB launch.env value passed every check and every rank exited 127 with an empty log (the kernel refuses
    the exec: E2BIG). validate and the dry run refuse it, naming the key, its size and the limit; nothing is written.
    The same config with a value at the limit passes."""
    out = tmp_path / "out"
    text = (ROOT / "configs/quickstart.toml").read_text()
    big = tmp_path / "big.toml"
    big.write_text(text + f'\n[launch.env]\nBIG = "{"a" * (200 << 10)}"\n')
    for verb in (("validate",), ("submit", "--dry-run")):
        r = cli(*verb, str(big), "--set", f"job.output_dir={json.dumps(str(out))}")
        assert_clean_error(r, "launch.env.BIG", "204,805 bytes", "131,072", "through a file")
        assert r.stderr.startswith(f"error: {big}: launch.env.BIG: "), r.stderr
    assert not out.exists()
    fits = tmp_path / "fits.toml"
    fits.write_text(text + f'\n[launch.env]\nBIG = "{"a" * (131072 - len("BIG=") - 1)}"\n')
    r = cli("validate", str(fits))
    assert r.returncode == 0 and r.stdout.startswith("ok  "), r.stderr


def test_the_launch_env_limit_is_the_kernels():
    """The cap is where Linux's is: a variable of MAX_ENV_ENTRY bytes ("NAME=value" and its NUL) is exec'd, one of a
    byte more is not -- on a 4 KiB-page kernel, where MAX_ARG_STRLEN is 32 pages; on larger pages the cap is below."""
    import errno

    from hpcqa.core import configcheck

    kernel = 32 * os.sysconf("SC_PAGE_SIZE")  # MAX_ARG_STRLEN (include/uapi/linux/binfmts.h)
    assert configcheck.MAX_ENV_ENTRY <= kernel
    at_cap = "a" * (configcheck.MAX_ENV_ENTRY - len("X=") - 1)
    subprocess.run(["true"], env={"X": at_cap}, check=True)
    with pytest.raises(OSError) as e:
        subprocess.run(["true"], env={"X": "a" * (kernel - len("X=") - 1 + 1)})
    assert e.value.errno == errno.E2BIG
    with pytest.raises(ConfigError):
        config.load(ROOT / "configs/quickstart.toml", [f'launch.env.X="{at_cap}a"'])
