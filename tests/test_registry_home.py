"""The registry is the user's, not the folder's: the default lives in the user's state folder
($XDG_STATE_HOME/hpcqa, ~/.local/state/hpcqa), so status, logs and cancel find a job from any folder; a registry an
older hpcqa kept in a folder (logs/registry.sqlite) is copied in; submit names a registry that is not the default;
"no such job" names the registry that has it. A job given a command is named after its program."""

import json
import os
import sqlite3
from pathlib import Path

import pytest

from hpcqa.core.command import program_name
from hpcqa.record import registry
from tests.conftest import ROOT, run_cli

QUICK = str(ROOT / "configs/quickstart.toml")
PROG = """import os, sys
open(f"ran-{os.environ['RANK']}.txt", "w").write(" ".join(sys.argv[1:]))
print("rank", os.environ["RANK"], "done")
"""


def _home(tmp_path) -> dict:
    """A user whose registry is the default: their own state folder, no $HPCQA_REGISTRY."""
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "HPCQA_REGISTRY": ""}


def test_the_default_registry_is_in_the_users_state_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("HPCQA_REGISTRY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    assert registry.resolve_path() == tmp_path / "st" / "hpcqa" / "registry.sqlite"
    assert registry.chosen_by("") == (tmp_path / "st" / "hpcqa" / "registry.sqlite", "your default")
    monkeypatch.setenv(
        "XDG_STATE_HOME", "relative/ignored"
    )  # the XDG spec: a relative value is invalid
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (
        registry.default_path()
        == tmp_path / "home" / ".local" / "state" / "hpcqa" / "registry.sqlite"
    )
    assert registry.chosen_by(str(tmp_path / "x.sqlite"))[1] == "job.registry"
    monkeypatch.setenv("HPCQA_REGISTRY", str(tmp_path / "env.sqlite"))
    assert registry.chosen_by("") == (tmp_path / "env.sqlite", "$HPCQA_REGISTRY")


@pytest.mark.parametrize(
    "argv, name",
    [
        (["python", "run_qa.py", "--output_dir", "out"], "run_qa"),
        (["python3", "-u", "train.py"], "train"),
        (["python", "-m", "pkg.train", "--x"], "pkg.train"),
        (["python", "-c", "print(1)"], "python"),
        (["./train.sh", "a"], "train"),
        (["env", "A=1", "python", "/abs/my train.py"], "my-train"),
        (["python", "/x/über.py"], "ber"),
        (["python", "/x/ü.py"], ""),
        ([], ""),
    ],
)
def test_a_program_names_its_job(argv, name):
    assert program_name(argv) == name


def test_a_job_given_a_program_is_named_after_it_unless_job_name_says_otherwise(tmp_path):
    base = ["submit", QUICK, "--set", f"job.output_dir={tmp_path}", "--dry-run", "--json"]
    for name in (
        "run_qa.py",
        "train_it.py",
    ):  # a program missing from its folder is refused at submit
        (tmp_path / name).write_text("print(1)\n")
    plan = json.loads(
        run_cli(*base, "--", "python", "run_qa.py", "--output_dir", "out", cwd=tmp_path).stdout
    )
    assert plan["config"]["job"]["name"] == "run_qa" and "/run_qa/" in plan["job_dir"]
    named = run_cli(*base, "--set", "job.name=mine", "--", "python", "run_qa.py", cwd=tmp_path)
    assert json.loads(named.stdout)["config"]["job"]["name"] == "mine"
    # a config's own command and no job.name: the same rule
    cfg = tmp_path / "own.toml"
    cfg.write_text('[job]\ncommand = ["python", "train_it.py"]\n[cluster]\nexecutor = "local"\n')
    own = run_cli("submit", str(cfg), "--dry-run", "--json", cwd=tmp_path)
    assert own.returncode == 0, own.stderr
    assert json.loads(own.stdout)["config"]["job"]["name"] == "train_it"


@pytest.mark.slow
def test_status_logs_and_cancel_find_a_job_from_any_folder(tmp_path):
    """Submitted from the program's own folder with the default registry; looked up from another."""
    prog, elsewhere = tmp_path / "prog", tmp_path / "elsewhere"
    prog.mkdir(), elsewhere.mkdir()
    (prog / "probe.py").write_text(PROG)
    env = _home(tmp_path)
    dry = run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'out'}",
        "--dry-run",
        "--json",
        "--",
        "python",
        "probe.py",
        env=env,
        cwd=prog,
    )
    default = tmp_path / "state" / "hpcqa" / "registry.sqlite"
    assert json.loads(dry.stdout)["registry"] == {"path": str(default), "chosen_by": "your default"}
    r = run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'out'}",
        "--",
        "python",
        "probe.py",
        "a b",
        env=env,
        cwd=prog,
    )
    assert r.returncode == 0, r.stderr
    assert "registry" not in r.stderr  # the default goes without saying
    job_id = r.stderr.split("local job ")[1].split(":")[0]
    assert not (prog / "logs").exists()  # no registry (nor anything else) in the program's folder
    assert default.is_file()
    (j,) = json.loads(run_cli("status", "--json", job_id, env=env, cwd=elsewhere).stdout)
    assert j["state"] == "COMPLETED" and j["name"] == "probe"
    listed = run_cli("status", "--all", "--json", env=env, cwd="/")
    assert [v["id"] for v in json.loads(listed.stdout)] == [job_id]
    log = run_cli("logs", job_id, "--stdout", env=env, cwd=elsewhere)
    assert log.returncode == 0 and "rank 0 done" in log.stdout, log.stderr
    ended = run_cli(
        "cancel", job_id, env=env, cwd=elsewhere
    )  # found; it has ended, so nothing is signalled
    assert ended.returncode == 0 and "no job" not in ended.stderr, ended.stderr
    # with a registry of its own, submit names it and how to find the job again
    own = tmp_path / "team.sqlite"
    r2 = run_cli(
        "submit",
        QUICK,
        "--set",
        f"job.output_dir={tmp_path / 'out'}",
        "--registry",
        str(own),
        "--",
        "python",
        "probe.py",
        env=env,
        cwd=prog,
    )
    assert r2.returncode == 0, r2.stderr
    said = " ".join(r2.stderr.split())
    assert (
        f"registry {own} (job.registry; not your default: status, logs and cancel need --registry {own})"
        in said
    )
    other_id = r2.stderr.split("local job ")[1].split(":")[0]
    missing = run_cli("status", other_id, env=env, cwd=elsewhere)
    if other_id != job_id:  # ids are controller PIDs: they differ unless the PID was reused
        assert missing.returncode == 2 and "Traceback" not in missing.stderr
        assert f"no job {other_id} in {default}" in " ".join(missing.stderr.split())
    # and the other way round: a job of the default asked of another registry names the default
    wrong = run_cli("status", job_id, "--registry", str(own), env=env, cwd=elsewhere)
    assert wrong.returncode == 2 and f"it is in {default}: add --registry {default}" in " ".join(
        wrong.stderr.split()
    )


