"""The pod kit every Kubernetes object of hpcqa shares: names and labels, the pod template (one pod per node, a
node's worth of whole CPUs, Guaranteed QoS), the node script and the variables that carry the plan, security,
tolerations, the staging pod, and the checks of names and shapes (their YAML: manifest.py). Pure: plan in,
objects out; the objects are built with the `kubernetes` package's models, serialised by its ApiClient."""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import shlex
from typing import Any, Callable

from hpcqa import fsutil, resources
from hpcqa.core import values as valuecheck
from hpcqa.core.config import Config
from hpcqa.core.kinds import Launcher, PodExit
from hpcqa.core.plan import LaunchPlan
from hpcqa.errors import ConfigError, UsageError
from hpcqa.executors import render
from hpcqa.executors.k8s import image
from hpcqa.record import jobdir

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue: the LocalQueue that admits the job
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # Kueue: the job's WorkloadPriorityClass
ISTIO_INJECT = (
    "sidecar.istio.io/inject"  # "false": no Envoy sidecar (it would make the pod Burstable,
)
# keep a finished pod running, and fail restricted admission)
# Kubernetes' name rules (k8s.io/apimachinery/pkg/util/validation): metadata.name of a PyTorchJob and of the
# services the operator derives from it is a DNS-1035 label; label values are up to 63 of [A-Za-z0-9_.-],
# beginning and ending with a letter or digit.
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def pod_config(cfg: Config) -> Config:
    """The config as the pods see it: job folders and caches on the PVC."""
    k = cfg.k8s
    on_pvc = lambda sub: posixpath.join(k.mount_path, sub)  # noqa: E731
    return dataclasses.replace(
        cfg,
        job=dataclasses.replace(cfg.job, output_dir=on_pvc(k.output_path)),
        model=dataclasses.replace(cfg.model, cache_dir=on_pvc(k.model_cache_path)),
        data=dataclasses.replace(cfg.data, cache_dir=on_pvc(k.data_cache_path)),
    )


def hf_home(cfg: Config) -> str:
    """HF_HOME in the pods: on the volume (huggingface_hub keeps its token and xet caches there)."""
    return posixpath.join(cfg.k8s.mount_path, "hf-home")


def volume_folders(cfg: Config) -> tuple[str, ...]:
    """What the pods write on the volume (cfg: the pods' config, pod_config): the job folders, both caches, HF_HOME."""
    return (cfg.job.output_dir, cfg.model.cache_dir, cfg.data.cache_dir, hf_home(cfg))


def check_volume(cfg: Config) -> None:
    """Where the staging Job (or `hpcqa stage --k8s` on a machine with the PVC mounted) writes: the job folders and
    both caches on the volume, written by this UID. A fresh ReadWriteMany volume (CephFS, EFS, NFS) is created
    root-owned 0755, and the kubelet applies fsGroup only to volumes whose driver takes it (a CSI driver declaring
    fsGroupPolicy File, or ReadWriteOnce with an fsType): everything else refuses the pods' UID. Said here, once,
    with the fix, instead of as a traceback halfway through the download."""
    k = cfg.k8s
    for folder in volume_folders(cfg):
        why = fsutil.unwritable(folder)
        if why:
            raise UsageError(
                f"the volume {k.pvc} at {k.mount_path}: {why}",
                f"make the volume writable by UID {os.getuid()} once (e.g. from a root pod: chown "
                f"{os.getuid()} {k.mount_path}), or make it group-writable for a group the pods get "
                f"(k8s.supplemental_groups), or let the staging Job do it as root once "
                f"(k8s.prepare_volume = true); fsGroup does not reach a ReadWriteMany volume: "
                "docs/kubernetes.md, Storage",
            )


def job_name(plan: LaunchPlan, max_name: int) -> str:
    """<job.name>-<plan digest> as a DNS-1035 label (lower case, starting with a letter): the same plan renders
    the same job (and job folder). Short enough that the names derived from it (<name>-worker-<index>, a TrainJob's
    pod names) stay valid."""
    return job_name_for(plan.config.job.name, plan.digest, max_name)


