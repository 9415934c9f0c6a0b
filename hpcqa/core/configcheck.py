"""What a config must satisfy across its keys, after each key passed on its own (config.py): cores and workers that
fit, a stride shorter than the sequence, nodes the executor can reach, paths, setup commands, sbatch flags hpcqa owns,
environment names, Kubernetes values, evaluation data, sizes that stay plannable. Each failure names the key and
the fix. Pure.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from hpcqa.core import command, kinds
from hpcqa.core import values as valuecheck
from hpcqa.errors import ConfigError


def check(cfg: Any) -> None:
    """The rules between keys (and the sizes, paths, commands and names), on a Config whose keys each passed."""
    c, la, t, d, src = cfg.cluster, cfg.launch, cfg.train, cfg.data, cfg.source
    _check_cores(cfg)
    if t.doc_stride >= t.max_seq_length:
        raise ConfigError(
            "train.doc_stride",
            f"doc_stride {t.doc_stride} must be smaller than max_seq_length {t.max_seq_length}",
            "lower train.doc_stride (128 for 384 is usual)",
            src,
        )
    most = kinds.max_nodes(c.executor)
    if most is not None and c.nodes > most:
        raise ConfigError(
            "cluster.nodes",
            f"the {c.executor} executor runs on {'one node' if most == 1 else f'{most} nodes'}, not {c.nodes}",
            'set cluster.nodes = 1, or cluster.executor = "slurm"',
            src,
        )
    _check_paths(cfg)
    for i, flag in enumerate(c.sbatch_extra):
        _check_sbatch_flag(f"cluster.sbatch_extra[{i}]", flag, src)
    _check_setup(cfg)
    _check_k8s(cfg)
    _check_env(cfg)
    for k, v in la.env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ConfigError(
                f"launch.env.{k}",
                "not a valid environment variable name",
                "use letters, digits and underscores, not starting with a digit",
                src,
            )
    if not d.dataset and not (d.train_file or d.validation_file):
        raise ConfigError(
            "data.dataset",
            "no data: dataset is empty and no train_file/validation_file is given",
            'set data.dataset (e.g. "squad") or data.train_file',
            src,
        )
    _check_eval(cfg)
    _check_command(cfg)
    _check_steps(cfg)
    _check_sizes(cfg)


def _check_cores(cfg: Any) -> None:
    """Every rank keeps a compute core: CCL workers, NUMA nodes and ranks per socket against the cores."""
    c, la, src = cfg.cluster, cfg.launch, cfg.source
    if la.ccl_workers >= c.cores_per_socket:
        raise ConfigError(
            "launch.ccl_workers",
            f"{la.ccl_workers} CCL workers leave no compute core on a "
            f"{c.cores_per_socket}-core socket",
            f"set launch.ccl_workers below cluster.cores_per_socket "
            f"({c.cores_per_socket}); 1-4 is usual",
            src,
        )
    if c.cores_per_socket % c.numa_per_socket:
        raise ConfigError(
            "cluster.numa_per_socket",
            f"{c.cores_per_socket} cores per socket don't split into {c.numa_per_socket} NUMA nodes",
            "set cluster.numa_per_socket to a divisor of cluster.cores_per_socket",
            src,
        )
    if la.ccl_workers >= cfg.cores_per_domain:
        raise ConfigError(
            "launch.ccl_workers",
            f"{la.ccl_workers} CCL workers leave no compute core on a "
            f"{cfg.cores_per_domain}-core NUMA node",
            "lower launch.ccl_workers",
            src,
        )
    rps = la.ranks_per_socket
    if rps != "auto" and rps > cfg.cores_per_domain:
        raise ConfigError(
            "launch.ranks_per_socket",
            f"{rps} ranks can't each have a core of a {cfg.cores_per_domain}-core {la.rank_domain}",
            f'set launch.ranks_per_socket <= {cfg.cores_per_domain}, or "auto"',
            src,
        )


def _check_steps(cfg: Any) -> None:
    t, src = cfg.train, cfg.source
    if t.max_steps == 0:
        raise ConfigError(
            "train.max_steps",
            "0 steps would train nothing",
            "use -1 (epochs decide) or a positive number",
            src,
        )
    if t.max_steps < 0 and t.num_train_epochs <= 0:
        raise ConfigError(
            "train.num_train_epochs",
            f"{t.num_train_epochs} epochs would train nothing",
            "set a positive number of epochs, or train.max_steps",
            src,
        )
    if t.compile and cfg.model.attention == "fused":
        raise ConfigError(
            "model.attention",
            '"fused" with train.compile = true: Inductor cannot trace the fused kernel',
            'set model.attention = "auto" (hpcqa\'s attention, which it traces) or train.compile = false',
            src,
        )


ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _check_command(cfg: Any) -> None:
    """job.command: bounded, printable, no literal credential (it is written into the plan), placeholders that name
    keys; the link probe (job.task = "comm") is hpcqa's own program."""
    j, src = cfg.job, cfg.source
    if not j.command:
        return
    if j.task != "train":
        raise ConfigError(
            "job.task",
            f"{j.task!r} runs hpcqa's own program, and job.command is set",
            'leave job.task = "train" with a command, or empty job.command',
            src,
        )
    for i, a in enumerate(j.command):
        bad = valuecheck.control_char(a)
        if bad:
            raise ConfigError(f"job.command[{i}]", f"a control character ({bad})", "remove it", src)
        what = valuecheck.secret_shape(a)
        if what:
            raise ConfigError(
                f"job.command[{i}]",
                f"looks like a {what}: the command is written into the plan, the "
                "registry and the dry run",
                'pass it by name: launch.pass_env = ["NAME"] and read the variable in your program',
                src,
            )
    command.check(j.command, cfg.to_dict(), src)


