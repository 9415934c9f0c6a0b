"""The command line's grammar: every verb, its options and their help (fits 80 columns)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from hpcqa.core import kinds

EPILOG = """examples (`hpcqa init NAME` writes each config and program named here into this
folder; a checkout also has them in configs/ and examples/):
  # an example config to edit, then train on this machine (the local executor)
  hpcqa init && hpcqa submit quickstart.toml
  # every rank's CPUs and environment, and the sbatch script; nothing runs
  hpcqa init squad_spr && hpcqa submit squad_spr.toml --dry-run
  # change keys for one submission
  hpcqa submit squad_spr.toml --set cluster.nodes=2 \\
      --set train.learning_rate=5e-5
  # your own program on every rank, with the plan's environment and pinning
  hpcqa init ddp_loop.py && hpcqa submit quickstart.toml -- python ddp_loop.py
  # a standalone script for sbatch, ranks started by Intel MPI's mpirun
  hpcqa render squad_spr.toml --launcher mpirun -o job.sbatch
  # inside srun/salloc: what this process's environment maps to
  hpcqa env --json
"""


SET_HELP = (
    "override a config key; VALUE is parsed as TOML, else taken as a string "
    "(repeatable): --set train.learning_rate=5e-5"
)
SET_HELP_SHORT = "override a config key, e.g. --set train.max_steps=20 (repeatable)"


def _count(text: str) -> int:
    """A whole number >= 0 (`logs -n -5` printed the whole log)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return n


def _positive(text: str) -> float:
    """A finite number > 0 (a latency of inf or 0 divided by zero)."""
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return x


def add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="job config (TOML), e.g. quickstart.toml (hpcqa init writes it)")
    add_set(p)


def add_set(p: argparse.ArgumentParser, help: str = SET_HELP) -> None:
    """--set KEY=VALUE (repeatable) into args.overrides."""
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def add_registry(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--registry",
        help="registry file (default: $HPCQA_REGISTRY, else your own: "
        "$XDG_STATE_HOME/hpcqa/registry.sqlite, ~/.local/state/hpcqa/registry.sqlite)",
    )


def _add_tune(sub: Any) -> None:
    p = sub.add_parser(
        "tune",
        help='time each ranks-per-socket layout for a few steps; "auto" then uses the fastest',
    )
    add_config(p)
    p.add_argument(
        "--steps", type=int, default=10, help="timed optimizer steps per layout (default 10)"
    )
    p.add_argument("--warmup", type=int, default=3, help="steps before timing starts (default 3)")
    p.add_argument(
        "--candidates",
        metavar="LIST",
        help="ranks per socket to try, e.g. 1,2,4 (default: 1, powers of two, one per core)",
    )
    p.add_argument(
        "--comm",
        action="store_true",
        help="instead: measure the link between 2 nodes (or the "
        "config's nodes) with the job's backend and store it for "
        "`hpcqa scaling --predict` and submit's warnings",
    )
    p.add_argument(
        "--json", action="store_true", help="the measured layouts (or link) as one JSON object"
    )
    _add_scaling(sub)


def _add_scaling(sub: Any) -> None:
    p = sub.add_parser(
        "scaling",
        help="a run's throughput at 1, 2, 4, ... nodes: predicted from one finished run "
        "and the measured link, or a sweep over cluster.nodes measured vs predicted",
    )
    p.add_argument(
        "id",
        help="a finished training job (predict from it), a sweep over cluster.nodes, or a config "
        "(.toml) with --epoch-time: one node's epoch measured elsewhere or published",
    )
    p.add_argument(
        "--predict",
        action="store_true",
        help="predict from the run and the link (`hpcqa tune --comm`); "
        "for a sweep: predicted next to measured",
    )
    p.add_argument(
        "--nodes",
        default="1,2,4,8,16",
        metavar="LIST",
        help="node counts to predict (default 1,2,4,8,16)",
    )
    p.add_argument(
        "--bandwidth",
        metavar="RATE",
        help="assume this link instead of the measured one: 10gbit, 100mbit",
    )
    p.add_argument(
        "--latency-us",
        type=_positive,
        metavar="US",
        help="with --bandwidth: the link's latency (default: the measured one, else 50)",
    )
    p.add_argument(
        "--registry",
        default=None,
        help="job registry (default: $HPCQA_REGISTRY, else your own "
        "in ~/.local/state/hpcqa or $XDG_STATE_HOME/hpcqa)",
    )
    p.add_argument("--json", action="store_true", help="the prediction as one JSON object")
    _add_scaling_of_a_config(p)


