"""Issue 29's cases, each as a careless or hostile user would meet it: the snapshot and the pickle a job loads are
checked before anything runs from them, modes do not follow the umask, names and job roots are safe, cancel never
signals a recycled pid, sbatch_extra cannot contradict the plan, and credentials are refused by their shape."""

import json
import os
import pickle
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcqa.core import config, plan, sweep
from hpcqa.errors import ConfigError, SubmitError, UsageError
from hpcqa.executors import common, snapshot
from hpcqa.executors.local import executor as local
from hpcqa.executors.slurm.executor import SubmititSlurm
from hpcqa.fsutil import owner_umask
from hpcqa.rank import picklecheck
from hpcqa.record.jobdir import JobDir, JobRoot
from tests.conftest import ROOT, SLURM_HERE

HOST = plan.HostProbe(
    schedulers=SLURM_HERE, ccl_bindings=False, libraries={}, python=sys.executable
)


def quick(tmp_path, *overrides):
    return config.load(
        ROOT / "configs/quickstart.toml",
        [f"job.output_dir={json.dumps(str(tmp_path))}", "cluster.executor=slurm", *overrides],
    )


# ---------------------------------------------------------------- the snapshot


def _snap(tmp_path):
    snap = snapshot.plan(JobRoot.of(str(tmp_path), "j"))
    with owner_umask():
        snapshot.write(snap)
    return snap


def _verify(snap):
    return subprocess.run(
        ["bash", "-c", snapshot.verify_command(sys.executable, snap)],
        capture_output=True,
        text=True,
    )


@pytest.mark.process
def test_a_fresh_snapshot_verifies_with_the_scripts_own_command(tmp_path):
    snap = _snap(tmp_path)
    r = _verify(snap)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((snap.path / "MANIFEST.json").read_text())
    assert manifest["rank/__init__.py"] and manifest["rank/train/csrc/fused_attention.cpp"]


@pytest.mark.parametrize(
    "tamper,named",
    [
        (
            lambda p: (p / "hpcqa/rank/__init__.py").write_text("open('PWNED', 'w')\n"),
            "hpcqa/rank/__init__.py",
        ),
        (lambda p: (p / "json.py").write_text("open('PWNED', 'w')\n"), "json.py"),
        (lambda p: (p / "hpcqa/rank/evil.py").write_text(""), "hpcqa/rank/evil.py"),
        (lambda p: (p / "hpcqa/rank/__pycache__").mkdir(), "__pycache__"),
        (lambda p: (p / "snapcheck.py").write_text("pass\n"), "snapcheck.py changed"),
        (  # the kernel the ranks compile is part of what was submitted
            lambda p: (p / "hpcqa/rank/train/csrc/fused_attention.cpp").write_text("int x;\n"),
            "hpcqa/rank/train/csrc/fused_attention.cpp",
        ),
        (lambda p: (p / "hpcqa/rank/evil.so").write_text(""), "hpcqa/rank/evil.so"),
    ],
)
@pytest.mark.process
def test_a_changed_snapshot_is_refused_naming_the_file_before_any_import(tmp_path, tamper, named):
    snap = _snap(tmp_path)
    tamper(snap.path)
    r = _verify(snap)
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (Path.cwd() / "PWNED").exists()
    with pytest.raises(SubmitError):
        snapshot.verify(snap)  # the local executor's check before its controller starts


@pytest.mark.process
def test_a_tampered_existing_snapshot_is_set_aside_and_made_again(tmp_path, capsys):
    snap = _snap(tmp_path)
    (snap.path / "hpcqa/rank/__init__.py").write_text("open('PWNED', 'w')\n")
    with owner_umask():
        snapshot.write(
            snap, lambda line: print(line, file=sys.stderr)
        )  # as the executors pass submit's `say`
    assert _verify(snap).returncode == 0
    assert (
        list(snap.path.parent.glob(f"{snap.digest}.damaged-*"))
        and "did not verify" in capsys.readouterr().err
    )