def _check_setup(cfg: Any) -> None:
    """cluster.setup: commands, each a whole one on its own line, setting no credential from a literal."""
    src = cfg.source
    for i, line in enumerate(cfg.cluster.setup):
        if not line.strip():
            raise ConfigError(
                f"cluster.setup[{i}]",
                "an empty entry",
                "remove it: one shell command per entry",
                src,
            )
        if not _complete_command(line):
            raise ConfigError(
                f"cluster.setup[{i}]",
                f"{line[:80]!r} is not a complete command (an unclosed quote, a "
                "trailing backslash or a heredoc would swallow the job script's next lines)",
                "close the quote, or write the command so that it ends on its own line",
                src,
            )
        named = valuecheck.assigned_credentials(line)
        if named:
            raise ConfigError(
                f"cluster.setup[{i}]",
                f"sets {named[0]}, which looks like a credential: cluster.setup is "
                "written into the job script, the plan and the registry",
                f'remove it and set launch.pass_env = ["{named[0]}"] (passed by name, never written)',
                src,
            )


def _complete_command(line: str) -> bool:
    """A cluster.setup entry ends where its line ends: quotes closed, no continuation, no heredoc."""
    if line.rstrip().endswith("\\") or re.search(
        r"(?<!<)<<(?!<)", line
    ):  # a heredoc; a here-string is one line
        return False
    try:
        shlex.split(line, comments=True)
    except ValueError:
        return False
    return True


PATH_KEYS = (
    "job.output_dir",
    "job.registry",
    "job.workdir",
    "cluster.python",
    "model.cache_dir",
    "data.cache_dir",
    "data.train_file",
    "data.validation_file",
    "data.test_file",
    "train.resume_from",
    "k8s.mount_path",
    "k8s.output_path",
    "k8s.model_cache_path",
    "k8s.data_cache_path",
)


MAX_CPUS_PER_NODE = 16384  # 16x the largest Xeon nodes made (8 sockets x 60 cores x 2 threads)
MAX_WORLD_SIZE = 65536  # ranks in one job: every rank is planned, and listed in the dry run


