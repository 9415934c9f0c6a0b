"""Every string key of the config schema x a hostile corpus, through every file hpcqa writes that something executes
or parses: the sbatch script submit queues (run for real with stub srun/python), the rendered srun script, the
PyTorchJob YAML. Each value is either refused at validation, naming its key, or arrives unchanged and runs nothing.
Generated from the schema: a key added later is covered without editing this file."""

import dataclasses
import json
import re
import shlex
import stat
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from hpcqa.core import config, plan, sweep
from hpcqa.errors import ConfigError
from hpcqa.executors import render
from hpcqa.executors.k8s import image as k8s_image
from hpcqa.executors.k8s import manifest, pods, pytorchjob, trainjob
from hpcqa.executors.slurm.executor import SubmititSlurm
from tests.conftest import ROOT, SLURM_HERE

HOST = plan.HostProbe(schedulers=SLURM_HERE, ccl_bindings=False, libraries={}, python="python3")

CORPUS = {
    "quotes": 'it\'s "q"',
    "subst": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "semicolon": "a; touch PWNED; b",
    "newline": "a\ntouch PWNED",
    "cr": "a\rb",
    "nul": "a\0b",
    "spaces": "a b  c",
    "unicode": "données-ü-日本",
    "long": "x" * 5000,
}
CONTROL = {"newline", "cr", "nul"}


def string_keys() -> list[tuple[str, str]]:
    """(dotted key, kind) for every str, list-of-str and table-of-str key of the schema."""
    out = []
    for section, cls in config.SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            origin = typing.get_origin(tp)
            if tp is str:
                out.append((f"{section}.{f.name}", "str"))
            elif origin is tuple:
                out.append((f"{section}.{f.name}", "list"))
            elif origin is typing.get_origin(typing.Mapping[str, str]) or "Mapping" in str(tp):
                out.append((f"{section}.{f.name}", "table"))
    return out


def override(key: str, kind: str, text: str) -> str:
    if kind == "list":
        return f"{key}={json.dumps([text])}"
    if kind == "table":
        return f"{key}={{HOSTILE_VALUE = {json.dumps(text)}}}"
    return f"{key}={json.dumps(text)}"


def _stub_bin(tmp_path: Path) -> Path:
    b = tmp_path / "bin"
    b.mkdir()
    (b / "srun").write_text(
        '#!/bin/bash\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$FAKE_LOG"\n'
    )
    # the snapshot check (sha256sum of its checker, then `python -I checker`): stubs that record and succeed
    (b / "python3").write_text('#!/bin/bash\necho python "$@" >> "$FAKE_LOG.python"\n')
    (b / "sha256sum").write_text('#!/bin/bash\ncat >> "$FAKE_LOG.sha256"\n')
    for f in b.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return b


def sbatch_arguments(line: str) -> list[str]:
    """An #SBATCH line's arguments as sbatch itself splits them (src/sbatch/opt.c, _get_argument): whitespace ends
    an argument, quotes group, a backslash escapes the next character anywhere, an unquoted '#' starts a comment."""
    args, cur, quoted, q, esc, i, started = [], [], False, "", False, 0, False
    text = line[len("#SBATCH") :]
    while i < len(text):
        c = text[i]
        i += 1
        if esc:
            cur.append(c)
            esc, started = False, True
        elif c == "\\":
            esc = True
        elif quoted:
            if c == q:
                quoted = False
            else:
                cur.append(c)
        elif c in "\"'":
            quoted, q, started = True, c, True
        elif c == "#":
            break
        elif c.isspace():
            if started:
                args.append("".join(cur))
                cur, started = [], False
        else:
            cur.append(c)
            started = True
    if started:
        args.append("".join(cur))
    return args