@pytest.mark.process
def test_the_job_script_checks_the_snapshot_before_srun(tmp_path):
    cfg = quick(tmp_path)
    request = SubmititSlurm(snapshot=True).dry_run(sweep.single(plan.build_plan(cfg, HOST)))
    text = request.scripts[0]
    assert text.index("sha256sum --check") < text.index(" -I ") < text.index("\nsrun ")


# ---------------------------------------------------------------- the pickle


def _pickle(path, digest, obj=None):
    from submitit.core.utils import DelayedSubmission

    from hpcqa.rank.job import RankJob

    d = DelayedSubmission(obj if obj is not None else RankJob(path, digest))
    d.set_timeout(60, 3)
    return pickle.dumps(d)


def test_the_submitted_pickle_passes_and_a_swapped_one_does_not():
    good = _pickle("/j/plans/a/task-0.json", "abc")
    assert picklecheck.problems(good, "/j/plans/a/task-0.json", "abc") is None
    assert "not the submitted" in picklecheck.problems(good, "/j/plans/b/task-0.json", "abc")

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch PWNED",))

    bad = picklecheck.problems(pickle.dumps(Evil()), "/j/plans/a/task-0.json", "abc")
    assert bad and ("REDUCE" in bad or "posix.system" in bad or "os.system" in bad)
    assert "not a readable pickle" in picklecheck.problems(
        good[:40], "/j/plans/a/task-0.json", "abc"
    )


def test_a_pickle_others_can_write_is_refused(tmp_path):
    p = tmp_path / "j" / "1_submitted.pkl"
    p.parent.mkdir(mode=0o700)
    from submitit.core.utils import DelayedSubmission

    from hpcqa.rank.job import RankJob

    delayed = DelayedSubmission(RankJob("/x", "d"))
    delayed.set_timeout(60, 3)
    delayed.dump(p)  # as submit (and submitit's requeue) write it
    p.chmod(0o600)
    from hpcqa.rank import job

    assert picklecheck.check(p, "/x", "d", lambda: job.pickles("/x", "d", 60, 3), wait_s=0) is None
    p.chmod(0o664)
    assert "writable by others" in picklecheck.check(
        p, "/x", "d", lambda: job.pickles("/x", "d", 60, 3), wait_s=0
    )
    p.chmod(0o600)
    assert "differs" in picklecheck.check(
        p, "/x", "d", lambda: job.pickles("/x", "d", 30, 3), wait_s=0
    )


def test_a_plan_file_is_checked_against_the_folder_the_script_names(tmp_path):
    from hpcqa.record import jobdir

    group = tmp_path / "plans" / "aaaa"
    group.mkdir(parents=True)
    assert jobdir.plan_problem(group / "task-0.json", "aaaa") is None
    assert "not aaaa" in jobdir.plan_problem(group / "task-0.json", "bbbb")
    arr = tmp_path / "plans" / jobdir.plan_group_digest(["d0", "d1"])
    arr.mkdir()
    (arr / "index.json").write_text(jobdir.plan_index_text(["d0", "d1"]))
    assert jobdir.plan_problem(arr / "task-1.json", "d1") is None
    assert "submitted d1" in jobdir.plan_problem(arr / "task-1.json", "dX")
    (arr / "index.json").write_text(jobdir.plan_index_text(["d0", "dX"]))  # the index swapped too
    assert "is not the index" in jobdir.plan_problem(arr / "task-1.json", "dX")
    assert (
        jobdir.plan_problem(tmp_path / "job" / "plan.json", "x") is None
    )  # a rendered script's own plan


# ---------------------------------------------------------------- modes, names, job roots


