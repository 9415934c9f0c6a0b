"""The same plan as a Kubeflow Trainer v2 TrainJob, the TrainingRuntime it refers to, and the staging Job that fills
the volume. Pure: plan in, dicts out (the pod template is built with the `kubernetes` client's models).

What Trainer v2 (kubeflow/trainer v2.3, on JobSet v0.12) does with them, read from its source, decides their shape:
- The runtime's JobSet template has one replicated Job, `node`, labelled as the trainer step, with one replica (the
  runtime webhook refuses more) and a container named `node`. The TrainJob's numNodes becomes that Job's
  parallelism and completions: one indexed pod per node, named <job>-node-0-<i>, resolvable as
  <job>-node-0-<i>.<job> (JobSet's headless service).
- The torch plugin gives the container PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the pod's completion index),
  PET_MASTER_ADDR = <job>-node-0-0.<job> and PET_MASTER_PORT = 29500, and refuses a TrainJob that sets them.
  hpcqa's pod script reads them; like the PyTorchJob's, it starts the node's ranks itself (not torchrun).
- Restarts: the pods restart never; a pod that exits 1-127 (a crash, or hpcqa's "restarts spent") fails its Job
  through the podFailurePolicy (reason PodFailurePolicy), and JobSet's failurePolicy then fails the JobSet. Any
  other failure (143 after a checkpoint on SIGTERM, 200 for a lost peer, an eviction, a lost node) fails the Job
  by its backoffLimit of 0, and JobSet restarts every pod (BlockingRecreate: the old ones are gone first), at most
  k8s.max_restarts times -- counted by JobSet, per JobSet, so a job applied again starts from zero.
- The plan and the pod script travel inside the TrainJob (variables), so nothing outlives the job; the runtime is a
  template named by its content, shared by jobs of the same shape and never rewritten under a queued one.
- The anti-affinity (one pod per node) names the job, so it is a TrainJob runtime patch, not part of the runtime.
"""

from __future__ import annotations

import hashlib
import json
import shlex

from hpcqa.core import config as configmod
from hpcqa.core import kinds
from hpcqa.core.config import Config
from hpcqa.core.kinds import Requeue
from hpcqa.core.plan import LaunchPlan
from hpcqa.errors import UsageError
from hpcqa.executors import common
from hpcqa.executors.interface import RenderOnly, Request
from hpcqa.executors.k8s import manifest, pods, pytorchjob
from hpcqa.record.jobdir import JobRoot

API = "trainer.kubeflow.org/v1alpha1"
CONTAINER = (
    "node"  # the trainer container's name in every Trainer v2 runtime (the webhook checks it)
)
REPLICATED_JOB = "node"
PORT = 29500  # the torch plugin's PET_MASTER_PORT (constants.ContainerTrainerPort)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # JobSet labels every pod with these
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
PATCH_MANAGER = "hpcqa.local/render"  # a TrainJob runtime patch's owner (a domain-prefixed path)
MAX_NAME = (
    40  # <name>-node-0-<index>-<5 random> is a pod name (63 at most; JobSet's webhook checks)
)
CRASH_EXIT_CODES = list(range(1, 128))  # a rank's own error, or the restarts spent: fail the job


def _env(plan: LaunchPlan, name: str) -> list:
    """The container's variables: the PyTorchJob's, less the rendezvous (the torch plugin sets PET_MASTER_*), plus
    JobSet's restart attempt and JobSet UID (the restart count's owner) from the pod's labels."""
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1ObjectFieldSelector

    env = pods.pod_env(
        plan, name
    )  # the torch plugin gives MASTER_ADDR/PORT and the node rank (PET_*)
    for var, label in (
        ("HPCQA_JOB_UID", JOBSET_UID_LABEL),
        ("HPCQA_RESTART_ATTEMPT", RESTART_LABEL),
    ):
        env.append(
            V1EnvVar(
                name=var,
                value_from=V1EnvVarSource(
                    field_ref=V1ObjectFieldSelector(field_path=f"metadata.labels['{label}']")
                ),
            )
        )
    return env


