"""LaunchPlan -> script text. Pure: templates from sbatch_templates/, every value through shlex.quote.

Values on `#SBATCH` lines are not shell-parsed, so they can't be quoted: config validation restricts
them to safe characters instead (job name, partition, account, qos, constraint), and free text such
as paths never goes there.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

from hpcqa import resources
from hpcqa.core import values as valuecheck
from hpcqa.core.kinds import Launcher, Requeue
from hpcqa.core.plan import LaunchPlan
from hpcqa.record import jobdir

# Not I_MPI_PIN_DOMAIN: seen with Intel MPI 2021.18 under Slurm, hydra pins every rank to an explicit
# I_MPI_PIN_DOMAIN even with I_MPI_PIN=0 or off (as -genv or exported), and the rank's wrapper would then see
# one core. The wrapper binds instead (see mpirun.sbatch); the plan still gives each rank the variable.
ENV_FOR_GENV = (
    "OMP_NUM_THREADS",
    "CCL_WORKER_COUNT",
    "CCL_WORKER_AFFINITY",
    "KMP_BLOCKTIME",
    "KMP_HW_SUBSET",
    "LD_PRELOAD",
)


# (launcher, on plain hosts) -> template in sbatch_templates/; each launcher's name for a rank's log
TEMPLATES = {
    (Launcher.SRUN, False): "srun.sbatch",
    (Launcher.MPIRUN, False): "mpirun.sbatch",
    (Launcher.MPIRUN, True): "mpirun-hosts.sh",
}
RANK_LOGS = {Launcher.SRUN: jobdir.SRUN_LOG, Launcher.MPIRUN: jobdir.MPIRUN_LOG}


def template_dir() -> Path:
    """sbatch_templates/: the copy installed with the package (hpcqa.resources), else the source tree's."""
    return resources.folder("sbatch_templates")


def fill(template: str, values: dict[str, str]) -> str:
    """One pass over the template: text from the config is never scanned for placeholders again."""
    return re.sub(r"@@([A-Z_]+)@@", lambda m: values.get(m.group(1), m.group(0)), template)


def sbatch_directives(plan: LaunchPlan, own: dict[str, object] | None = None) -> list[str]:
    """The #SBATCH lines of a plan (and of `own`: options of the script that writes them, e.g. its logs),
    every one through `directive`."""
    p = plan.slurm_parameters()
    params: dict[str, object] = {
        k: p[k] for k in ("job_name", "nodes", "ntasks_per_node", "cpus_per_task", "time")
    }
    params["signal"] = f"{plan.config.launch.requeue_signal}@{p['signal_delay_s']}"
    for key in ("partition", "account", "qos", "constraint", "mem", "exclusive"):
        if key in p:
            params[key] = p[key]
    params.update(own or {})
    lines = [directive(k, params[k]) for k in params]
    lines += [directive(k, v) for k, v in p.get("additional_parameters", {}).items()]
    return lines


# sbatch reads '#SBATCH' lines itself (src/sbatch/opt.c, _get_argument): whitespace ends an argument, quotes group,
# an unquoted '#' starts a comment, and a backslash escapes the next character anywhere -- inside quotes too, so
# shell quoting would corrupt a backslash. Every character outside this set is written backslash-escaped instead.
_DIRECTIVE_PLAIN = re.compile(r"[A-Za-z0-9._/%:@+=,^&|\[\]*()!-]|[^\x00-\x7f]")


def directive(key: str, value: object) -> str:
    """One #SBATCH line, the only writer of them. A line break cannot be escaped on such a line: refused (config
    validation refuses control characters in every value, so this is the last guard, not the check)."""
    key = key.replace("_", "-")
    if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
        raise ValueError(f"not an sbatch option name: {key!r}")
    if value is True:
        return f"#SBATCH --{key}"
    text = str(value)
    if re.search(r"[\x00-\x1f\x7f]", text):
        raise ValueError(f"--{key}: a control character cannot go on an #SBATCH line: {text!r}")
    return f"#SBATCH --{key}=" + "".join(
        c if _DIRECTIVE_PLAIN.fullmatch(c) else "\\" + c for c in text
    )


def _heredoc_delim(text: str) -> str:
    tag = "HPCQA_PLAN_" + hashlib.sha256(text.encode()).hexdigest()[:12]
    while tag in text.splitlines():  # pragma: no cover - a compact JSON line never equals it
        tag += "_"
    return tag