def _add_scaling_of_a_config(p: argparse.ArgumentParser) -> None:
    """`scaling CONFIG --epoch-time T`: a prediction from one node's epoch measured elsewhere."""
    p.add_argument(
        "--epoch-time", metavar="TIME", help="with a config: one node's time per epoch (26m, 7m30s)"
    )
    p.add_argument(
        "--features",
        type=int,
        metavar="N",
        help="with a config: training features per epoch (SQuAD v1.1 at 384/128: about 88,700)",
    )
    add_set(p, "with a config: override a key")
    p.add_argument(
        "--efficiency",
        type=float,
        default=0.9,
        metavar="F",
        help="the link needed for this share of linear scaling (default 0.9)",
    )


class VersionAction(argparse.Action):
    """--version from the package metadata (what pip installed), and where this hpcqa is."""

    def __init__(self, option_strings, dest, **kw) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        import os

        from hpcqa import resources

        print(f"hpcqa {resources.version()} from {os.path.dirname(os.path.dirname(__file__))}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcqa",
        description="Distributed question-answering fine-tuning on Xeon CPU clusters:\n"
        "one TOML file -> one rank per socket, pinned, on Slurm or locally.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action=VersionAction,
        help="this hpcqa's version (its package metadata) and where it is installed",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_init(sub)
    _add_submit(sub)
    _add_render(sub)
    _add_stage(sub)
    _add_tune(sub)
    _add_node_verbs(sub)
    _add_job_verbs(sub)
    return parser


def _add_init(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="write an example config or program here, to edit",
        description="Write one of the example configs or programs hpcqa carries into the current "
        "folder (or -o PATH), to edit and submit. Nothing existing is replaced without "
        "--force.",
    )
    p.add_argument(
        "example",
        nargs="?",
        default="quickstart",
        help="which example (default quickstart; --list)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write it (default ./EXAMPLE.toml, a program ./ITS_NAME.py)",
    )
    p.add_argument("--list", action="store_true", help="the examples, one line each")
    p.add_argument("--force", action="store_true", help="replace an existing file")


def _add_submit(sub: Any) -> None:
    p = sub.add_parser(
        "submit",
        help="run a config (Slurm through submitit, or the local executor)",
        usage="hpcqa submit CONFIG [options] [-- PROGRAM [ARGS...]]",
        description="Run a config. After --, your own program (job.command) runs on every rank "
        "instead of the built-in QA trainer: {section.key} in its arguments is that "
        "config key's value.",
    )
    add_config(p)
    p.add_argument("--dry-run", action="store_true", help="print the launch plan; run nothing")
    p.add_argument(
        "--json", action="store_true", help="with --dry-run: the plan as one JSON object"
    )
    p.add_argument("--no-wait", action="store_true", help="Slurm: return after submission")
    p.add_argument(
        "--no-snapshot",
        action="store_true",
        help="the ranks import the live hpcqa tree when they start "
        "(default: a copy made at submit, kept with the job)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="Slurm: ask sbatch --test-only whether it would accept the exact "
        "request (partition, account, QOS, time, nodes); queue nothing",
    )
    p.add_argument(
        "--registry",
        help="registry file for this job (default: job.registry, else $HPCQA_REGISTRY, else "
        "your own in ~/.local/state/hpcqa); the same as --set job.registry=PATH",
    )


def _add_node_verbs(sub: Any) -> None:
    """Verbs about the node this runs on and its launcher's environment."""
    p = sub.add_parser(
        "topology", help="this node's sockets, NUMA nodes and cores; with CONFIG, each rank's pool"
    )
    p.add_argument(
        "config", nargs="?", help="also show the CPU pool and environment of each local rank"
    )
    add_set(p, SET_HELP_SHORT)
    p.add_argument(
        "--sysfs", metavar="DIR", help="read a saved tree laid out like /sys/devices/system"
    )
    p.add_argument(
        "--allowed",
        metavar="LIST",
        help="CPUs this process may use, e.g. 4-11,36-43 (default: its affinity mask)",
    )
    p.add_argument(
        "--json", action="store_true", help="the node and every rank's CPUs and environment as JSON"
    )

    p = sub.add_parser("env", help="what this process's launcher environment maps to")
    p.add_argument("--json", action="store_true", help="one JSON object")

    p = sub.add_parser("hosts", help="expand a Slurm nodelist, one host per line")
    p.add_argument("nodelist", nargs="?", help="default: $SLURM_JOB_NODELIST")


def _add_render(sub) -> None:
    p = sub.add_parser(
        "render",
        help="write a standalone sbatch script (srun or mpirun), Kubernetes objects (a "
        "TrainJob, a PyTorchJob, a staging Job) or their image's Dockerfile",
        usage="hpcqa render CONFIG [options] [-- PROGRAM [ARGS...]]",
    )
    add_config(p)
    p.add_argument("-o", "--output", help="write the script here (default: stdout)")
    p.add_argument(
        "--target", dest="old_kind", choices=kinds.RENDER_KINDS, help=argparse.SUPPRESS
    )  # before 0.2: what --kind says now
    p.add_argument(
        "--kind",
        choices=kinds.RENDER_KINDS,
        default=kinds.RENDER_SCRIPT,
        help="what to write. script (default): sbatch/mpirun; trainjob: a Kubeflow Trainer v2 TrainJob (YAML, "
        "kubectl apply -f); trainingruntime: the TrainingRuntime it names (apply it first); "
        "pytorchjob: a training-operator v1 PyTorchJob; "
        "stage-job: a Job that stages the model and data into the PVC; dockerfile: "
        "the image those pods run",
    )
    p.add_argument("--launcher", choices=kinds.SCRIPT_LAUNCHERS, help="default: launch.launcher")
    p.add_argument(
        "--python",
        default=None,
        help="interpreter on the nodes (default: cluster.python, else python3)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--hosts",
        metavar="NODELIST",
        help="plain machines, no Slurm: a script for mpirun over ssh on "
        "these hosts (Slurm nodelist syntax, e.g. 'n[1-2]')",
    )
    where.add_argument("--hostfile", metavar="FILE", help="like --hosts, one host per line")
    p.add_argument(
        "--submit",
        action="store_true",
        help="sbatch the script and register the job: status, logs "
        "and cancel then work as for `submit`",
    )


def _add_stage(sub) -> None:
    p = sub.add_parser(
        "stage",
        help="on a machine with network: model, dataset and tokenised features into the shared "
        "caches, with a manifest that submit checks (compute nodes then run offline)",
    )
    add_config(p)
    p.add_argument(
        "--k8s",
        action="store_true",
        help="stage for the PyTorchJob: the pods' paths (k8s.mount_path); run "
        "it where the PVC is mounted there",
    )
    p.add_argument("--json", action="store_true", help="print the manifest")


def _add_job_verbs(sub) -> None:
    """Verbs about submitted jobs and sweeps, and the checks."""
    p = sub.add_parser(
        "status",
        help="jobs: state, why pending, progress, EM/F1; JOB: attempts, ranks, resource use "
        "(no torch import)",
    )
    p.add_argument(
        "jobs", nargs="*", help="job ids: the detail view (default: a list of the 20 most recent)"
    )
    p.add_argument("--all", action="store_true", help="every job in the registry")
    p.add_argument("--json", action="store_true", help="a JSON list of job objects")
    p.add_argument(
        "--watch", action="store_true", help="refresh every few seconds until all are finished"
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="every column, nothing shortened (default: fits the terminal)",
    )
    add_registry(p)

    p = sub.add_parser("logs", help="a rank's log (stderr; --stdout for stdout)")
    p.add_argument("job", help="job id (as `hpcqa status` lists it; a sweep task: 900_1)")
    p.add_argument(
        "--rank", type=int, default=None, help="default: the first rank that failed, else 0"
    )
    p.add_argument("--stdout", action="store_true", help="the rank's stdout instead of its stderr")
    p.add_argument("-n", "--lines", type=_count, default=0, help="only the last N lines")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument(
        "--all-attempts", action="store_true", help="the whole log, not only the current attempt's"
    )
    add_registry(p)

    p = sub.add_parser("cancel", help="cancel a job or a sweep (scancel; local: stop every rank)")
    p.add_argument("jobs", nargs="+", help="job ids (a sweep: all its tasks; 900_1: one task)")
    p.add_argument("--task", type=int, help="with a sweep id: only this variant")
    add_registry(p)
    _add_results(sub)
    _add_checks(sub)


def _add_results(sub: Any) -> None:
    p = sub.add_parser("results", help="a sweep's variants with their metrics, best marked")
    p.add_argument("sweep", help="the sweep's job id (or array id)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the table as a JSON list")
    fmt.add_argument("--csv", action="store_true", help="the table as CSV")
    p.add_argument(
        "--plot", metavar="FILE.png", help="draw the metric against the swept parameter(s)"
    )
    p.add_argument(
        "--metric", default="f1", help="f1 (default), exact_match, train_samples_per_second, ..."
    )
    add_registry(p)


def _add_checks(sub: Any) -> None:
    """The checks: of the cluster and this node, of the registry, of configs."""
    p = sub.add_parser(
        "doctor", help="check Slurm, accounting, node topology, libraries, torch, backend"
    )
    p.add_argument("config", nargs="?", help="also check this config against the partition's nodes")
    add_set(p, SET_HELP_SHORT)
    p.add_argument("--json", action="store_true", help="every check as JSON")

    p = sub.add_parser("registry", help="check the job registry, or recover a damaged one")
    p.add_argument(
        "action",
        choices=["check", "recover"],
        help="check: integrity; recover: rebuild a damaged registry from the job folders",
    )
    add_registry(p)

    p = sub.add_parser("validate", help="check configs, each of them; exit 2 if any is bad")
    p.add_argument("configs", nargs="+", help="config files (a sweep file: every variant)")
    add_set(p, SET_HELP_SHORT)