def runtime(plan: LaunchPlan, name: str) -> dict:
    """The TrainingRuntime: everything but the job's own values, named <k8s.runtime>-<digest of its spec>."""
    cfg = plan.config
    pod = _runtime_pod(plan, name)
    job = {
        "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
        "spec": {
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onPodConditions": [],
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": CRASH_EXIT_CODES,
                        },
                    }
                ]
            },
            "template": pod,
        },
    }
    spec = {
        "mlPolicy": {"numNodes": plan.nodes, "torch": {}},
        "template": {
            "spec": {
                "failurePolicy": {
                    "maxRestarts": cfg.k8s.max_restarts,
                    "restartStrategy": "BlockingRecreate",
                    "rules": [
                        {
                            "name": "crash",
                            "action": "FailJobSet",
                            "onJobFailureReasons": ["PodFailurePolicy"],
                        }
                    ],
                },
                "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": job}],
            }
        },
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    labels = {**pods.labels(cfg), "trainer.kubeflow.org/framework": "torch"}
    return {
        "apiVersion": API,
        "kind": "TrainingRuntime",
        "metadata": pods.meta(f"{cfg.k8s.runtime}-{digest}", cfg, labels),
        "spec": spec,
    }


def _runtime_pod(plan: LaunchPlan, name: str) -> dict:
    """The runtime's pod template, as the API server stores it: the job's own name left for the TrainJob."""
    from kubernetes.client import ApiClient

    shape = pods.PodShape(CONTAINER, (), tuple(_env(plan, name)), PORT, "node", None)
    pod = ApiClient().sanitize_for_serialization(pods.pod_template(plan, shape))
    pod["spec"]["restartPolicy"] = (
        "Never"  # a podFailurePolicy needs it; JobSet recreates pods, kubelet never
    )
    for e in pod["spec"]["containers"][0]["env"]:
        if e["name"] == "HPCQA_K8S_JOB":  # the job's own name comes from the TrainJob
            pod["spec"]["containers"][0]["env"].remove(e)
            break
    return pod