def _check_sizes(cfg: Any) -> None:
    """Sizes bounded before anything is expanded (the plan lists every CPU of a node and every rank)."""
    c, src = cfg.cluster, cfg.source
    cpus = c.sockets_per_node * c.cores_per_socket * c.threads_per_core
    if cpus > MAX_CPUS_PER_NODE:
        raise ConfigError(
            "cluster.cores_per_socket",
            f"{c.sockets_per_node} sockets x {c.cores_per_socket} cores x "
            f"{c.threads_per_core} threads = {cpus:,} CPUs per node; hpcqa plans at most "
            f"{MAX_CPUS_PER_NODE:,} (its plan lists every CPU)",
            "declare the node as lscpu shows it (hpcqa doctor compares)",
            src,
        )
    rps = cfg.launch.ranks_per_socket
    per_node = cfg.domains_per_node * (
        1 if rps == "auto" else rps
    )  # "auto": at least one per domain
    if c.nodes * per_node > MAX_WORLD_SIZE:
        raise ConfigError(
            "cluster.nodes",
            f"{c.nodes:,} nodes x {per_node:,} ranks each (at least); hpcqa plans at "
            f"most {MAX_WORLD_SIZE:,} ranks in one job (each is planned and listed)",
            "use fewer nodes, or fewer ranks per node (launch.ranks_per_socket)",
            src,
        )
    _check_env_sizes(cfg)


# Every rank is exec'd with launch.env in its environment. Linux refuses the exec (E2BIG: the rank exits 127 before
# it can log a line) when one "NAME=value" string, NUL included, is over MAX_ARG_STRLEN (32 pages: 131072 bytes), and
# when the arguments and the environment together pass ARG_MAX (2 MiB on most Linux, a quarter of an 8 MiB stack).
# launch.env as a whole is held to an eighth of ARG_MAX: job.command may take 1 MiB, and Slurm's, the launcher's,
# the Intel knobs' and the user's own exported variables need the rest.
MAX_ENV_ENTRY = 128 << 10
MAX_ENV_TOTAL = 256 << 10


def _check_env_sizes(cfg: Any) -> None:
    """Each launch.env entry within MAX_ARG_STRLEN, all of them within MAX_ENV_TOTAL."""
    sizes = {
        name: len(f"{name}={value}".encode("utf-8", "surrogatepass")) + 1
        for name, value in cfg.launch.env.items()
    }
    fix = (
        "pass a large value through a file: write it where the ranks can read it and set the variable to "
        "the file's path"
    )
    for name, size in sizes.items():
        if size > MAX_ENV_ENTRY:
            raise ConfigError(
                f"launch.env.{name}",
                f"{name}=<value> is {size:,} bytes (its NUL included); Linux execs no program whose "
                f"variable is over {MAX_ENV_ENTRY:,} bytes (MAX_ARG_STRLEN): every rank would exit 127 "
                "before logging a line",
                fix,
                cfg.source,
            )
    total = sum(sizes.values())
    if total > MAX_ENV_TOTAL:
        largest = max(sizes, key=lambda n: sizes[n])
        raise ConfigError(
            f"launch.env.{largest}",
            f"launch.env's {len(sizes)} variables add up to {total:,} bytes, {largest} the largest "
            f"({sizes[largest]:,}); hpcqa allows {MAX_ENV_TOTAL:,} (the kernel's ARG_MAX, 2 MiB on most "
            "Linux, holds the arguments and every variable of a rank together)",
            fix,
            cfg.source,
        )


def _check_paths(cfg: Any) -> None:
    """Paths the kernel must accept (a name of at most 255 bytes, a path of at most 4095) and, for the job folders,
    that Slurm's log-name patterns (%j, %t ...) cannot rewrite."""
    for key in PATH_KEYS + ("model.name_or_path",):
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if why := valuecheck.shell_syntax(value):
            here = os.path.expandvars(
                os.path.expanduser(value)
            )  # the fix's example: what it is on this host
            raise ConfigError(
                key,
                f"{value!r} {why}; hpcqa passes paths on as written",
                f'write the path itself: {key} = "{here}"'
                if valuecheck.shell_syntax(here) is None
                else "write the path itself (absolute)",
                cfg.source,
            )
        raw = value.encode("utf-8", "surrogateescape")
        if len(raw) > 4095 or any(len(part) > 255 for part in raw.split(b"/")):
            raise ConfigError(
                key,
                f"a path of {len(raw)} bytes with a name of up to "
                f"{max(len(p) for p in raw.split(b'/'))}: the kernel takes names of at most 255 bytes "
                "and paths of at most 4095",
                f"shorten {key}",
                cfg.source,
            )
    _check_model_name(cfg)
    if "%" in cfg.job.output_dir:
        raise ConfigError(
            "job.output_dir",
            "contains '%': Slurm would expand it in the log names (%j is the job id) "
            "and the logs would land elsewhere than the job folder",
            "choose a folder without '%'",
            cfg.source,
        )