@pytest.mark.process
@pytest.mark.parametrize("group_readable", [False, True])
def test_modes_do_not_follow_the_umask(tmp_path, group_readable):
    """Written under umask 000: nothing is group- or other-writable; group_readable gives group read, no more."""
    cfg = quick(tmp_path, "job.name=modes", f"job.group_readable={str(group_readable).lower()}")
    request = SubmititSlurm(snapshot=True).dry_run(sweep.single(plan.build_plan(cfg, HOST)))
    old = os.umask(0o000)
    try:
        with owner_umask(group_readable):
            common.write_files(request)
            snapshot.write(request.code)
    finally:
        os.umask(old)
    allowed = 0o750 if group_readable else 0o700
    for p in [tmp_path / "modes", *(tmp_path / "modes").rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert not mode & ~allowed and (mode & 0o040 or not group_readable), (
            f"{p} has mode {mode:o}"
        )


@pytest.mark.parametrize("name", [".", "..", ".hidden", "a/b", "x" * 65])
def test_unsafe_job_names_are_refused(name):
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/quickstart.toml", [f"job.name={json.dumps(name)}"])
    assert e.value.key == "job.name"


def test_a_job_root_that_is_a_symlink_or_holds_one_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "j").symlink_to(target)
    with pytest.raises(UsageError) as e:
        JobRoot.of(str(tmp_path / "out"), "j").ensure()
    assert "symlink" in e.value.message and stat.S_IMODE(target.stat().st_mode) == 0o755
    (tmp_path / "out2" / "k" / "plans").mkdir(parents=True)
    (tmp_path / "out2" / "k" / "plans" / "abc").symlink_to(target)
    with pytest.raises(UsageError) as e:
        JobRoot.of(str(tmp_path / "out2"), "k").ensure()
    assert "plans/abc is a symlink" in e.value.message
    (tmp_path / "out3" / "m").mkdir(parents=True)
    (tmp_path / "out3" / "m" / "123-abcdef").symlink_to(target)  # a job folder
    with pytest.raises(UsageError):
        JobRoot.of(str(tmp_path / "out3"), "m").ensure()


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user owns needs root")
def test_a_job_root_owned_by_someone_else_is_refused(tmp_path):
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, 12345, 12345)
    with pytest.raises(UsageError) as e:
        JobRoot(root).ensure()
    assert "uid 12345" in e.value.message


# ---------------------------------------------------------------- cancel acts on the recorded process only


class Row:
    def __init__(self, job_id, folder):
        self.id, self.folder, self.final, self.executor = str(job_id), str(folder), False, "local"


@pytest.mark.process
def test_cancel_never_signals_a_recycled_pid(tmp_path):
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        jd = JobDir(tmp_path / "job")
        jd.path.mkdir()
        # the job's controller had this pid once, but started at another time: the pid was recycled
        real = local.identity(stranger.pid)
        (jd.controller_record).write_text(json.dumps({"pid": stranger.pid, "identity": real + "0"}))
        out = local.LocalJobs().cancel([Row(stranger.pid, jd.path)], True)
        assert "not running" in out[0]
        jd.controller_record.unlink()
        out = local.LocalJobs().cancel([Row(stranger.pid, jd.path)], True)
        assert "nothing signalled" in out[0]
        time.sleep(0.2)
        assert stranger.poll() is None, "an unrelated process was signalled"
        assert local.local_state(str(stranger.pid), jd) != "RUNNING"
    finally:
        stranger.kill()
        stranger.wait()


# ---------------------------------------------------------------- sbatch_extra


@pytest.mark.parametrize(
    "flag,names",
    [
        ("--output=/tmp/x", "job.output_dir"),
        ("--array=0-3", "[sweep]"),
        ("--job-name=x", "job.name"),
        ("--export=NONE", "launch.env"),
        ("--nodes=3", "cluster.nodes"),
        ("--ntasks-per-node=8", "ranks_per_socket"),
        ("--cpus-per-task=4", "cores per rank"),
        ("--nod=3", "cluster.nodes"),
        ("--out=/tmp/x", "job.output_dir"),
        ("--signal=USR1@30", "cluster.signal_delay_s"),
        ("--requeue", "cluster.requeue_on_node_fail"),
        ("--open-mode=truncate", "appended"),
        ("--chdir=/", "submit from"),
        ("--clusters=other", "SLURM_CLUSTERS"),
        ("--time=10", "cluster.time_limit_min"),
    ],
)
def test_sbatch_extra_cannot_contradict_the_plan(flag, names):
    with pytest.raises(ConfigError) as e:
        config.load(
            ROOT / "configs/quickstart.toml", [f"cluster.sbatch_extra={json.dumps([flag])}"]
        )
    assert e.value.key == "cluster.sbatch_extra[0]" and names in e.value.hint, e.value.render()