def _legacy(path: Path, rows: int = 2) -> list[str]:
    """A registry as an older hpcqa wrote it: schema version 1 (the column "executor"), no application id, in
    logs/registry.sqlite under the folder it ran in."""
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(
        registry.SCHEMA.replace("target        TEXT NOT NULL", "executor      TEXT NOT NULL")
    )
    ids = []
    for k in range(rows):
        ids.append(str(9000 + k))
        db.execute(
            "INSERT INTO jobs (id, name, executor, folder, config, source, submitted_at, nodes, world_size, "
            "state, final) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                ids[-1],
                f"old-{k}",
                "local",
                str(path.parent / f"gone-{k}"),
                "{}",
                "c.toml",
                1.7e9 + k,
                1,
                2,
                "COMPLETED",
                1,
            ),
        )
    db.commit()
    db.close()
    return ids


def test_an_older_folders_registry_is_copied_into_the_users_once(tmp_path):
    env = _home(tmp_path)
    old_folder, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    elsewhere.mkdir()
    ids = _legacy(old_folder / "logs" / "registry.sqlite")
    before = (old_folder / "logs" / "registry.sqlite").read_bytes()
    first = run_cli("status", "--all", "--json", env=env, cwd=old_folder)
    assert first.returncode == 0, first.stderr
    assert "copied 2 job(s) from logs/registry.sqlite" in " ".join(first.stderr.split())
    assert sorted(v["id"] for v in json.loads(first.stdout)) == ids
    again = run_cli("status", "--all", "--json", env=env, cwd=old_folder)
    assert (
        "copied" not in again.stderr and len(json.loads(again.stdout)) == 2
    )  # once: the rows are not doubled
    there = run_cli("status", "--json", ids[0], env=env, cwd=elsewhere)  # found from any folder now
    assert json.loads(there.stdout)[0]["name"] == "old-0"
    assert (old_folder / "logs" / "registry.sqlite").read_bytes() == before  # read, never changed
    # an explicit registry is left alone: nothing is copied into it
    mine = run_cli(
        "status", "--all", "--registry", str(tmp_path / "mine.sqlite"), env=env, cwd=old_folder
    )
    assert mine.returncode == 0 and "copied" not in mine.stderr