def job_name_for(name: str, digest: str, max_name: int) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", name.lower())
    base = re.sub(r"^[^a-z]+", "", base)[: max_name - 9].rstrip("-") or "hpcqa"
    return f"{base}-{digest[:8]}"


def instance_label(cfg: Config) -> str:
    """job.name as a label value: invalid characters become '-', cut to 63, ends trimmed to a letter or digit."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", cfg.job.name)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def pod_cpus(plan: LaunchPlan) -> int:
    """CPUs per pod: k8s.cpus, or the declared node less k8s.reserved_cores per socket (whole cores)."""
    c, k = plan.config.cluster, plan.config.k8s
    if k.cpus:
        return k.cpus
    return c.sockets_per_node * max(c.cores_per_socket - k.reserved_cores, 0) * c.threads_per_core


def pod_memory(cfg: Config) -> str:
    if cfg.k8s.memory:
        return cfg.k8s.memory
    if cfg.cluster.mem_gb:
        return f"{cfg.cluster.mem_gb}G"
    raise ConfigError(
        "k8s.memory",
        "a Guaranteed pod needs a memory limit, and neither k8s.memory nor cluster.mem_gb is set",
        'set k8s.memory = "192Gi" (what a node can give one pod)',
        cfg.source,
    )


def check(cfg: Config, pinned_only: bool = False) -> None:
    """What every Kubernetes object needs of the config (pinned_only: the staging Job, which needs no pod shape)."""
    if not cfg.k8s.image:
        raise ConfigError(
            "k8s.image",
            "no container image",
            "build one from `hpcqa render CONFIG --kind "
            'dockerfile` and set k8s.image = "registry.example.com/hpcqa:1"',
            cfg.source,
        )
    image_problem = image.unpinned(cfg.k8s.image)
    if image_problem:
        raise ConfigError(
            "k8s.image",
            f"{cfg.k8s.image!r} {image_problem}: which image a pod runs would depend on "
            "what the node has cached (imagePullPolicy IfNotPresent)",
            "give the tag you pushed (registry.example.com/hpcqa:1.4) or a digest (...@sha256:<hex>)",
            cfg.source,
        )
    unmapped = [n for n in cfg.launch.pass_env if n not in cfg.k8s.secret_env]
    if unmapped:  # a name k8s.secret_env maps comes from its Secret in the pod
        raise ConfigError(
            "launch.pass_env",
            f"{', '.join(unmapped)}: a pod has no submitting shell to pass variables from",
            f'take it from a Secret: k8s.secret_env.{unmapped[0]} = "secret/key" '
            "(or launch.env for a value that is not secret)",
            cfg.source,
        )
    if pinned_only:
        return
    pod_memory(cfg)
    c, k = cfg.cluster, cfg.k8s
    if not k.cpus and k.reserved_cores >= c.cores_per_socket:
        raise ConfigError(
            "k8s.reserved_cores",
            f"{k.reserved_cores} reserved of {c.cores_per_socket} cores per "
            "socket leaves the pod no CPU",
            "lower k8s.reserved_cores, or set k8s.cpus",
            cfg.source,
        )
    if not re.search(r"[A-Za-z0-9]", cfg.job.name):
        raise ConfigError(
            "job.name",
            f"{cfg.job.name!r} has no letter or digit: nothing of it can name a Kubernetes object",
            "use letters, digits and '-', e.g. job.name = \"squad-spr\"",
            cfg.source,
        )


def meta(name: str, cfg: Config, object_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An object's metadata: the namespace only when the config names one (else `kubectl apply -n` decides)."""
    out: dict[str, Any] = {"name": name}
    if cfg.k8s.namespace:
        out["namespace"] = cfg.k8s.namespace
    out["labels"] = object_labels if object_labels is not None else labels(cfg)
    return out