@pytest.mark.parametrize(
    "flag",
    [
        "--gres=gpu:1",
        "--gpus=2",
        "--gpus-per-node=4",
        "--cpus-per-gpu=8",
        "--tres-per-task=gres/gpu:1",
    ],
)
def test_gpu_requests_are_refused(flag):
    with pytest.raises(ConfigError) as e:
        config.load(
            ROOT / "configs/quickstart.toml", [f"cluster.sbatch_extra={json.dumps([flag])}"]
        )
    assert "GPU" in e.value.detail


def test_harmless_sbatch_extra_passes():
    cfg = config.load(
        ROOT / "configs/quickstart.toml",
        ["cluster.sbatch_extra=['--reservation=ml','--hold','--mail-type=END','--comment=a b']"],
    )
    assert len(cfg.cluster.sbatch_extra) == 4


# ---------------------------------------------------------------- secrets by value and by name

SECRETS = [
    "hf_" + "a1B2c3D4" * 4,
    "ghp_" + "Z9y8X7w6" * 5,
    "github_pat_" + "11ABCDEFG0" * 3,
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-1234567890-abcdefghij",
    "glpat-" + "x" * 20,
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "postgres://user:hunter2@db.example:5432/x",
    "sk-" + "A" * 40,
    "sk_live_" + "b" * 24,
    "AIza" + "S" * 35,
    "npm_" + "n" * 36,
    "pypi-" + "p" * 60,
    "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.sig",
    "Bearer " + "t" * 30,
    "https://hooks.slack.com/services/T0/B0/x",
    "https://x.example/a?token=abcdef12",
]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize(
    "where",
    [
        "launch.env.PLAIN_NAME",
        "cluster.setup",
        "cluster.sbatch_extra",
        "model.name_or_path",
        "k8s.node_selector.zone",
        "sweep",
    ],
)
def test_a_credential_is_refused_by_its_shape_and_never_echoed(tmp_path, secret, where):
    if where in ("cluster.setup", "cluster.sbatch_extra"):
        text = f"export X={secret}" if where == "cluster.setup" else f"--comment={secret}"
        args = [f"{where}={json.dumps([text])}"]
    elif where == "sweep":
        path = tmp_path / "s.toml"
        path.write_text(
            (ROOT / "configs/quickstart.toml").read_text()
            + f'\n[sweep]\n"model.name_or_path" = ["a", {json.dumps(secret)}]\n'
        )
        with pytest.raises(ConfigError) as e:
            sweep.expand(config.load_raw(path), str(path))
        assert secret not in e.value.render() and "looks like" in e.value.detail
        return
    else:
        args = [f"{where}={json.dumps(secret)}"]
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/quickstart.toml", args)
    assert e.value.key.startswith(where.split(".zone")[0]) and "looks like" in e.value.detail
    assert secret not in e.value.render()


@pytest.mark.parametrize(
    "name",
    [
        "TOKEN",
        "APIKEY",
        "AWS_ACCESS_KEY_ID",
        "GH_PAT",
        "GITHUB_PAT",
        "DB_PASS",
        "SSH_PRIVATE",
        "AUTH_HEADER",
        "HF_AUTH",
        "MY_KEY",
    ],
)
def test_credential_names_are_refused(name):
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/quickstart.toml", [f'launch.env={{{name} = "x"}}'])
    assert e.value.key == f"launch.env.{name}"
    with pytest.raises(ConfigError):
        config.load(ROOT / "configs/quickstart.toml", [f'cluster.setup=["export {name}=x"]'])