def trainjob(plan: LaunchPlan, name: str, runtime_name: str) -> dict:
    cfg = plan.config
    from kubernetes.client import ApiClient

    spread = ApiClient().sanitize_for_serialization(pods.spread(JOBSET_NAME_LABEL, name))
    env = [{"name": "HPCQA_K8S_JOB", "value": name}, *pods.carried(plan, name, "TrainJob")]
    return {
        "apiVersion": API,
        "kind": "TrainJob",
        "metadata": pods.meta(name, cfg, pods.job_labels(cfg)),
        "spec": {
            "runtimeRef": {
                "name": runtime_name,
                "apiGroup": "trainer.kubeflow.org",
                "kind": "TrainingRuntime",
            },
            "activeDeadlineSeconds": pods.deadline_s(cfg),
            "trainer": {
                "image": cfg.k8s.image,
                "command": ["bash", "-c", pytorchjob.RUN_SCRIPT],
                "env": env,
                "numNodes": plan.nodes,
                "numProcPerNode": plan.ranks_per_node,
            },
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": REPLICATED_JOB,
                                        "template": {
                                            "spec": {"template": {"spec": {"affinity": spread}}}
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


def objects(plan: LaunchPlan) -> list[dict]:
    """[TrainingRuntime, TrainJob]: the runtime first (the TrainJob webhook refuses a job whose runtime it cannot
    find), rendered into two files by the render kinds."""
    plan = plan.with_requeue(Requeue.POD)
    pods.check(plan.config)
    name = pods.job_name(plan, MAX_NAME)
    rt = runtime(plan, name)
    return [rt, trainjob(plan, name, rt["metadata"]["name"])]


def stage_job(cfg: Config) -> dict:
    """A batch Job that runs `hpcqa stage --k8s` in the image with the PVC mounted: it fetches the model and the
    dataset (it needs the network the training pods do without) and writes the features and the manifest the
    training pods check. The config travels inside it; it retries twice and is deleted a day after it ends."""
    from kubernetes.client import ApiClient

    pods.check(cfg, pinned_only=True)
    pod_cfg = pods.pod_config(cfg)
    base = pods.job_name_for(
        cfg.job.name, hashlib.sha256(configmod.to_toml(cfg).encode()).hexdigest(), MAX_NAME - 6
    )
    name = f"{base}-stage"
    script = (
        "set -eu\nprintf '%s' \"$HPCQA_CONFIG_TOML\" > /tmp/hpcqa-stage.toml\n"
        f"exec {shlex.quote(cfg.cluster.python or 'python3')} -m hpcqa stage /tmp/hpcqa-stage.toml --k8s"
    )
    env = [
        {"name": "HPCQA_CONFIG_TOML", "value": configmod.to_toml(cfg)},
        {"name": "HF_HOME", "value": pods.hf_home(cfg)},
        {"name": "HF_HUB_CACHE", "value": pod_cfg.model.cache_dir},
        {"name": "HF_DATASETS_CACHE", "value": pod_cfg.data.cache_dir},
    ]
    env += [ApiClient().sanitize_for_serialization(e) for e in pods.secret_env(cfg)]
    pod = ApiClient().sanitize_for_serialization(pods.stage_pod(cfg, ["bash", "-c", script], env))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": pods.meta(name, cfg, pods.job_labels(cfg)),
        "spec": {"backoffLimit": 2, "ttlSecondsAfterFinished": 86400, "template": pod},
    }


def pod_facts(plan: LaunchPlan, docs: list[dict]) -> tuple[tuple[str, str], ...]:
    cfg = plan.config
    rt, job = docs
    spec = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]
    qos = pods.qos_class(spec)
    cpus = pods.pod_cpus(plan)
    facts = [
        (
            "pods",
            f"{plan.nodes} node pod(s) x {plan.ranks_per_node} rank(s), {cpus} CPUs / "
            f"{pods.pod_memory(cfg)} each (TrainJob {job['metadata']['name']}, runtime "
            f"{rt['metadata']['name']})",
        ),
        (
            "QoS",
            f"every pod {qos}"
            + (
                " with whole CPUs: a static CPU manager gives it exclusive cores"
                if qos == "Guaranteed" and pods.whole_cpus(spec)
                else ": no exclusive cores"
            ),
        ),
        (
            "restarts",
            f"an eviction or a lost peer restarts every pod from the last checkpoint, at most "
            f"{cfg.k8s.max_restarts} time(s) per job (JobSet's maxRestarts); a crash fails the job",
        ),
        (
            "admission",
            (
                f"Kueue queue {cfg.k8s.queue}: all pods admitted at once or none"
                if cfg.k8s.queue
                else "no Kueue queue (k8s.queue): pods are scheduled one by one"
            )
            + f"; deadline {pods.deadline_s(cfg)} s (cluster.time_limit_min)",
        ),
        pods.security_fact(cfg),
    ]
    return tuple(facts)


def node_pod_names(d: dict) -> list[str]:
    """JobSet's pod names for a TrainJob: <job>-node-0-<index>-<5 random characters>."""
    if d["kind"] != "TrainJob":
        return []
    return [f"{d['metadata']['name']}-node-0-{d['spec']['trainer']['numNodes'] - 1}-abcde"]


class TrainJobRender(RenderOnly):
    """Kubernetes with Kubeflow Trainer v2: render only. The request's two scripts are the TrainJob and its
    TrainingRuntime, written apart (`render --kind trainjob`, `--kind trainingruntime`): the TrainJob webhook
    looks the runtime up in the controller's cache, so a job applied with its runtime in one file is refused
    until the cache has caught up, and `kubectl delete -f` of one job must not delete a runtime that other jobs of
    its shape name. `kubectl apply -f` submits them, the runtime first; the Trainer runs them through JobSet."""

    kind = kinds.K8sKind
    requeue = Requeue.POD
    via = "a TrainJob for Kubeflow Trainer v2"
    no_scheduler = "Kubernetes: no API server is asked (kubectl apply --dry-run=server would)"
    refusal = (
        "hpcqa renders the TrainJob; Kubeflow Trainer runs it",
        "apply the YAML with kubectl apply -f",
    )

    prepare_render = staticmethod(pytorchjob.PyTorchJobRender.prepare_render)

    def dry_run(self, sp) -> Request:
        if sp.is_sweep:
            raise UsageError("a TrainJob runs one job", "render one variant at a time")
        sp = sp.with_requeue(self.requeue)
        plan = sp.plans[0]
        docs = objects(plan)
        pods.check_names(docs, plan.config, node_pod_names)
        facts = pod_facts(plan, docs) + common.work_facts(sp, None)
        rt, job = docs
        name = job["metadata"]["name"]
        return Request(
            self.kind.name,
            self.via,
            sp,
            JobRoot.new_submission(),
            scripts=(manifest.to_yaml([job]), manifest.to_yaml([rt])),
            commands=(
                ("kubectl", "apply", "-f", "<runtime file>"),
                ("kubectl", "apply", "-f", "<file>"),
            ),
            facts=facts,
            notes=pods.plan_notes(plan),
            placement=(f"TrainJob {name}",),
            summary=f"TrainJob {name}: {facts[0][1]}; {facts[1][1]}",
        )
