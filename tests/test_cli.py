import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAVY = ("torch", "transformers", "datasets", "accelerate")


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["submit", "configs/squad_spr.toml", "--dry-run"],
        ["submit", "configs/squad_spr.toml", "--dry-run", "--json"],
        ["render", "configs/squad_spr.toml"],
        ["render", "configs/squad_spr.toml", "--launcher", "mpirun"],
        ["render", "configs/squad_spr.toml", "--kind", "pytorchjob"],
        ["render", "configs/squad_spr.toml", "--kind", "dockerfile"],
        ["env", "--json"],
        ["status", "--json", "--registry", "/nonexistent-dir/none.sqlite"],
        ["submit", "configs/sweep_quickstart.toml", "--dry-run", "--json"],
    ],
)
def test_light_commands_do_not_import_torch(argv):
    code = (
        "import sys, io, contextlib\n"
        "from hpcqa.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try:\n"
        f"        rc = main({argv!r})\n"
        "    except SystemExit as e:\n"
        "        rc = e.code\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(rc, heavy)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert r.returncode == 0, r.stderr
    rc, heavy = r.stdout.strip().split(" ", 1)
    assert heavy == "[]", f"{argv} imported {heavy}"
    assert rc in ("0", "None")


@pytest.mark.parametrize(
    "args,key",
    [
        (
            ["submit", "configs/squad_spr.toml", "--dry-run", "--set", "train.learnin_rate=3"],
            "train.learnin_rate",
        ),
        (
            ["submit", "configs/squad_spr.toml", "--dry-run", "--set", "cluster.nodes=0"],
            "cluster.nodes",
        ),
        (
            ["submit", "configs/squad_spr.toml", "--dry-run", "--set", "launch.ccl_workers=56"],
            "launch.ccl_workers",
        ),
        (["submit", "configs/squad_spr.toml", "--dry-run", "--set", "nodes"], "--set"),
        (["render", "configs/squad_spr.toml", "--set", "job.name=a'b"], "job.name"),
        (
            ["submit", "configs/missing.toml", "--dry-run"],
            "`hpcqa init` writes an example config here",
        ),
        (
            ["validate", "configs/quickstart.toml", "--set", "train.ddp_backend=nccl"],
            "train.ddp_backend",
        ),
    ],
)
def test_bad_input_exits_2_without_traceback(cli, args, key):
    r = cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and key in r.stderr and "fix:" in r.stderr


def test_toml_syntax_error_exits_2(cli, tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[train]\nlearning_rate = 3e-5\nbf16 = maybe\n")
    r = cli("submit", str(p), "--dry-run")
    assert r.returncode == 2 and "line 3" in r.stderr and "Traceback" not in r.stderr


def test_dry_run_json_acceptance(cli):
    r = cli(
        "submit",
        "configs/squad_spr.toml",
        "--dry-run",
        "--json",
        "--set",
        "cluster.threads_per_core=2",
        "--set",
        "launch.ccl_workers=4",
        "--set",
        "train.ddp_backend=ccl",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["world_size"] == 8 and len(d["ranks"]) == 8
    by_local = {x["local_rank"]: x["env"] for x in d["ranks"]}
    for env in by_local.values():
        assert env["CCL_WORKER_AFFINITY"] == "0,1,2,3,56,57,58,59"
        assert env["I_MPI_PIN_DOMAIN"] == "[0xfffffffffffff0,0xfffffffffffff000000000000000]"
        assert env["OMP_NUM_THREADS"] == "52"
    assert isinstance(d["ranks"][0]["cpus"], list) and d["ranks"][1]["cpus"][0] == 56
    assert d["sbatch"] is None or "#SBATCH --nodes=4" in d["sbatch"]


def test_dry_run_table_accounts_for_every_rank(cli):
    r = cli("submit", "configs/squad_spr.toml", "--dry-run", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "8 = 4 node(s) x 2" in r.stdout and "unknown until" in r.stdout
    assert (
        "RANK = NODE_RANK x 2 + LOCAL_RANK on each of 4 nodes" in r.stdout and "1,3,5,7" in r.stdout
    )


def test_validate_all_configs(cli):
    r = cli(
        "validate", *[str(p.relative_to(ROOT)) for p in sorted((ROOT / "configs").glob("*.toml"))]
    )
    assert r.returncode == 0, r.stderr
    # a search alone too: a file's checks may not lean on what the file before it left (a search's did)
    r = cli("validate", "configs/search_quickstart.toml")
    assert r.returncode == 0 and "a tpe search, 8 trials" in r.stdout, r.stderr


def test_small_edges(cli, tmp_path):
    """--json belongs to the dry run; validate reads a [sweep] (a misspelled swept key fails there, not at
    submit) and counts its variants; plurals; ccl with no worker thread is refused at validate."""
    r = cli("submit", "configs/quickstart.toml", "--json")
    assert r.returncode == 2 and "--dry-run" in r.stderr and "Traceback" not in r.stderr
    ok = cli("validate", "configs/sweep_quickstart.toml")
    assert ok.returncode == 0 and "5 variants" in ok.stdout, ok.stdout + ok.stderr
    bad = cli(
        "validate", "configs/sweep_quickstart.toml", "--set", "sweep.train.learnin_rate=[1e-4]"
    )
    assert bad.returncode == 2 and "learnin_rate" in bad.stderr, bad.stderr
    one = cli(
        "validate",
        "configs/quickstart.toml",
        "--set",
        "cluster.sockets_per_node=1",
        "--set",
        "cluster.cores_per_socket=1",
        "--set",
        "launch.ranks_per_socket=1",
    )
    assert (
        one.returncode == 0 and "1 rank (" in one.stdout and "1 compute core per rank" in one.stdout
    ), one.stdout
    ccl = cli(
        "validate",
        "configs/squad_spr.toml",
        "--set",
        "train.ddp_backend=ccl",
        "--set",
        "launch.ccl_workers=0",
    )
    assert ccl.returncode == 2 and "launch.ccl_workers" in ccl.stderr, ccl.stderr


def test_load_config_of_a_sweep_says_how_to_submit_it():
    import hpcqa
    from hpcqa.errors import UsageError

    with pytest.raises(UsageError) as e:
        hpcqa.load_config("configs/sweep_quickstart.toml")
    assert "hpcqa.submit(" in e.value.hint