def _check_model_name(cfg: Any) -> None:
    """model.name_or_path is a built-in, or a path or hub id of a length the kernel takes (255 bytes a name, 4095 the
    whole: PATH_KEYS' rule); longer, it ended in a traceback where it was first looked up. Whether it is a folder
    or a hub id is the submit host's to say (preflight.model)."""
    name, key = cfg.model.name_or_path, "model.name_or_path"
    raw = name.encode("utf-8", "surrogateescape")
    if name.startswith("builtin:"):
        return
    if len(raw) > 4095 or any(len(part) > 255 for part in raw.split(b"/")):
        raise ConfigError(
            key,
            f"{len(raw)} bytes, with a name of up to {max(len(p) for p in raw.split(b'/'))}: too "
            "long for a path (255 bytes a name, 4095 in all) and for a hub id (96 characters a part)",
            "give the model's folder or its hub id (namespace/name)",
            cfg.source,
        )


# sbatch options the plan owns -> the key that sets them. sbatch takes the last of repeated options and accepts
# any unambiguous prefix of a long option (getopt_long), so a prefix of one of these is refused too.
OWNED_SBATCH = {
    "output": "job.output_dir (hpcqa names every log)",
    "error": "job.output_dir (hpcqa names every log)",
    "array": "[sweep] (hpcqa makes the arrays)",
    "job-name": "job.name",
    "nodes": "cluster.nodes",
    "ntasks": "cluster.sockets_per_node and launch.ranks_per_socket (ranks per node)",
    "ntasks-per-node": "cluster.sockets_per_node and launch.ranks_per_socket (ranks per node)",
    "ntasks-per-socket": "launch.ranks_per_socket",
    "ntasks-per-core": "launch.ranks_per_socket",
    "cpus-per-task": "cluster.cores_per_socket and launch.ranks_per_socket (cores per rank)",
    "export": "launch.env and launch.pass_env",
    "signal": "cluster.signal_delay_s and launch.requeue_signal",
    "requeue": "cluster.requeue_on_node_fail",
    "no-requeue": "cluster.requeue_on_node_fail",
    "open-mode": "hpcqa (logs are appended across requeues)",
    "chdir": "the directory you submit from",
    "time": "cluster.time_limit_min",
    "partition": "cluster.partition",
    "account": "cluster.account",
    "qos": "cluster.qos",
    "constraint": "cluster.constraint",
    "mem": "cluster.mem_gb",
    "exclusive": "cluster.exclusive",
    "wrap": "hpcqa (it writes the job script)",
    "overcommit": "nothing: hpcqa never runs more threads than cores (cluster.exclusive, launch.ranks_per_socket)",
    "oversubscribe": "nothing: hpcqa never runs more threads than cores (cluster.exclusive, launch.ranks_per_socket)",
    "clusters": "nothing: hpcqa's status, logs and cancel ask the "
    "cluster your Slurm commands default to (set SLURM_CLUSTERS, or submit from that cluster)",
    "cluster": "nothing: hpcqa's status, logs and cancel ask the cluster your Slurm commands default to",
}
GPU_SBATCH = re.compile(
    r"gpus?(-per-[a-z]+)?|cpus-per-gpu|mem-per-gpu|ntasks-per-gpu|gpu-bind|gpu-freq"
)


def _check_sbatch_flag(key: str, flag: str, src: str) -> None:
    if not flag.startswith("--") or len(flag) < 3:
        raise ConfigError(
            key,
            f"{flag!r} is not a long sbatch option",
            'write each entry as "--option=value"',
            src,
        )
    name, _, value = flag[2:].partition("=")
    name, _, rest = name.partition(" ")
    value = value or rest
    owned = [o for o in OWNED_SBATCH if o == name] or [
        o for o in OWNED_SBATCH if o.startswith(name)
    ]
    if owned:
        option = owned[0]
        raise ConfigError(
            key,
            f"--{name} is set by hpcqa from the plan (sbatch takes the last one given, so this "
            "would silently replace it)",
            f"remove it; set {OWNED_SBATCH[option]}"
            if not OWNED_SBATCH[option].startswith("nothing")
            else f"remove it ({OWNED_SBATCH[option]})",
            src,
        )
    if GPU_SBATCH.fullmatch(name) or (
        name in ("gres", "tres-per-task", "tres-per-node", "tres-bind") and "gpu" in value.lower()
    ):
        raise ConfigError(
            key,
            f"--{name}={value}: a GPU request; hpcqa plans CPU ranks (sockets, cores, pinning) "
            "and would leave the GPU idle",
            "remove it: run GPU training with another launcher",
            src,
        )


