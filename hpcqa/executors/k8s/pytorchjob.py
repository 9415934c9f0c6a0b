"""The same plan as a Kubeflow PyTorchJob (training operator), and the image it runs. Pure: plan in, objects out.

One pod per node, not one per rank. Each pod is a node's worth of CPUs (Guaranteed QoS: requests = limits,
whole CPUs, so a kubelet with `--cpu-manager-policy=static` gives it exclusive cores as a cpuset) and runs
the same node script as Slurm's srun step: one rank per socket (or slice of one), each through hpcqa's
rank wrapper, which reads the pod's own cpuset and sysfs and pins by the same rule (`topology.layout`). One
pod per rank would leave the kubelet to choose which cores each rank gets, without regard to sockets, and
the Intel variables (OMP/KMP/CCL affinity) could not name them before the pod starts.

What the training operator (v1.8, v1.9) does with the objects, read from its source, decides their shape:
- Only Worker replicas, no Master. With a Master the operator injects an init container (`init-pytorch`, CPU
  50m/100m) into every Worker, and Kubernetes counts init containers in a pod's QoS class: the Workers would be
  Burstable and get no exclusive cores. Without one it injects nothing and sets no MASTER_ADDR/RANK; the pods
  get MASTER_ADDR = <job>-worker-0 (the headless service the operator makes for each replica) and their node
  rank from the downward API (the replica-index label the operator puts on each pod). The job succeeds when
  every Worker has.
- restartPolicy ExitCode: a pod that exits >= 128 (a checkpointed stop, 143; a lost peer, 200) is deleted
  and recreated; 1-127 (a crash) fails the job at once. runPolicy.backoffLimit counts container restarts
  of running pods, and one eviction of an N-pod job cost N-1 of them under OnFailure; so hpcqa's node script
  counts job restarts on the PVC (k8s.max_restarts) and fails the job with a 1-127 code when they are spent.
- Fixed size, no elasticPolicy: the plan fixes the world size (global batch, data shards, pinning), and
  torchrun's elastic rendezvous would number ranks by arrival.
- The plan and the pod script travel in the container's variables (RUN_SCRIPT): no ConfigMap outlives the job.

The objects are built with the `kubernetes` and `kubeflow-training` packages' models (the PyTorchJob schema
they encode checks types and required fields) and serialised by their ApiClient.
"""

from __future__ import annotations

from typing import Any

from hpcqa.core import kinds
from hpcqa.core.config import Config
from hpcqa.core.kinds import Requeue
from hpcqa.core.plan import HostProbe, LaunchPlan
from hpcqa.errors import UsageError
from hpcqa.executors import common
from hpcqa.executors.interface import RenderOnly, Request
from hpcqa.executors.k8s.image import image_host
from hpcqa.executors.k8s.manifest import to_dicts, to_yaml
from hpcqa.executors.k8s.pods import (
    PodShape,
    carried,
    check,
    check_names,
    deadline_s,
    job_labels,
    job_name,
    meta,
    plan_notes,
    pod_config,
    pod_cpus,
    pod_env,
    pod_memory,
    pod_template,
    qos_class,
    security_fact,
    whole_cpus,
)
from hpcqa.record.jobdir import JobRoot

CONTAINER = "pytorch"  # the operator looks up the port on the container of this name
PORT_NAME = "pytorchjob-port"
PORT = 23456  # the operator's default port
# The pod script runs from a file made of the job's own variable: under `bash -c`, bash 5.2's `wait -n -p` does not
# find a rank that has already ended ("no such job"), and the script must see every rank's exit code.
RUN_SCRIPT = (
    'script="$(mktemp)" && printf \'%s\' "${HPCQA_NODE_SCRIPT:?the job sets HPCQA_NODE_SCRIPT}" > "$script" '
    '&& exec bash "$script"'
)
MAX_NAME = 45  # <name>-worker-<i> is a service name (63 characters at most)
REPLICA = "Worker"  # see the module's docstring: no Master, so no init container
REPLICA_INDEX_LABEL = (
    "training.kubeflow.org/replica-index"  # the operator labels each pod with its index
)
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def objects(plan: LaunchPlan) -> list[Any]:
    """[PyTorchJob] as a client model. It carries the plan (which says the operator restarts a stopped pod) and the
    pod script itself: no ConfigMap to outlive the job."""
    from kubeflow.training import models as kf
    from kubernetes import client as k

    plan = plan.with_requeue(Requeue.POD)
    cfg = plan.config
    check(cfg)
    name = job_name(plan, MAX_NAME)
    # no Master replica, so the operator sets neither MASTER_ADDR nor the rank: rank 0 is on Worker 0, behind its
    # headless service; the node rank is the operator's replica-index label
    env = tuple(
        pod_env(plan, name, (f"{name}-{REPLICA.lower()}-0", PORT), REPLICA_INDEX_LABEL)
    ) + tuple(k.V1EnvVar(**e) for e in carried(plan, name, "PyTorchJob"))
    template = pod_template(
        plan,
        PodShape(
            CONTAINER, ("bash", "-c", RUN_SCRIPT), env, PORT, PORT_NAME, (JOB_NAME_LABEL, name)
        ),
    )
    # Workers only (no Master: no injected init container), ExitCode restarts (see the module's docstring); no
    # backoffLimit: it counts container restarts, which ExitCode's recreated pods never have; the node script
    # counts job restarts instead. cleanPodPolicy Running: a failed job's still-running pods are deleted.
    replicas = {
        REPLICA: kf.KubeflowOrgV1ReplicaSpec(
            replicas=plan.nodes, restart_policy="ExitCode", template=template
        )
    }
    job = kf.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        metadata=k.V1ObjectMeta(**meta(name, cfg, job_labels(cfg))),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            nproc_per_node=str(plan.ranks_per_node),
            pytorch_replica_specs=replicas,
            run_policy=kf.KubeflowOrgV1RunPolicy(
                clean_pod_policy="Running", active_deadline_seconds=deadline_s(cfg)
            ),
        ),
    )
    return [job]


