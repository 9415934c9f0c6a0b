"""Kubeflow Trainer v2's, JobSet's and Kubernetes Jobs' rules, as data and small functions transcribed from their
source (tests/data/k8s/SOURCE.md says from where and which version). The TrainJob tests apply them to the rendered
objects: no API server, Trainer controller or JobSet controller can run here. Independent of hpcqa's own code on
purpose: where hpcqa claims something (the pods' rendezvous, what an exit code does), a test compares the claim
with these."""

from __future__ import annotations

import copy
import gzip
import json
import re

from tests import k8s_rules
from tests.k8s_rules import DATA, is_dns1035

TRAINER_VERSION = "v2.3.0"
JOBSET_VERSION = "v0.12.0"


def crd_schema(kind: str) -> dict:
    """The openAPIV3Schema of the TrainJob or TrainingRuntime CRD of Trainer v2.3.0."""
    with gzip.open(DATA / f"{kind.lower()}-crd-{TRAINER_VERSION}.schema.json.gz") as f:
        return json.load(f)


# ------------------------------------------------------------------ Trainer v2.3.0 (pkg/constants, pkg/webhooks,
#                                                                     pkg/runtime/framework/plugins/{torch,jobset})

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_CONTAINER = {
    "trainer": "node",
    "dataset-initializer": "dataset-initializer",
    "model-initializer": "model-initializer",
}
TORCH_RESERVED_ENV = {
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
}
CONTAINER_TRAINER_PORT = 29500
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
TRAINJOB_NAME = re.compile(
    r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
)  # the TrainJob CRD's CEL rule on metadata.name
DOMAIN_PREFIXED_PATH = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/.+"
)


def webhook_errors(runtime: dict, job: dict) -> list[str]:
    """What the Trainer's admission refuses: the TrainJob CRD's CEL rules on its name; the TrainingRuntime webhook
    (validateReplicatedJobs); the TrainJob webhook's runtime lookup (a TrainingRuntime of that name in the job's
    namespace); the torch plugin's reserved variables; the jobset plugin's runtime patch checks."""
    errs = []
    name = job["metadata"]["name"]
    if not TRAINJOB_NAME.match(name) or len(name) > 63:
        errs.append("metadata.name must match RFC 1035 DNS label format, at most 63 characters")
    rjobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    for i, rjob in enumerate(rjobs):
        ancestor = ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(
            ANCESTOR_LABEL
        )
        if ancestor in ANCESTOR_CONTAINER:
            if rjob.get("replicas", 1) != 1:
                errs.append(f"replicatedJobs[{i}].replicas: must be 1")
            names = [c["name"] for c in rjob["template"]["spec"]["template"]["spec"]["containers"]]
            if ANCESTOR_CONTAINER[ancestor] not in names:
                errs.append(
                    f"replicatedJobs[{i}]: must have container {ANCESTOR_CONTAINER[ancestor]}"
                )
    ref = job["spec"]["runtimeRef"]
    if ref.get("kind", "ClusterTrainingRuntime") == "TrainingRuntime":
        if ref["name"] != runtime["metadata"]["name"] or job["metadata"].get(
            "namespace"
        ) != runtime["metadata"].get("namespace"):
            errs.append(
                "spec.runtimeRef: the TrainingRuntime must exist in the TrainJob's namespace"
            )
    env = {e["name"] for e in (job["spec"].get("trainer") or {}).get("env") or []}
    if env & TORCH_RESERVED_ENV:
        errs.append(
            f"spec.trainer.env: must not have reserved envs {sorted(env & TORCH_RESERVED_ENV)}"
        )
    errs += _patch_errors(runtime, job)
    return errs