# a bare 40-hex value: a W&B API key's shape (git commit ids share it; passing one by name costs nothing)
HEX_KEY = re.compile(r"[0-9a-fA-F]{40}")


def _not_a_rank_variable(name: str, src: str) -> None:
    if valuecheck.RANK_ENV.fullmatch(name):
        raise ConfigError(
            f"launch.env.{name}",
            "each rank's identity and rendezvous are set per rank from the scheduler's variables: one "
            "value for every rank would be shown by the dry run and then replaced (or break the job)",
            "remove it (cluster.nodes, launch.ranks_per_socket and launch.master_port decide them)",
            src,
        )


def _check_env(cfg: Any) -> None:
    la, src = cfg.launch, cfg.source
    for name in la.env:
        if valuecheck.MANAGED_ENV.fullmatch(name):
            raise ConfigError(
                f"launch.env.{name}",
                "hpcqa sets this variable itself (the snapshot of its code, the "
                "preloads, its own protocol): overriding it would run code other than the submitted",
                "remove it (launch.malloc and launch.openmp choose the preloads; cluster.setup can "
                "activate an environment)",
                src,
            )
        _not_a_rank_variable(name, src)
        if valuecheck.credential_name(name):
            raise ConfigError(
                f"launch.env.{name}",
                "looks like a credential: launch.env is written into the plan, "
                "the dry run and the job folder",
                f'remove it and set launch.pass_env = ["{name}"]: '
                "the value is then passed from your environment and never written",
                src,
            )
        if HEX_KEY.fullmatch(la.env[name].strip()):
            raise ConfigError(
                f"launch.env.{name}",
                "the value has the shape of an API key (40 hex digits, as "
                "Weights & Biases issues them): launch.env is written into the plan, the registry, "
                "the dry run and the job folder",
                f'set launch.pass_env = ["{name}"] and export '
                "it where you submit: the value is then passed and never written (a commit id too)",
                src,
            )
    for i, name in enumerate(la.pass_env):
        if not re.fullmatch(ENV_NAME, name):
            raise ConfigError(
                f"launch.pass_env[{i}]",
                f"{name!r} is not a variable name",
                'give names only, e.g. ["HF_TOKEN"]',
                src,
            )
        if valuecheck.MANAGED_ENV.fullmatch(name):
            raise ConfigError(
                f"launch.pass_env[{i}]",
                f"hpcqa sets {name} itself: passing it would run code other than the submitted",
                "remove it",
                src,
            )
    for name, ref in cfg.k8s.secret_env.items():
        if not re.fullmatch(ENV_NAME, name) or not re.fullmatch(
            r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[-._a-zA-Z0-9]+", ref
        ):
            raise ConfigError(
                f"k8s.secret_env.{name}",
                f'{name} = {ref!r}: expected NAME = "secret-name/key"',
                'e.g. HF_TOKEN = "hf/token" (kubectl create secret generic hf --from-literal=token=...)',
                src,
            )


# where a volume may not be mounted: the root, and what the image and the kubelet own
SYSTEM_DIRS = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/lib",
    "/var/run",
)


# Kubernetes' label key ([DNS subdomain prefix/]name, name at most 63) and value (at most 63), apimachinery's rules
LABEL_KEY = r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"


# the longest value Kubernetes takes for each name: a namespace is a DNS-1123 label (63); a PVC, service account or
# PriorityClass name a DNS subdomain (253); Kueue's queue and workload priority class reach the objects as label
# values (63); the runtime's name gets "-<8 hex>" and is a label value on the TrainJob (63)
K8S_NAME_MAX = {
    "namespace": 63,
    "pvc": 253,
    "service_account": 253,
    "priority_class": 253,
    "queue": 63,
    "workload_priority_class": 63,
    "runtime": 54,
}


