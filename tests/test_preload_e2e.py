"""LD_PRELOAD is decided on the node: a library present where the ranks run and absent on the submit side.

The "node" is a virtual environment with pip's intel-openmp (libiomp5.so in its prefix), the interpreter the
ranks run (cluster.python); the submitting interpreter has no libiomp5. The plan names the library; each rank
finds it in its own environment, preloads it, and says so in its report and in `hpcqa status JOB`."""

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.test_local_e2e import TINY, job_dirs


@pytest.fixture(scope="module")
def node_python(tmp_path_factory):
    env_dir = tmp_path_factory.mktemp("node") / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True
    )
    py = env_dir / "bin" / "python"
    # --system-site-packages reaches the base interpreter's packages, not a venv's the tests may run in (CI's): a
    # .pth file adds this interpreter's own, so the "node" has everything the submit side has, plus libiomp5
    inner = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    own = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(inner, "submit-side.pth").write_text("".join(f"{d}\n" for d in sorted(own)))
    r = subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "intel-openmp",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lib = env_dir / "lib" / "libiomp5.so"
    assert lib.exists(), list((env_dir / "lib").iterdir())
    return py, lib


def test_the_node_resolves_what_the_submit_host_lacks(cli, tmp_path, node_python):
    py, lib = node_python
    from hpcqa.rank import preload

    assert "iomp" not in preload.available(), "the submit side must not have libiomp5 for this test"
    out = [
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path))}",
        "--set",
        "launch.openmp=iomp",
        "--set",
        "launch.malloc=default",
        "--set",
        f"cluster.python={json.dumps(str(py))}",
        *TINY,
        "--set",
        "train.max_steps=4",
    ]
    env = {"HPCQA_CACHE": str(tmp_path / "cache"), "HPCQA_REGISTRY": str(tmp_path / "reg.sqlite")}
    dry = cli("submit", "configs/quickstart.toml", *out, "--dry-run", "--json", env=env)
    plan = json.loads(dry.stdout)
    assert (
        plan["ranks"][0]["env"]["HPCQA_PRELOAD"] == "iomp"
        and "LD_PRELOAD" not in plan["ranks"][0]["env"]
    )
    assert any(
        "iomp not found on this host; each rank looks for it on its node" in w
        for w in plan["warnings"]
    )
    r = cli("submit", "configs/quickstart.toml", *out, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (jd,) = job_dirs(tmp_path)
    for k in (0, 1):
        rep = json.loads((jd / "ranks" / f"rank-{k}.json").read_text())
        assert rep["preload"] == {"iomp": str(lib)}, rep["preload"]
        assert rep["ld_preload"] == str(lib) and rep["preload_mapped"] == [
            str(lib)
        ]  # the loader mapped it
    status = cli("status", jd.name.split("-")[0], env={**env, "COLUMNS": "200"})
    assert f"iomp {lib}" in " ".join(status.stdout.split()), status.stdout