@pytest.mark.parametrize("name", sorted(CORPUS))
@pytest.mark.parametrize("key,kind", string_keys())
def test_every_string_key_is_refused_or_arrives_unchanged(tmp_path, monkeypatch, key, kind, name):
    text = CORPUS[name]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    overrides = ["job.output_dir=" + json.dumps(str(work / "out")), "cluster.executor=slurm"]
    if key != "job.output_dir":
        overrides.append(override(key, kind, text))
    else:
        overrides = ["job.output_dir=" + json.dumps(str(work / text)), "cluster.executor=slurm"]
    try:
        cfg = config.load(ROOT / "configs/squad_spr.toml", overrides)
    except ConfigError as e:
        assert e.key.startswith(key), (e.key, key)
        assert "\n" not in e.detail and "\0" not in e.render()
        return
    assert name not in CONTROL, f"{key} accepted a control character"
    lp = plan.build_plan(cfg, HOST)
    # 1. the sbatch script submit queues, exactly as the dry run shows it: executed with stub srun and python
    request = SubmititSlurm(snapshot=True).dry_run(sweep.single(lp))
    script = request.scripts[0]
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            args = sbatch_arguments(line)
            assert len(args) == 1, (line, args)
            opt, _, value = args[0].partition("=")
            if opt == "--job-name":
                assert value == cfg.job.name
            if opt in ("--output", "--error"):
                assert value.startswith(str(Path(cfg.job.output_dir).absolute() / cfg.job.name))
    (tmp_path / "job.sbatch").write_text(script)
    log = tmp_path / "argv"
    env = {
        "PATH": f"{_stub_bin(tmp_path)}:/usr/bin:/bin",
        "SLURM_JOB_ID": "31",
        "FAKE_LOG": str(log),
        "SLURM_JOB_NODELIST": "cn[1-4]",
    }
    r = subprocess.run(
        ["bash", str(tmp_path / "job.sbatch")], cwd=work, env=env, capture_output=True, text=True
    )
    if (
        key == "cluster.python"
    ):  # no such interpreter: the script stops at the snapshot check, having run nothing
        assert (
            r.returncode == 2
            and "command not found" in r.stderr
            and not list(tmp_path.rglob("PWNED"))
        ), r.stderr
        return
    assert r.returncode == 0, r.stderr
    if (
        key == "cluster.setup"
    ):  # the one key whose values are commands: each runs as written, on a line of its own
        assert text in script.splitlines()
    else:
        assert not list(tmp_path.rglob("PWNED")), f"{key}: config text was executed"
    argv = log.read_text().split("\0")[:-1]
    assert (
        argv[0] == "--unbuffered" and request.files[0].path in argv
    )  # the plan file, whole, as one argument
    # 2. the rendered srun script carries the plan verbatim (its heredoc) and the job root as one word
    rendered = render.standalone(lp, "srun")
    body = rendered.split("<<'", 1)[1].split("\n", 2)[1]
    assert json.loads(body)["config"] == json.loads(json.dumps(cfg.to_dict()))
    r = subprocess.run(["bash", "-n"], input=rendered, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr
    # 3. the PyTorchJob's YAML parses back to the same plan
    try:
        docs = list(
            yaml.safe_load_all(
                manifest.to_yaml(
                    manifest.to_dicts(
                        pytorchjob.objects(
                            plan.build_plan(pods.pod_config(cfg), k8s_image.image_host(HOST, cfg))
                        )
                    )
                )
            )
        )
    except Exception as e:  # noqa: BLE001 - only hpcqa's own refusal (a name that cannot be a k8s name) is fine
        assert type(e).__name__ in ("ConfigError", "PlanError"), e
        return
    (job,) = docs
    (c,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    stored = json.loads(next(e["value"] for e in c["env"] if e["name"] == "HPCQA_PLAN_JSON"))
    section, _, field = key.partition(".")
    if section != "k8s" and key not in (
        "job.output_dir",
        "model.cache_dir",
        "data.cache_dir",
        "cluster.python",
    ):
        assert json.dumps(stored["config"][section][field]) == json.dumps(
            getattr(getattr(cfg, section), field)
        ) or isinstance(getattr(getattr(cfg, section), field), (tuple, dict))


def test_the_schema_has_the_keys_this_test_expects():
    keys = dict(string_keys())
    assert {
        "job.output_dir",
        "cluster.setup",
        "cluster.sbatch_extra",
        "launch.env",
        "model.name_or_path",
        "k8s.image",
        "k8s.secret_env",
    } <= set(keys)


@pytest.mark.parametrize(
    "bad", ["a\nb", "a\rb", "\0", "a\tb", "a\x1bb", "a\x7fb", "a\x85b", "a\u2028b"]
)
def test_a_control_character_is_refused_in_every_kind_of_value(bad):
    for key, kind in string_keys():
        with pytest.raises(ConfigError) as e:
            config.load(ROOT / "configs/squad_spr.toml", [override(key, kind, bad)])
        assert e.value.key.startswith(key)


def test_the_directive_emitter_round_trips_through_sbatchs_parser():
    for text in CORPUS.values():
        if any(c in text for c in "\n\r\0"):
            with pytest.raises(ValueError):
                render.directive("output", text)
            continue
        assert sbatch_arguments(render.directive("output", text)) == ["--output=" + text]
    assert sbatch_arguments(render.directive("comment", "a\\b #c 'd'")) == ["--comment=a\\b #c 'd'"]


def _all_keys(text: str, exclude: set[str]) -> list[str]:
    """Overrides setting every string key that accepts `text` to it (alone, each is tested above)."""
    out = []
    for key, kind in string_keys():
        if key in exclude:
            continue
        try:
            config.load(ROOT / "configs/squad_spr.toml", [override(key, kind, text)])
        except ConfigError:
            continue
        out.append(override(key, kind, text))
    return out


COMPLETE = {key for key, _ in string_keys()}  # every string key


# not set all at once: the job root (the scripts' folders), the interpreter the scripts call (hostile: "command not
# found", tested per key above), the commands of cluster.setup (run by design), and the pods' volume paths
COMMANDS_AND_PATHS = {"job.output_dir", "cluster.python", "cluster.setup", "k8s.mount_path"}


@pytest.mark.parametrize("name", sorted(set(CORPUS) - CONTROL))
def test_every_key_at_once_through_the_rendered_scripts_runs_nothing(tmp_path, monkeypatch, name):
    """The rendered srun, mpirun and plain-hosts scripts and the PyTorchJob's pod script, executed with stub
    launchers, with every string key set to the same hostile text: nothing runs, and the plan each writes for its
    ranks holds every value unchanged; the Dockerfile gets no line of config text."""
    text = CORPUS[name]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    mount = tmp_path / "vol"
    keys = _all_keys(text, COMMANDS_AND_PATHS | {"k8s.image"})
    # the image must name a tag (render refuses an unpinned one): the hostile text with one, where the key takes it
    image = _all_keys(text + ":1", set(COMPLETE) - {"k8s.image"}) or [
        'k8s.image="registry.example.com/hpcqa:1"'
    ]
    cfg = config.load(
        ROOT / "configs/squad_spr.toml",
        [
            *keys,
            *image,
            f"job.output_dir={json.dumps(str(work / 'out'))}",
            f"k8s.mount_path={json.dumps(str(mount))}",
        ],
    )
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "srun").write_text(
        '#!/bin/bash\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$FAKE_LOG"\n'
    )
    (bin_ / "mpirun").write_text((bin_ / "srun").read_text())
    real = shlex.quote(__import__("sys").executable)
    (bin_ / "python3").write_text(
        f'#!/bin/bash\nif [ "$1 $2" = "-m hpcqa" ]; then exec {real} "$@"; fi\n'
        'for a in "$@"; do printf "%s\\0" "$a"; done >> "$FAKE_LOG.python"\n'
    )
    for f in bin_.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    env = {
        "PATH": f"{bin_}:/usr/bin:/bin",
        "SLURM_JOB_ID": "31",
        "SLURM_JOB_NODELIST": "cn[1-4]",
        "PYTHONPATH": str(ROOT),
        "FAKE_LOG": str(tmp_path / "argv"),
    }
    lp = plan.build_plan(cfg, HOST)
    scripts = {
        "srun": render.standalone(lp, "srun"),
        "mpirun": render.standalone(plan.build_plan(cfg, HOST, launcher="mpirun"), "mpirun"),
        "hosts": render.standalone(
            plan.build_plan(cfg, HOST, launcher="mpirun"), "mpirun", hosts=("h1", "h2", "h3", "h4")
        ),
    }
    for label, script in scripts.items():
        path = tmp_path / f"{label}.sh"
        path.write_text(script)
        r = subprocess.run(
            ["bash", str(path)], cwd=work, env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, (label, r.stderr)
        assert not list(tmp_path.rglob("PWNED")), f"{label}: config text was executed"
        (written,) = (work / "out" / "squad-spr").glob("*/plan.json")  # the one this script wrote
        assert json.loads(written.read_text())["config"] == json.loads(json.dumps(cfg.to_dict())), (
            label
        )
        written.unlink()
    # the pod script, as the kubelet starts it (node 0 of the PyTorchJob), with a stub interpreter
    # launch.pass_env is refused for pods (no submitting shell): its hostile text is tested in the scripts above
    pod_cfg = pods.pod_config(
        dataclasses.replace(cfg, launch=dataclasses.replace(cfg.launch, pass_env=()))
    )
    docs = yaml.safe_load_all(
        manifest.to_yaml(
            manifest.to_dicts(
                pytorchjob.objects(plan.build_plan(pod_cfg, k8s_image.image_host(HOST, cfg)))
            )
        )
    )
    (job,) = docs
    (c,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    pj_env = {
        e["name"]: e["value"] for e in c["env"] if "value" in e and e["name"].startswith("HPCQA_")
    }
    r = subprocess.run(
        c["command"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **env,
            **pj_env,
            "HPCQA_NODE_RANK": "0",
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": "1",
        },
    )
    assert r.returncode == 0 and (tmp_path / "argv.python").exists(), (
        r.stderr
    )  # it reached the ranks
    assert not list(tmp_path.rglob("PWNED")), "the pod script executed config text"
    stored = json.loads(pj_env["HPCQA_PLAN_JSON"])["config"]
    assert stored["model"]["name_or_path"] == cfg.model.name_or_path and stored["launch"][
        "env"
    ] == dict(cfg.launch.env), r.stderr
    # the TrainJob's pod: its command (the script) with the plan from its environment, as JobSet starts node 0
    (tmp_path / "argv.python").unlink()
    runtime, job = yaml.safe_load_all(
        manifest.to_yaml(
            trainjob.objects(
                plan.build_plan(pod_cfg, k8s_image.image_host(HOST, cfg), launcher="trainjob")
            )
        )
    )
    tj_env = {e["name"]: e["value"] for e in job["spec"]["trainer"]["env"]}
    r = subprocess.run(
        job["spec"]["trainer"]["command"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **env,
            **tj_env,
            "PET_NODE_RANK": "0",
            "PET_NNODES": "4",
            "PET_MASTER_ADDR": "localhost",
            "PET_MASTER_PORT": "1",
            "HPCQA_JOB_UID": "u-1",
            "HPCQA_RESTART_ATTEMPT": "0",
        },
    )
    assert r.returncode == 0 and (tmp_path / "argv.python").exists(), r.stderr
    assert not list(tmp_path.rglob("PWNED")), "the TrainJob's pod script executed config text"
    assert json.loads(tj_env["HPCQA_PLAN_JSON"])["config"] == stored
    # the Dockerfile: every line an instruction, a comment or a continuation
    lines = k8s_image.dockerfile(cfg).splitlines()
    for prev, line in zip([""] + lines, lines):
        assert not line or prev.endswith("\\") or re.match(r"#|[A-Z]+ ", line), line


UNICODE_BREAKS = {
    "nel": "\x85",
    "c1": "\x9b",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
}


@pytest.mark.parametrize("name", sorted(UNICODE_BREAKS))
def test_a_unicode_line_break_is_refused_in_a_value(name):
    """NEL, the other C1 controls, U+2028 and U+2029: YAML readers break a block scalar's lines at them, so in the
    pod script they would start a command line. A value holding one is refused naming its key."""
    brk = UNICODE_BREAKS[name]
    for key, value in (
        ("cluster.setup", [f"# note{brk}touch /tmp/pwned"]),
        ("model.name_or_path", f"m{brk}x"),
    ):
        with pytest.raises(ConfigError) as e:
            config.load(ROOT / "configs/squad_spr.toml", [f"{key}={json.dumps(value)}"])
        assert e.value.key.startswith(key), e.value


@pytest.mark.parametrize("name", sorted(UNICODE_BREAKS))
def test_a_config_file_named_with_a_unicode_line_break_runs_nothing_in_the_pod(tmp_path, name):
    """The config's file name is no value a check refuses, and it is quoted into every script's "Generated from"
    comment. Read back by a YAML reader (as the API server reads the TrainJob), the pod script still has that
    comment on one line and no line of its own that runs the planted command."""
    import yaml

    brk = UNICODE_BREAKS[name]
    path = (
        tmp_path / f"job{brk}touch pwned{brk}.toml"
    )  # a file name holds no "/": the command runs in the cwd
    path.write_text((ROOT / "configs/squad_spr.toml").read_text())
    for target in ("trainjob", "pytorchjob", "script"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "hpcqa",
                "render",
                str(path),
                "--kind",
                target,
                "--set",
                "k8s.image=registry.example.com/hpcqa:1",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert r.returncode == 0, (target, r.stderr)
        texts = (
            [r.stdout]
            if target == "script"
            else [v for d in yaml.safe_load_all(r.stdout) for v in _strings(d)]
        )
        for text in texts:
            lines = text.splitlines()
            assert not any(line.lstrip().startswith("touch ") for line in lines), (
                target,
                text[:600],
            )
            assert brk not in text, target


def _strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def test_the_credential_check_is_linear_in_the_values_length():
    """A long word was tried as a URL scheme from each of its letters (quadratic: one 64 KiB argument took 17 s,
    100 KB 23 s). 256 KiB values of the shapes that were slow check in well under a second now (the bound here is
    loose on purpose: quadratic would take minutes)."""
    import time

    from hpcqa.core import values

    for text in (
        "a" * (256 << 10),
        "eyJ" + "a" * (256 << 10),
        "a-" * (128 << 10),
        "Bearer " + "a" * (256 << 10),
    ):
        t0 = time.process_time()
        values.secret_shape(text)  # (the last is a bearer token by its shape: found, quickly)
        assert time.process_time() - t0 < 5, text[:12]
    assert values.secret_shape("pip install git+https://me:hunter22@git.example.com/x") is not None