def pod_facts(plan: LaunchPlan, job: dict) -> tuple[tuple[str, str], ...]:
    """What the render tells about the pods: size, QoS as Kubernetes will class them once the operator has added
    what it adds (nothing, with Workers only), and who may run them."""
    cfg = plan.config
    spec = job["spec"]["pytorchReplicaSpecs"][REPLICA]["template"]["spec"]
    qos = qos_class(spec)
    node = (
        cfg.cluster.sockets_per_node * cfg.cluster.cores_per_socket * cfg.cluster.threads_per_core
    )
    cpus = pod_cpus(plan)
    how = (
        f"k8s.cpus = {cpus}"
        if cfg.k8s.cpus
        else f"{node} of the declared node less k8s.reserved_cores = {cfg.k8s.reserved_cores} per socket"
    )
    facts = [
        (
            "pods",
            f"{plan.nodes} Worker pod(s) x {plan.ranks_per_node} rank(s), {cpus} CPUs ({how}) / "
            f"{pod_memory(cfg)} each",
        ),
        (
            "QoS",
            f"every pod {qos}"
            + (
                " with whole CPUs: a static CPU manager gives it exclusive cores"
                if qos == "Guaranteed" and whole_cpus(spec)
                else ": no exclusive cores"
            )
            + " (Workers only: the operator adds no init container)",
        ),
        (
            "restarts",
            f"an eviction or a lost peer restarts every pod from the last checkpoint, at most "
            f"{cfg.k8s.max_restarts} time(s) (k8s.max_restarts); a crash fails the job",
        ),
        security_fact(cfg),
    ]
    return tuple(facts)


def worker_names(d: dict) -> list[str]:
    """The names the operator derives from a PyTorchJob's: its last Worker's service and pod."""
    if d["kind"] != "PyTorchJob":
        return []
    workers = d["spec"]["pytorchReplicaSpecs"][REPLICA]["replicas"]
    return [f"{d['metadata']['name']}-{REPLICA.lower()}-{workers - 1}"]


class PyTorchJobRender(RenderOnly):
    """Kubernetes: render only. The request is the PyTorchJob (YAML); `kubectl apply -f` submits
    it, and the training operator runs it -- no API server can be reached from here."""

    kind = kinds.K8sKind
    requeue = Requeue.POD
    via = "a PyTorchJob for the training operator"
    no_scheduler = "Kubernetes: no API server is asked (kubectl apply --dry-run=server would)"
    refusal = (
        "hpcqa renders the PyTorchJob; the training operator runs it",
        "apply the YAML with kubectl apply -f",
    )

    @staticmethod
    def prepare_render(cfg: Config, host: HostProbe) -> tuple[Config, HostProbe]:
        """The pod's config (the image's interpreter and paths) and what the image provides."""
        return pod_config(cfg), image_host(host, cfg)

    def dry_run(self, sp) -> Request:
        if sp.is_sweep:
            raise UsageError("a PyTorchJob runs one job", "render one variant at a time")
        sp = sp.with_requeue(self.requeue)
        plan = sp.plans[0]
        docs = to_dicts(
            objects(plan)
        )  # serialised once: checked, described and written from the same dicts
        check_names(docs, plan.config, worker_names)
        facts = pod_facts(plan, docs[0]) + common.work_facts(sp, None)
        return Request(
            self.kind.name,
            self.via,
            sp,
            JobRoot.new_submission(),
            scripts=(to_yaml(docs),),
            commands=(("kubectl", "apply", "-f", "<file>"),),
            facts=facts,
            notes=plan_notes(plan),
            placement=(f"PyTorchJob {job_name(plan, MAX_NAME)}",),
            summary=f"PyTorchJob {job_name(plan, MAX_NAME)}: {facts[0][1]}; {facts[1][1]}",
        )