def standalone(
    plan: LaunchPlan,
    launcher: str | None = None,
    python: str | None = None,
    hosts: tuple[str, ...] = (),
    code: tuple[str, ...] = (),
) -> str:
    """The sbatch script (srun or mpirun), or with `hosts` a script for plain machines (mpirun over ssh)."""
    asked = launcher or plan.config.launch.launcher
    python = python or plan.config.cluster.python or "python3"
    launcher = Launcher(asked) if asked in set(Launcher) else None
    if launcher is None or (launcher, bool(hosts)) not in TEMPLATES:
        raise ValueError(
            f"no script template for launcher {asked!r}" + (" on plain hosts" if hosts else "")
        )
    if hosts and len(hosts) != plan.nodes:
        raise ValueError(f"{len(hosts)} hosts for a plan of {plan.nodes} nodes")
    template = resources.read_text(template_dir() / TEMPLATES[launcher, bool(hosts)])
    # the batch scripts requeue a rank that checkpointed on the signal (scontrol requeue after the step); the
    # plain-machine script has no scheduler to do it
    plan = plan.with_requeue(Requeue.NONE if hosts else Requeue.SCRIPT)
    plan_json = plan.dumps()
    root = jobdir.root_path(plan.config.job.output_dir, plan.config.job.name)
    values = {
        "SOURCE": valuecheck.shown(plan.config.source) or "a config",
        "SBATCH": "\n".join(sbatch_directives(plan)),
        "SETUP": setup_block(plan.config.cluster.setup),
        "CODE": "\n".join(code) or "# code: the hpcqa installed where the ranks run",
        "JOB_ROOT": shlex.quote(root),
        "PLAN": plan_json,
        "EOF": _heredoc_delim(plan_json),
        "PYTHON": shlex.quote(python),
        "SRUN_ARGS": " ".join(shlex.quote(a) for a in plan.slurm_parameters()["srun_args"]),
        "NTASKS": str(plan.world_size),
        "PPN": str(plan.ranks_per_node),
        "NODE_CPUS": str(plan.cpus_per_task * plan.ranks_per_node),
        "GENV": "\n".join(f"    -genv {k} {shlex.quote(v)} \\" for k, v in _node_wide_env(plan)),
        # job-folder names: hpcqa's own constants, inside the template's double quotes
        "PLAN_FILE": plain(jobdir.SCRIPT_PLAN),
        "HOSTFILE": plain(jobdir.SCRIPT_HOSTFILE),
        "REQUEUE_FILE": plain(jobdir.REQUEUE_REQUEST),
        "MAX_REQUEUES": str(plan.config.cluster.max_requeues),
        "REQUEUE_SIGNAL": plan.config.launch.requeue_signal,
        "HOSTS": " ".join(shlex.quote(h) for h in hosts),
        "IFACE": (
            f"export I_MPI_HYDRA_IFACE={shlex.quote(plan.config.launch.master_interface)}  "
            "# launch.master_interface: hydra's own traffic on that network too"
            if plan.config.launch.master_interface
            else "# launch.master_interface: not set"
        ),
        "RANK_LOG": plain(RANK_LOGS[launcher]),
    }
    return fill(template, values)


def setup_block(lines: tuple[str, ...]) -> str:
    """cluster.setup: the user's commands, each on its own line (validation refuses line breaks, so an
    entry can neither end the script's heredoc nor start a second command). They are run as written:
    they are commands. `set -u` is relaxed around them (activate scripts read unset variables)."""
    if not lines:
        return "# cluster.setup: none"
    if any(ch in line for line in lines for ch in "\n\r\0"):
        raise ValueError("a cluster.setup entry spans lines")
    return "\n".join(
        ["# cluster.setup, in order, before anything else runs", "set +u", *lines, "set -u"]
    )


def plain(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._%-]+", name):
        raise ValueError(f"not a plain file name: {name!r}")
    return name


def _node_wide_env(plan: LaunchPlan) -> list[tuple[str, str]]:
    """Variables equal on every local rank, passed with -genv (the rest come from the plan)."""
    envs = [lr.env for lr in plan.local_ranks]
    out = []
    for k in ENV_FOR_GENV:
        vals = {e.get(k) for e in envs}
        if len(vals) == 1:
            (v,) = vals
            if v is not None:
                out.append((k, v))
    return out