@pytest.mark.parametrize("damage", ["garbage", "foreign"])
def test_a_damaged_older_registry_is_one_line_and_the_users_goes_on(tmp_path, damage):
    env = _home(tmp_path)
    folder = tmp_path / "project"
    old = folder / "logs" / "registry.sqlite"
    if damage == "garbage":
        old.parent.mkdir(parents=True)
        old.write_bytes(b"SQLite format 3\x00" + b"\xff" * 3000)
    else:
        old.parent.mkdir(parents=True)
        db = sqlite3.connect(old)
        db.execute("CREATE TABLE jobs (x)")
        db.commit()
        db.close()
    r = run_cli("status", "--all", env=env, cwd=folder)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    lines = [
        ln for ln in r.stderr.splitlines() if str(old.name) in ln or "logs/registry.sqlite" in ln
    ]
    assert len(lines) >= 1 and r.stderr.count("hpcqa:") == 1, r.stderr
    assert "no jobs" in r.stdout.lower() or r.stdout.strip() == "" or "0 job" in r.stdout


def test_another_users_older_registry_is_not_adopted(tmp_path):
    """An older hpcqa's logs/registry.sqlite that another user owns (their project folder, readable to me) is not
    copied into my registry: their jobs are not mine to list or cancel. Ownership is what the file system says."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder to another user")
    env = _home(tmp_path)
    folder = tmp_path / "theirs"
    _legacy(folder / "logs" / "registry.sqlite")
    for p in (folder, folder / "logs", folder / "logs" / "registry.sqlite"):
        os.chown(p, 65534, 65534)
    r = run_cli("status", "--all", "--json", env=env, cwd=folder)
    assert r.returncode == 0 and "copied" not in r.stderr, r.stderr
    assert json.loads(r.stdout or "[]") == []
    os.chown(
        folder / "logs" / "registry.sqlite", 0, 0
    )  # mine, but in their folder: still not adopted
    r = run_cli("status", "--all", "--json", env=env, cwd=folder)
    assert "copied" not in r.stderr and json.loads(r.stdout or "[]") == []


def test_a_state_folder_open_to_others_is_closed_and_a_shared_open_one_refused(tmp_path):
    """A pre-made state folder others can write to (mode 0777: they could swap the registry for theirs or a link) is
    closed to 0700 with one line, once; a registry named in a folder everyone can write to without the sticky bit is
    refused before anything is queued; /tmp's kind (1777) and a group's shared folder (2770) are kept."""
    state = tmp_path / "state" / "hpcqa"
    state.mkdir(parents=True)
    state.chmod(0o777)
    for said in (True, False):
        r = run_cli("status", env=_home(tmp_path))
        assert r.returncode == 0, r.stderr
        assert ("was writable by others (mode 0777): made 0700" in r.stderr) is said, r.stderr
        assert (state.stat().st_mode & 0o777) == 0o700
    (tmp_path / "prog.py").write_text(PROG)
    for mode, refused in ((0o777, True), (0o1777, False), (0o2770, False)):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        out = tmp_path / f"out-{mode:o}"
        r = run_cli(
            "submit",
            QUICK,
            "--set",
            f"job.registry={json.dumps(str(shared / 'reg.sqlite'))}",
            "--set",
            f"job.output_dir={json.dumps(str(out))}",
            "--",
            "python",
            "prog.py",
            env=_home(tmp_path),
            cwd=tmp_path,
        )
        if refused:
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
            assert (
                "writable by everyone (mode 0777, no sticky bit)" in r.stderr
                and f"chmod o-w {shared}" in r.stderr
            )
            assert (
                not out.exists() and not (shared / "reg.sqlite").exists()
            )  # nothing queued, nothing made
        else:
            assert r.returncode == 0, r.stderr[-2000:]
            assert (shared / "reg.sqlite").is_file()


@pytest.mark.skipif(
    os.getuid() != 0, reason="needs root to give the folder to another user (CI runs as root)"
)
def test_a_state_folder_of_another_user_open_to_others_is_refused(tmp_path):
    state = tmp_path / "state" / "hpcqa"
    state.mkdir(parents=True)
    os.chown(state, 65534, 65534)
    state.chmod(0o777)
    r = run_cli("status", env=_home(tmp_path))
    assert (
        r.returncode == 2
        and "belongs to uid 65534 and others can write to it (mode 0777): not used" in r.stderr
    )
    assert (state.stat().st_mode & 0o777) == 0o777 and not (state / "registry.sqlite").exists()