def job_labels(cfg: Config) -> dict[str, str]:
    """The job object's labels: Kueue admits a job that names its LocalQueue, every pod at once or none, at the
    priority its WorkloadPriorityClass label names. The staging Job carries them too: where Kueue manages plain Jobs,
    one without a queue stays suspended."""
    return {
        **labels(cfg),
        **({QUEUE_LABEL: cfg.k8s.queue} if cfg.k8s.queue else {}),
        **(
            {PRIORITY_LABEL: cfg.k8s.workload_priority_class}
            if cfg.k8s.workload_priority_class
            else {}
        ),
    }


def tolerations(cfg: Config) -> list[dict[str, str]]:
    """k8s.tolerations ("key=value:Effect" or "key:Effect", checked by the config) as pod tolerations."""
    out = []
    for taint in cfg.k8s.tolerations:
        key_value, effect = taint.rsplit(":", 1)
        key, _, value = key_value.partition("=")
        out.append(
            {"key": key, "operator": "Equal", "value": value, "effect": effect}
            if "=" in key_value
            else {"key": key, "operator": "Exists", "effect": effect}
        )
    return out


def check_names(objs: list[dict], cfg: Config, derived: Callable[[dict], list[str]]) -> None:
    """Every name and label value of the rendered objects by Kubernetes' rules, and the names the controller derives
    from the job's (`derived(object)`: its services and pods): a bad one names the key it came from."""
    for d in objs:
        meta = d["metadata"]
        dns1035 = d["kind"] in (
            "PyTorchJob",
            "TrainJob",
        )  # their names become service and host names
        rule, what = (
            (DNS1035, "a DNS-1035 label") if dns1035 else (DNS1123_SUBDOMAIN, "a DNS subdomain")
        )
        names = [meta["name"], *derived(d)]
        for name in names:
            if len(name) > 63 or not rule.fullmatch(name):
                raise ConfigError(
                    "job.name",
                    f"{cfg.job.name!r} gives the {d['kind']} name {name!r}, not {what} of "
                    "at most 63 characters",
                    "use letters, digits and '-', starting with a letter",
                    cfg.source,
                )
        for key, value in (meta.get("labels") or {}).items():
            if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
                raise ConfigError(
                    "job.name",
                    f"{cfg.job.name!r} gives the label {key}={value!r}, not a label value",
                    "use letters, digits, '-', '_', '.'",
                    cfg.source,
                )
    ns = cfg.k8s.namespace
    if ns and (len(ns) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ns)):
        raise ConfigError(
            "k8s.namespace",
            f"{ns!r} is not a namespace name (DNS-1123 label, 63 characters at most)",
            'e.g. k8s.namespace = "training"',
            cfg.source,
        )


def qos_class(pod_spec: dict) -> str:
    """Kubernetes' QoS class of a pod (pkg/apis/core/helper/qos): Guaranteed when every container, init containers
    included, has CPU and memory requests equal to its limits; BestEffort when none has any; else Burstable."""
    containers = list(pod_spec.get("initContainers") or []) + list(pod_spec.get("containers") or [])
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        for res in ("cpu", "memory"):
            if res not in limits or requests.get(res, limits[res]) != limits[res]:
                return "Burstable"
    return "Guaranteed"


def whole_cpus(pod_spec: dict) -> bool:
    """The static CPU manager gives exclusive cores only to Guaranteed pods' containers with integer CPUs."""
    return all(
        str((c.get("resources") or {}).get("limits", {}).get("cpu", "")).isdigit()
        for c in pod_spec.get("containers") or []
    )


PLAN_FROM_ENV = (
    'plan="$(mktemp -d)/@@PLAN_FILE@@"  # the job carries the plan: no ConfigMap outlives it\n'
    'printf \'%s\' "${HPCQA_PLAN_JSON:?the job sets HPCQA_PLAN_JSON}" > "$plan"'
)


MAX_VARIABLE = (
    128 << 10
)  # Linux's MAX_ARG_STRLEN: one "NAME=value" string of an exec'd environment, NUL included