@pytest.mark.parametrize(
    "name",
    [
        "PYTHONPATH",
        "PYTHONHOME",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "HPCQA_CODE",
        "HPCQA_PLAN",
        "SUBMITIT_EXECUTOR",
    ],
)
def test_launch_env_may_not_set_what_hpcqa_manages(name):
    with pytest.raises(ConfigError) as e:
        config.load(ROOT / "configs/quickstart.toml", [f'launch.env={{{name} = "/x"}}'])
    assert e.value.key == f"launch.env.{name}" and "itself" in e.value.detail


def test_a_credential_read_from_elsewhere_in_setup_passes():
    lines = ["export HF_TOKEN=$(cat ~/.hf_token)", 'export WANDB_API_KEY="$MY_WANDB"']
    cfg = config.load(ROOT / "configs/quickstart.toml", [f"cluster.setup={json.dumps(lines)}"])
    assert list(cfg.cluster.setup) == lines


@pytest.mark.parametrize("flag", ["--overcommit", "--oversubscribe", "--ntasks-per-gpu=1"])
def test_oversubscription_and_gpu_tasks_are_refused(flag):
    with pytest.raises(ConfigError):
        config.load(
            ROOT / "configs/quickstart.toml", [f"cluster.sbatch_extra={json.dumps([flag])}"]
        )


def test_ordinary_names_pass():
    cfg = config.load(
        ROOT / "configs/quickstart.toml",
        ['launch.env={TOKENIZERS_PARALLELISM = "false", KEYBOARD = "us", HF_HUB_OFFLINE = "1"}'],
    )
    assert cfg.launch.env["TOKENIZERS_PARALLELISM"] == "false"