def _patch_errors(runtime: dict, job: dict) -> list[str]:
    errs = []
    containers = {
        r["name"]: {c["name"] for c in r["template"]["spec"]["template"]["spec"]["containers"]}
        for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }
    for patch in job["spec"].get("runtimePatches") or []:
        if not DOMAIN_PREFIXED_PATH.fullmatch(patch["manager"]):
            errs.append(
                f"runtimePatches.manager {patch['manager']!r}: must be a domain-prefixed path"
            )
        spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rpatch in spec.get("replicatedJobs") or []:
            if rpatch["name"] not in containers:
                errs.append("runtimePatches: replicated job not in the runtime")
                continue
            pod = (((rpatch.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            ) or {}
            for c in pod.get("containers") or []:
                if c["name"] not in containers[rpatch["name"]]:
                    errs.append("runtimePatches: container not in the runtime")
                elif c.get("env") and c["name"] == "node":
                    errs.append("runtimePatches: must not have envs for the node container")
    return errs


def _merge(base: dict, patch: dict) -> dict:
    """A strategic merge patch as far as a pod spec patch of affinity, nodeSelector and tolerations needs it
    (maps merge; these fields are replaced)."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = (
            _merge(out[key], value)
            if isinstance(value, dict)
            and isinstance(out.get(key), dict)
            and key not in ("affinity",)
            else copy.deepcopy(value)
        )
    return out


def jobset(runtime: dict, job: dict) -> dict:
    """The JobSet the Trainer builds (RuntimeInfo, EnforceMLPolicy of the torch plugin, SyncParallelCount, the
    jobset plugin's Build): runtime patches merged, the trainer container's image/command/args from the TrainJob,
    its env upserted (the TrainJob's, then PET_*), the trainer port upserted, parallelism = completions = numNodes."""
    name = job["metadata"]["name"]
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    for patch in job["spec"].get("runtimePatches") or []:
        for rpatch in ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get(
            "spec", {}
        ).get("replicatedJobs") or []:
            (rjob,) = [r for r in spec["replicatedJobs"] if r["name"] == rpatch["name"]]
            pod_patch = rpatch["template"]["spec"]["template"]["spec"]
            rjob["template"]["spec"]["template"]["spec"] = _merge(
                rjob["template"]["spec"]["template"]["spec"], pod_patch
            )
    trainer = job["spec"].get("trainer") or {}
    nodes = trainer.get("numNodes", runtime["spec"].get("mlPolicy", {}).get("numNodes", 1))
    nproc = trainer.get("numProcPerNode", "auto")
    for rjob in spec["replicatedJobs"]:
        if (rjob["template"].get("metadata") or {}).get("labels", {}).get(
            ANCESTOR_LABEL
        ) != "trainer":
            continue
        rjob["replicas"] = 1
        rjob["template"]["spec"]["parallelism"] = rjob["template"]["spec"]["completions"] = nodes
        for c in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            if c["name"] != "node":
                continue
            for key in ("image", "command", "args"):
                if trainer.get(key) is not None:
                    c[key] = trainer[key]
            _upsert_env(c, trainer.get("env") or [])
            _upsert_env(
                c,
                [
                    {"name": "PET_NNODES", "value": str(nodes)},
                    {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                    {
                        "name": "PET_NODE_RANK",
                        "valueFrom": {
                            "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}
                        },
                    },
                    {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
                    {"name": "PET_MASTER_PORT", "value": str(CONTAINER_TRAINER_PORT)},
                ],
            )
            ports = c.setdefault("ports", [])
            if not any(p["containerPort"] == CONTAINER_TRAINER_PORT for p in ports):
                ports.append({"containerPort": CONTAINER_TRAINER_PORT})
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": job["metadata"].get("namespace", "default")},
        "spec": spec,
    }


def _upsert_env(container: dict, env: list[dict]) -> None:
    current = container.setdefault("env", [])
    for e in env:
        for i, old in enumerate(current):
            if old["name"] == e["name"]:
                current[i] = copy.deepcopy(e)
                break
        else:
            current.append(copy.deepcopy(e))


# ------------------------------------------------------------------ JobSet v0.12.0 (webhook defaults and checks,
#                                                                     the controller's labels, restarts)

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOB_FAILURE_REASONS = {
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
}


def jobset_errors(js: dict) -> list[str]:
    """jobset_webhook.go ValidateCreate: failure policy rule names and reasons; names of the Jobs and pods it makes
    (DNS-1035, the pod's with a 5-character suffix)."""
    errs = []
    spec = js["spec"]
    for rule in (spec.get("failurePolicy") or {}).get("rules") or []:
        if not (1 <= len(rule["name"]) <= 128) or not RULE_NAME.match(rule["name"]):
            errs.append(f"failure policy rule name {rule['name']!r}")
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in JOB_FAILURE_REASONS:
                errs.append(f"job failure reason {reason!r} not recognized")
    for rjob in spec["replicatedJobs"]:
        job_name = f"{js['metadata']['name']}-{rjob['name']}-{rjob.get('replicas', 1) - 1}"
        if not is_dns1035(job_name):
            errs.append(f"job name {job_name!r}")
        completions = rjob["template"]["spec"].get("completions")
        if rjob["template"]["spec"].get("completionMode", "Indexed") == "Indexed" and completions:
            if not is_dns1035(f"{job_name}-{completions - 1}-abcde"):
                errs.append(f"pod name of {job_name!r} too long")
    return errs


def pods(
    js: dict, uid: str = "0b5e6e1c-6f43-4c3a-9a39-2f1c1b6d0d11", restarts: int = 0
) -> list[dict]:
    """The pods of a JobSet: its Jobs (labelAndAnnotateObject's labels; subdomain = the JobSet's name, its webhook's
    default with DNS hostnames on), and each Job's indexed pods (the Job controller's completion-index annotation
    and hostname <job>-<index>)."""
    out = []
    name = js["metadata"]["name"]
    for rjob in js["spec"]["replicatedJobs"]:
        for job_index in range(rjob.get("replicas", 1)):
            job_name = f"{name}-{rjob['name']}-{job_index}"
            for index in range(rjob["template"]["spec"].get("completions", 1)):
                template = copy.deepcopy(rjob["template"]["spec"]["template"])
                meta = template.get("metadata") or {}
                labels = {
                    **(meta.get("labels") or {}),
                    JOBSET_NAME_LABEL: name,
                    JOBSET_UID_LABEL: uid,
                    RESTART_LABEL: str(restarts),
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                    "jobset.sigs.k8s.io/job-index": str(job_index),
                    "batch.kubernetes.io/job-name": job_name,
                    COMPLETION_INDEX: str(index),
                }
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{job_name}-{index}-abcde",
                        "namespace": js["metadata"]["namespace"],
                        "labels": labels,
                        "annotations": {COMPLETION_INDEX: str(index)},
                    },
                    "spec": {
                        **template["spec"],
                        "hostname": f"{job_name}-{index}",
                        "subdomain": name,
                    },
                }
                out.append(pod)
    return out


def resolve_env(pod: dict, container: str = "node", services: list[dict] = ()) -> dict[str, str]:
    """The trainer container's environment as the kubelet gives it (k8s_rules.resolve_env)."""
    return k8s_rules.resolve_env(pod, container, services)


# ------------------------------------------------------------------ Kubernetes Jobs (pkg/apis/batch/validation,
#                                                                     pkg/controller/job: pod failure policy)


def job_errors(job_spec: dict) -> list[str]:
    """validatePodFailurePolicy: restartPolicy Never; onExitCodes values unique, ascending, at most 255, no 0 for
    In; the container named must be in the pod."""
    errs = []
    pod = job_spec["template"]["spec"]
    rules = (job_spec.get("podFailurePolicy") or {}).get("rules") or []
    if rules and pod.get("restartPolicy") != "Never":
        errs.append("podFailurePolicy needs template.spec.restartPolicy Never")
    names = {c["name"] for c in pod["containers"]}
    for rule in rules:
        codes = rule.get("onExitCodes")
        if not codes:
            continue
        values = codes["values"]
        if values != sorted(set(values)) or len(values) > 255 or not values:
            errs.append("onExitCodes.values: unique, ascending, 1 to 255 of them")
        if codes["operator"] == "In" and 0 in values:
            errs.append("onExitCodes.values: 0 with In")
        if codes.get("containerName") and codes["containerName"] not in names:
            errs.append("onExitCodes.containerName: no such container")
    return errs


def job_failure(job_spec: dict, exit_codes: list[int | None]) -> str | None:
    """The reason a Job fails with when its pods ended with these exit codes (None: a pod failed without one, as
    when its node is lost), or None if it does not fail. The first podFailurePolicy rule that matches a pod acts;
    FailJob fails the Job (reason PodFailurePolicy), Ignore skips the pod, Count counts it; a pod no rule matches
    is counted. More counted failures than backoffLimit: BackoffLimitExceeded."""
    counted = 0
    for code in exit_codes:
        if code == 0:  # succeeded
            continue
        action = "Count"
        for rule in (job_spec.get("podFailurePolicy") or {}).get("rules") or []:
            codes = rule.get("onExitCodes")
            if codes and code is not None:
                hit = (code in codes["values"]) == (codes["operator"] == "In")
                if hit:
                    action = rule["action"]
                    break
        if action == "FailJob":
            return "PodFailurePolicy"
        if action == "Count":
            counted += 1
    return "BackoffLimitExceeded" if counted > job_spec.get("backoffLimit", 6) else None


def jobset_action(js_spec: dict, reason: str, restarts: int) -> str:
    """JobSet's failure policy for a child Job that failed with `reason`: the first rule whose reasons match (an
    empty list matches all) acts; none: RestartJobSet. RestartJobSet fails the JobSet once restarts reached
    maxRestarts. Returns "restart" or "fail"."""
    policy = js_spec.get("failurePolicy") or {}
    action = "RestartJobSet"
    for rule in policy.get("rules") or []:
        if not rule.get("onJobFailureReasons") or reason in rule["onJobFailureReasons"]:
            action = rule["action"]
            break
    if action == "FailJobSet":
        return "fail"
    if action == "RestartJobSetAndIgnoreMaxRestarts":
        return "restart"
    return "restart" if restarts < policy.get("maxRestarts", 0) else "fail"


# ------------------------------------------------------------------ Kueue v0.19 (pkg/controller/jobs/trainjob: the
#     webhook's Default adds an empty runtime patch owned by "kueue.x-k8s.io/manager"; RunWithPodSetsInfo fills it on
#     admission with the podset info of pkg/podset FromAssignment: the ResourceFlavor's nodeLabels and tolerations)

KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"


def kueue_admit(job: dict, flavor_node_labels: dict, flavor_tolerations: list[dict]) -> dict:
    """The TrainJob as Kueue leaves it on admission: its runtime patch (appended after the job's own patches at
    creation) carries, for each replicated job, the flavour's node labels as nodeSelector and its tolerations;
    an empty list is left out (omitempty), so a flavour without tolerations changes none. The Trainer then merges
    the patches in order (jobset() above: a strategic merge, where tolerations are replaced whole)."""
    out = copy.deepcopy(job)
    pod_spec: dict = {}
    if flavor_node_labels:
        pod_spec["nodeSelector"] = dict(flavor_node_labels)
    if flavor_tolerations:
        pod_spec["tolerations"] = copy.deepcopy(flavor_tolerations)
    out["spec"].setdefault("runtimePatches", []).append(
        {
            "manager": KUEUE_PATCH_MANAGER,
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}
                        ]
                    }
                }
            },
        }
    )
    return out