def carried(plan: LaunchPlan, name: str, kind: str) -> list[dict[str, str]]:
    """What the job object itself carries to its pods: the plan and the pod script, as the container's variables
    (RUN_SCRIPT runs the script). Nothing else is applied with the job, so nothing outlives it. A variable the
    kernel would refuse at the container's exec (over MAX_VARIABLE: the pod could never start) is refused here."""
    env = [
        {"name": "HPCQA_PLAN_JSON", "value": plan.dumps()},
        {"name": "HPCQA_NODE_SCRIPT", "value": node_script(plan, name, kind)},
    ]
    for e in env:
        size = len(f"{e['name']}={e['value']}".encode()) + 1
        if size > MAX_VARIABLE:
            longest = max(plan.command, key=len, default="")
            raise UsageError(
                f"the {kind}'s variable {e['name']} would be {size} bytes: over Linux's {MAX_VARIABLE} "
                "byte limit for one variable (MAX_ARG_STRLEN), so its pods could never start",
                (
                    f"shorten job.command (its longest argument has {len(longest)} characters): put long "
                    "values in a file on the volume and pass its path"
                    if plan.command
                    else "shorten the longest config values (cluster.setup, job.command)"
                ),
            )
    return env


def node_script(plan: LaunchPlan, name: str, kind: str = "PyTorchJob") -> str:
    """The pod's entry point (sbatch_templates/pytorchjob-node.sh) for a PyTorchJob or a TrainJob; the plan comes
    from the container's environment."""
    cfg = plan.config
    python = shlex.quote(cfg.cluster.python or "python3")
    values = {
        "PLAN_SETUP": PLAN_FROM_ENV.replace("@@PLAN_FILE@@", render.plain(jobdir.SCRIPT_PLAN)),
        "KIND": kind,
        "TARGET": kind.lower(),
        "SOURCE": valuecheck.shown(cfg.source) or "a config",
        "SETUP": render.setup_block(cfg.cluster.setup),
        "NODES": str(plan.nodes),
        "PPN": str(plan.ranks_per_node),
        "PYTHON": python,
        "NAME": name,
        "JOB_ROOT": shlex.quote(jobdir.root_path(cfg.job.output_dir, cfg.job.name)),
        "PLAN_FILE": render.plain(jobdir.SCRIPT_PLAN),
        "STOPPED_EXIT": str(int(PodExit.STOPPED)),
        "LOST_PEER_EXIT": str(int(PodExit.LOST_PEER)),
        "SPENT_EXIT": str(int(PodExit.RESTARTS_SPENT)),
        "MAX_RESTARTS": str(cfg.k8s.max_restarts),
        "MASTER_WAIT_S": str(cfg.train.ddp_timeout_s),
        "KILL_WAIT_S": "10",
    }
    return render.fill(resources.read_text(render.template_dir() / "pytorchjob-node.sh"), values)


def pod_env(
    plan: LaunchPlan,
    name: str,
    master: tuple[str, int] | None = None,
    node_rank_label: str | None = None,
) -> list:
    """The pod's variables: caches on the PVC, offline, the job's name and namespace, secrets by reference; and where
    the controller sets neither, MASTER_ADDR/PORT (`master`) and the node rank from a pod label (the PyTorchJob's)."""
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1ObjectFieldSelector

    cfg = plan.config
    values = {
        "HF_HUB_CACHE": cfg.model.cache_dir,
        "HF_DATASETS_CACHE": cfg.data.cache_dir,
        "HF_HOME": hf_home(cfg),
        "HPCQA_K8S_JOB": name,
    }
    if master:
        values.update(MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))
    if cfg.k8s.offline:
        values.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env = [V1EnvVar(name=k, value=v) for k, v in values.items()]
    fields = [("HPCQA_K8S_NAMESPACE", "metadata.namespace")]
    if node_rank_label:
        fields.append(("HPCQA_NODE_RANK", f"metadata.labels['{node_rank_label}']"))
    for var, path in fields:
        env.append(
            V1EnvVar(
                name=var,
                value_from=V1EnvVarSource(field_ref=V1ObjectFieldSelector(field_path=path)),
            )
        )
    return env + secret_env(cfg)