def _check_k8s(cfg: Any) -> None:
    k, src = cfg.k8s, cfg.source
    for key, most in K8S_NAME_MAX.items():
        value = getattr(k, key)
        if len(value) > most:
            raise ConfigError(
                f"k8s.{key}",
                f"a name of {len(value)} characters; Kubernetes takes at most {most} here "
                "(the API server would refuse the object)",
                f"shorten k8s.{key}",
                src,
            )
    for key in ("output_path", "model_cache_path", "data_cache_path"):
        if ".." in getattr(k, key).split("/"):
            raise ConfigError(
                f"k8s.{key}",
                "'..' would leave the volume",
                "give a path inside k8s.mount_path",
                src,
            )
    _check_mount_path(k, src)
    for name, value in k.node_selector.items():
        if not re.fullmatch(LABEL_KEY, name):
            raise ConfigError(
                f"k8s.node_selector.{name}",
                "not a Kubernetes label key",
                "use [prefix/]name with letters, digits, '-', '_', '.'",
                src,
            )
        if not re.fullmatch(LABEL_VALUE, value):
            raise ConfigError(
                f"k8s.node_selector.{name}",
                f"{value!r} is not a Kubernetes label value",
                "up to 63 letters, digits, '-', '_', '.'",
                src,
            )
    for i, taint in enumerate(k.tolerations):
        m = re.fullmatch(r"([^=:]+)(=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)", taint)
        if not m or not re.fullmatch(LABEL_KEY, m[1]) or not re.fullmatch(LABEL_VALUE, m[3] or ""):
            raise ConfigError(
                f"k8s.tolerations[{i}]",
                f"{taint!r} is not key=value:Effect or key:Effect",
                'e.g. "dedicated=training:NoSchedule" (Effect: NoSchedule, PreferNoSchedule or '
                "NoExecute)",
                src,
            )


def _check_mount_path(k: Any, src: str) -> None:
    """k8s.mount_path: a plain absolute path that lays the volume over none of the image's own folders."""
    mount = k.mount_path.rstrip("/") or "/"
    if ".." in mount.split("/") or "." in mount.split("/")[1:]:
        raise ConfigError(
            "k8s.mount_path",
            f"{k.mount_path!r} has '.' or '..' in it",
            "give the plain absolute path, e.g. /mnt/hpcqa",
            src,
        )
    system = next(
        (d for d in SYSTEM_DIRS if mount == d or d != "/" and mount.startswith(d + "/")), None
    )
    if system:
        raise ConfigError(
            "k8s.mount_path",
            f"{k.mount_path!r} would lay the volume over the image's own {system}"
            + (" (the pods' /dev/shm is their own memory volume)" if system == "/dev" else ""),
            "mount it at a folder of its own, e.g. /mnt/hpcqa",
            src,
        )


def _check_eval(cfg: Any) -> None:
    t, d, src = cfg.train, cfg.data, cfg.source
    has_eval = bool(d.dataset or d.validation_file)
    if t.eval_strategy != "no" and not has_eval:
        raise ConfigError(
            "train.eval_strategy",
            f'"{t.eval_strategy}" evaluates during training, but there is no validation data',
            'set data.validation_file, or train.eval_strategy = "no"',
            src,
        )
    if t.load_best_model_at_end and t.eval_strategy == "no":
        raise ConfigError(
            "train.load_best_model_at_end",
            "the best checkpoint is chosen by evaluations during "
            'training, and train.eval_strategy is "no"',
            'set train.eval_strategy = "steps" (or "epoch"), or load_best_model_at_end = false',
            src,
        )
    every = t.eval_steps or t.logging_steps
    if t.load_best_model_at_end and t.eval_strategy == "steps" and t.save_steps % every:
        raise ConfigError(
            "train.save_steps",
            f"{t.save_steps} is not a multiple of the evaluation interval "
            f"{every} (train.eval_steps), so a checkpoint would miss its evaluation",
            f"set train.save_steps to a multiple of {every}",
            src,
        )
    if t.do_predict and not (d.dataset or d.test_file):
        raise ConfigError(
            "train.do_predict",
            "no test data: data.test_file is empty and no hub dataset is set",
            "set data.test_file, or train.do_predict = false",
            src,
        )