@pytest.mark.slow
@pytest.mark.parametrize("group_readable", [False, True])
def test_a_real_local_job_under_a_group_writable_umask_writes_nothing_others_can_write(
    tmp_path, group_readable
):
    """The whole job -- plans, snapshot, submitit's pickle and logs, the ranks' reports, checkpoints, results, the
    registry -- submitted from a shell whose umask is 000."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    env.update(
        HPCQA_CACHE=str(tmp_path / "cache"), HPCQA_REGISTRY=str(tmp_path / "out" / "reg.sqlite")
    )
    args = [
        sys.executable,
        "-m",
        "hpcqa",
        "submit",
        "configs/quickstart.toml",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
        "--set",
        "model.name_or_path=builtin:tiny-bert",
        "--set",
        "data.synthetic_train_examples=60",
        "--set",
        "data.synthetic_eval_examples=20",
        "--set",
        "train.max_steps=4",
        "--set",
        "train.save_steps=2",
        "--set",
        "train.bf16=false",
        "--set",
        f"job.group_readable={str(group_readable).lower()}",
    ]
    r = subprocess.run(
        ["bash", "-c", 'umask 000; exec "$@"', "bash", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    found = [p for p in (tmp_path / "out").rglob("*") if not p.is_symlink()]
    assert any(p.name.endswith("_submitted.pkl") for p in found) and any(
        p.name == "hpcqa-complete.json" for p in found
    )
    allowed = 0o750 if group_readable else 0o700
    for p in [tmp_path / "out" / "quickstart", *found]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert not mode & ~allowed, f"{p} has mode {mode:o}"


@pytest.mark.process
def test_an_exited_controller_not_yet_reaped_is_not_running(tmp_path):
    """A zombie (exited; its parent -- here the API's own process -- has not waited for it) keeps its pid and start
    time but runs nothing: the job is not RUNNING (seen: the API example waited forever)."""
    child = subprocess.Popen(["true"])
    try:
        end = time.time() + 10
        while (
            Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            and time.time() < end
        ):
            time.sleep(0.05)
        jd = JobDir(tmp_path)
        jd.controller_record.write_text(
            json.dumps({"pid": child.pid, "identity": "recorded-at-submit"})
        )
        assert local.identity(child.pid) is None and not local.controller_alive(child.pid, jd)
    finally:
        child.wait()


def test_writers_in_a_job_folder_do_not_follow_a_programs_links(tmp_path):
    """A job's program may leave links where hpcqa writes next: OUT.set-aside or checkpoints/set-aside (a checkpoint
    moved aside), a subfolder of its working folder (the next attempt's re-lay of the submitted files). None is
    written through: set-aside refuses (its caller keeps the checkpoint and says so), the re-lay makes a real
    folder in the link's place; the link's target is untouched."""
    from hpcqa import fsutil
    from hpcqa.record import worktree
    from hpcqa.record.jobdir import JobDir

    outside = tmp_path / "outside"
    outside.mkdir()
    ckpts = tmp_path / "job" / "checkpoints"
    (ckpts / "checkpoint-4").mkdir(parents=True)
    (ckpts / "set-aside").symlink_to(outside)
    with pytest.raises(OSError):
        JobDir.set_aside(ckpts / "checkpoint-4", 1)
    assert (ckpts / "checkpoint-4").is_dir() and not list(outside.iterdir())
    (ckpts / "set-aside").unlink()
    assert (
        JobDir.set_aside(ckpts / "checkpoint-4", 1)
        == ckpts / "set-aside" / "checkpoint-4.attempt-1"
    )
    # the re-lay: the submitted tree has sub/a.py; the program made sub a link to outside
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.py").write_text("x = 1\n")
    (src / "run.py").write_text("print(1)\n")
    tree = worktree.scan(str(src))
    worktree.write(tree, tmp_path / "code")
    copy = tree.folder(tmp_path / "code")
    work = tmp_path / "work"
    worktree.lay(str(copy), work)
    (work / "sub" / "a.py").unlink()
    (work / "sub").rmdir()
    (work / "sub").symlink_to(outside)
    worktree.lay(str(copy), work)
    assert not (work / "sub").is_symlink() and (work / "sub" / "a.py").read_text() == "x = 1\n"
    assert not list(outside.iterdir())
    assert fsutil.own_folder(tmp_path / "new").is_dir()


@pytest.mark.process
def test_cancel_never_signals_a_process_a_forged_controller_record_names(tmp_path):
    """controller.json is in the job's folder: anything of the user's can write there the exact identity (boot id,
    start time, owner) of another process that took a dead controller's pid. Its command line, which the kernel
    keeps, is not submitit's controller of this folder: cancel signals nothing and status does not call the job
    running; nor does a process whose arguments merely name the module and the folder. The command line of this
    folder's controller is recognised."""
    jd = JobDir(tmp_path / "7-abc")
    jd.path.mkdir()
    stranger = subprocess.Popen(["sleep", "60"])
    twin = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "submitit.local._local", str(jd.path)]
    )
    controller = subprocess.Popen(  # its command line ends as a controller's: -m submitit.local._local FOLDER
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "submitit.local._local"]
        + [str(tmp_path / "%j-abc")]
    )
    try:
        for p in (stranger, twin):
            forged = {"pid": p.pid, "identity": local.identity(p.pid)}
            jd.controller_record.write_text(json.dumps(forged))
            out = local.LocalJobs().cancel([Row(p.pid, jd.path)], True)
            assert "not running" in out[0], out
            assert not local.controller_alive(p.pid, jd)
        time.sleep(0.2)
        assert stranger.poll() is None and twin.poll() is None, (
            "a process not the job's was signalled"
        )
        assert not local.controls(twin.pid, tmp_path / "other-abc")  # its folder is not this one
        assert local.controls(controller.pid, tmp_path / f"{controller.pid}-abc")
    finally:
        for p in (stranger, twin, controller):
            p.kill()
            p.wait()