def secret_env(cfg: Config) -> list:
    """k8s.secret_env as secretKeyRef variables: the value stays in the Secret; the manifest names it."""
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

    out = []
    for var, ref in cfg.k8s.secret_env.items():
        secret, key = ref.split("/", 1)
        out.append(
            V1EnvVar(
                name=var,
                value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name=secret, key=key)),
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class PodShape:
    """What differs between the PyTorchJob's pods and the TrainJob's: the container, how it starts, its variables,
    its port, and the label that marks a pod as this job's (for anti-affinity)."""

    container: str
    command: tuple[str, ...]
    env: tuple
    port: int
    port_name: str
    job_label: (
        tuple[str, str] | None
    )  # None: the anti-affinity comes with the job (a TrainJob's runtime patch)


def pod_template(plan: LaunchPlan, shape: PodShape):
    """The pod: Guaranteed (requests = limits, whole CPUs), restricted security, the PVC and /dev/shm, one pod per
    node, the Istio sidecar off, the namespace's scheduling knobs (tolerations, nodeSelector, priorityClass), and
    no service links (the kubelet would give every pod <SERVICE>_PORT=tcp://IP:PORT for each Service of the
    namespace: one named master sets MASTER_PORT)."""
    from kubernetes import client as k

    cfg = plan.config
    quantity = {"cpu": str(pod_cpus(plan)), "memory": pod_memory(cfg)}
    mounts = [
        k.V1VolumeMount(name="data", mount_path=cfg.k8s.mount_path),
        k.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
    ]
    volumes = [
        k.V1Volume(
            name="data",
            persistent_volume_claim=k.V1PersistentVolumeClaimVolumeSource(claim_name=cfg.k8s.pvc),
        ),
        k.V1Volume(
            name="dshm",
            empty_dir=k.V1EmptyDirVolumeSource(medium="Memory", size_limit=cfg.k8s.shm_size),
        ),
    ]
    container = k.V1Container(
        name=shape.container,
        image=cfg.k8s.image,
        image_pull_policy="IfNotPresent",
        command=list(shape.command) or None,
        ports=[k.V1ContainerPort(name=shape.port_name, container_port=shape.port, protocol="TCP")],
        env=list(shape.env),
        resources=k.V1ResourceRequirements(requests=dict(quantity), limits=dict(quantity)),
        # the restricted Pod Security profile's container settings (harmless for a root image)
        security_context=k.V1SecurityContext(
            allow_privilege_escalation=False, capabilities=k.V1Capabilities(drop=["ALL"])
        ),
        volume_mounts=mounts,
    )
    spec = k.V1PodSpec(
        containers=[container],
        volumes=volumes,
        affinity=spread(*shape.job_label) if shape.job_label else None,
        node_selector=dict(cfg.k8s.node_selector) or None,
        tolerations=tolerations(cfg) or None,
        priority_class_name=cfg.k8s.priority_class or None,
        service_account_name=cfg.k8s.service_account or None,
        security_context=pod_security(cfg),
        termination_grace_period_seconds=cfg.cluster.signal_delay_s,
        enable_service_links=False,
    )
    return k.V1PodTemplateSpec(
        metadata=k.V1ObjectMeta(labels={**labels(cfg), ISTIO_INJECT: "false"}), spec=spec
    )


def spread(label: str, value: str):
    """One pod per node: no two pods carrying label=value (this job's) on one host."""
    from kubernetes import client as k

    return k.V1Affinity(
        pod_anti_affinity=k.V1PodAntiAffinity(
            required_during_scheduling_ignored_during_execution=[
                k.V1PodAffinityTerm(
                    topology_key="kubernetes.io/hostname",
                    label_selector=k.V1LabelSelector(match_labels={label: value}),
                )
            ]
        )
    )


def stage_pod(cfg: Config, command: list[str], env: list[dict]):
    """The staging Job's pod: the image, the PVC, restricted security; modest resources, online (no *_OFFLINE)."""
    from kubernetes import client as k

    container = k.V1Container(
        name="stage",
        image=cfg.k8s.image,
        image_pull_policy="IfNotPresent",
        command=command,
        env=env,
        resources=k.V1ResourceRequirements(
            requests={"cpu": "2", "memory": "8Gi"}, limits={"cpu": "4", "memory": "16Gi"}
        ),
        security_context=k.V1SecurityContext(
            allow_privilege_escalation=False, capabilities=k.V1Capabilities(drop=["ALL"])
        ),
        volume_mounts=[k.V1VolumeMount(name="data", mount_path=cfg.k8s.mount_path)],
    )
    volumes = [
        k.V1Volume(
            name="data",
            persistent_volume_claim=k.V1PersistentVolumeClaimVolumeSource(claim_name=cfg.k8s.pvc),
        )
    ]
    spec = k.V1PodSpec(
        containers=[container],
        volumes=volumes,
        restart_policy="Never",
        init_containers=[prepare_volume(cfg)]
        if cfg.k8s.prepare_volume and cfg.k8s.run_as_user
        else None,
        node_selector=dict(cfg.k8s.node_selector) or None,
        tolerations=tolerations(cfg) or None,
        service_account_name=cfg.k8s.service_account or None,
        security_context=pod_security(cfg),
        enable_service_links=False,
    )
    return k.V1PodTemplateSpec(
        metadata=k.V1ObjectMeta(labels={**labels(cfg), ISTIO_INJECT: "false"}), spec=spec
    )


def prepare_volume(cfg: Config):
    """k8s.prepare_volume: the staging Job's init container, the one thing that runs as root: it makes the folders
    the pods write on the volume (volume_folders) and gives them to the pods' UID and group (not recursively:
    once, before anything is in them). Only CAP_CHOWN; not admitted in a restricted Pod Security namespace."""
    from kubernetes import client as k

    pod_cfg = pod_config(cfg)
    uid = cfg.k8s.run_as_user
    folders = " ".join(shlex.quote(f) for f in volume_folders(pod_cfg))
    script = "\n".join(prepare_script(folders, uid))
    return k.V1Container(
        name="prepare-volume",
        image=cfg.k8s.image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c", script],
        resources=k.V1ResourceRequirements(
            requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "1", "memory": "256Mi"}
        ),
        security_context=k.V1SecurityContext(
            run_as_user=0,
            run_as_group=0,
            run_as_non_root=False,
            allow_privilege_escalation=False,
            capabilities=k.V1Capabilities(drop=["ALL"], add=["CHOWN"]),
        ),
        volume_mounts=[k.V1VolumeMount(name="data", mount_path=cfg.k8s.mount_path)],
    )


def prepare_script(folders: str, uid: int) -> list[str]:
    """The init container's shell lines, idempotent and never through a link. Root here has CAP_CHOWN and nothing
    else: it may chmod only what root owns (no CAP_FOWNER), so a folder root owns is made the pods' (chmod first,
    then `chown -h`), one the pods' UID already owns is left as it is (a second staging run), a missing one in a
    folder the UID owns is left to the pods (root may not write there: a volume root given to the UID), and one that is a link, not a folder, or someone else's is refused with a line in the
    Job's log and exit 1: a link planted on the group-writable volume would otherwise get its target chowned."""
    return [
        "set -eu",
        f"for d in {folders}; do",
        '  if [ -L "$d" ]; then echo "hpcqa: $d is a symbolic link: not followed, nothing changed (remove it)" >&2;'
        " exit 1; fi",
        '  if [ -e "$d" ] && [ ! -d "$d" ]; then echo "hpcqa: $d is not a folder: nothing changed" >&2; exit 1; fi',
        '  if [ ! -e "$d" ] && [ "$(stat -c %u "$(dirname "$d")")" = ' + str(uid) + " ]; then",
        f'    echo "hpcqa: $(dirname "$d") belongs to {uid} (the pods): they make $d themselves"; continue; fi',
        '  [ -d "$d" ] || mkdir -p "$d"',
        '  owner=$(stat -c %u "$d")',
        f'  if [ "$owner" = 0 ]; then chmod 0775 "$d"; chown -h {uid}:{uid} "$d"',
        f'  elif [ "$owner" != {uid} ]; then echo "hpcqa: $d belongs to UID $owner, neither root nor {uid} '
        '(the pods): nothing changed" >&2; exit 1',
        "  fi",
        "done",
        f'echo "hpcqa: the volume folders belong to {uid}:{uid}"',
    ]


def security_fact(cfg: Config) -> tuple[str, str]:
    return (
        "security",
        f"runs as UID {cfg.k8s.run_as_user}, runAsNonRoot: fits a restricted Pod Security namespace"
        if cfg.k8s.run_as_user
        else "runs as root (k8s.run_as_user = 0): not admitted in a restricted "
        "Pod Security namespace",
    )


def pod_security(cfg: Config):
    from kubernetes import client as k

    seccomp = k.V1SeccompProfile(type="RuntimeDefault")
    uid = cfg.k8s.run_as_user
    if not uid:
        return k.V1PodSecurityContext(seccomp_profile=seccomp)
    # the image's non-root USER; fsGroup makes the PVC's new files writable by it, and OnRootMismatch changes a
    # volume's ownership only when its root does not match already (not every file of a large volume at every start)
    # -- where the kubelet applies fsGroup at all: not to a ReadWriteMany volume (NFS, CephFS, EFS), which the pods
    # write as their UID or as one of k8s.supplemental_groups
    return k.V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=uid,
        run_as_group=uid,
        fs_group=uid,
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=seccomp,
        supplemental_groups=list(cfg.k8s.supplemental_groups) or None,
    )


def labels(cfg: Config) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": "hpcqa"}
    if instance_label(cfg):
        labels["app.kubernetes.io/instance"] = instance_label(cfg)
    return labels


def deadline_s(cfg: Config) -> int:
    """cluster.time_limit_min as the job's activeDeadlineSeconds: counted from the job's start, across its restarts."""
    return cfg.cluster.time_limit_min * 60


# Kueue v0.19 (config API v1beta2, apis/config/v1beta2/defaults.go): waitForPodsReady is on unless configured off,
# DefaultWaitForPodsReadyTimeout = 30 min, and its recoveryTimeout defaults to the same
KUEUE_PODS_READY_S = 30 * 60


def plan_notes(plan: LaunchPlan) -> tuple[str, ...]:
    c, cpus = plan.config.cluster, pod_cpus(plan)
    notes = []
    if cpus % c.threads_per_core:
        notes.append(
            f"k8s.cpus = {cpus} is not a whole number of cores ({c.threads_per_core} threads each): a kubelet "
            "with the static CPU manager's full-pcpus-only option refuses the pod"
        )
    if cpus >= c.sockets_per_node * c.cores_per_socket * c.threads_per_core:
        notes.append(
            f"each pod asks for all {cpus} CPUs of the declared node: no node can allocate that much "
            "(the kubelet reserves some); set k8s.cpus to the node's allocatable"
        )
    k = plan.config.k8s
    wait = plan.config.train.ddp_timeout_s
    if k.queue and abs(wait - KUEUE_PODS_READY_S) < 600:
        notes.append(
            f"Kueue's waitForPodsReady (on by default in v0.19, timeout {KUEUE_PODS_READY_S // 60} min: "
            f"apis/config/v1beta2/defaults.go) is within 10 min of train.ddp_timeout_s = {wait} s, how long a "
            "pod waits for its peers: whichever ends first decides between a requeue (Kueue) and a spent "
            "restart (the pods); set Kueue's timeout well below it (e.g. 10 min), or train.ddp_timeout_s "
            "well above"
        )
    if k.queue and k.tolerations and plan.launcher is Launcher.TRAINJOB:
        notes.append(
            "k8s.tolerations with a Kueue queue: on admission Kueue adds a runtime patch with its "
            "ResourceFlavor's tolerations, and the Trainer's strategic merge replaces the pods' list with "
            "it whenever the flavour has any; put these tolerations in the ResourceFlavor's "
            "spec.tolerations too"
        )
    return tuple(notes)
