"""The [k8s] section: how `hpcqa render --kind trainjob|pytorchjob|stage-job` shapes the Kubernetes objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from hpcqa.core.frozen import FrozenDict
from hpcqa.core.options import opt

DNS_LABEL = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?)?"
K8S_QUANTITY = r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?"


@dataclass(frozen=True)
class K8sConfig:
    namespace: str = opt(
        "",
        "Namespace written into the objects. Empty: none is written, and `kubectl apply -n NS` "
        "(or the context's namespace) decides.",
        pattern=DNS_LABEL,
    )
    image: str = opt(
        "",
        "Container image with hpcqa installed (build it from `hpcqa render CONFIG --kind "
        "dockerfile`), pinned: a tag other than latest, or a digest (@sha256:...). Needed by the "
        "Kubernetes kinds.",
        pattern=r"[A-Za-z0-9._/:@-]*",
    )
    pvc: str = opt(
        "hpcqa-data",
        "PersistentVolumeClaim (ReadWriteMany) with the caches and the job folders, "
        "mounted in every pod.",
        pattern=DNS_LABEL,
    )
    mount_path: str = opt(
        "/mnt/hpcqa", "Where the PVC is mounted in the pods.", pattern=r"/[A-Za-z0-9._/-]*"
    )
    output_path: str = opt(
        "output",
        "job.output_dir in the pods, relative to mount_path.",
        pattern=r"[A-Za-z0-9._-][A-Za-z0-9._/-]*",
    )
    model_cache_path: str = opt(
        "hub",
        "model.cache_dir (HF_HUB_CACHE) in the pods, relative to mount_path.",
        pattern=r"[A-Za-z0-9._-][A-Za-z0-9._/-]*",
    )
    data_cache_path: str = opt(
        "datasets",
        "data.cache_dir (HF_DATASETS_CACHE; hpcqa's feature cache under it) in "
        "the pods, relative to mount_path.",
        pattern=r"[A-Za-z0-9._-][A-Za-z0-9._/-]*",
    )
    cpus: int = opt(
        0,
        "CPUs requested (= limit) per pod, whole CPUs. 0: the declared node's CPUs less "
        "k8s.reserved_cores per socket (2 x 56 x 2 with 1 reserved: 220). A pod asking for a "
        "node's every CPU never schedules: set the node's allocatable (kubectl describe node) when "
        "it is known. One pod per node; its ranks split whatever cpuset the pod gets.",
        min=0,
        max=65536,
    )
    reserved_cores: int = opt(
        1,
        "With k8s.cpus = 0: physical cores per socket left to the kubelet's reservation "
        "(the static CPU manager requires one) and to DaemonSets.",
        min=0,
        max=1024,
    )
    memory: str = opt(
        "",
        'Memory request (= limit) per pod, e.g. "192Gi". Empty: cluster.mem_gb.',
        pattern=r"(" + K8S_QUANTITY + r")?",
    )
    shm_size: str = opt(
        "8Gi",
        "Size of the in-memory /dev/shm volume (DataLoader workers, oneCCL).",
        pattern=K8S_QUANTITY,
    )
    max_restarts: int = opt(
        3,
        "Job restarts before the job fails: an eviction, a preemption or a lost peer restarts "
        "every pod, which resumes from the last checkpoint on the PVC; that is one restart. "
        "TrainJob: JobSet's failurePolicy.maxRestarts, counted per job by JobSet. PyTorchJob: "
        "counted by the pods on the PVC (the operator's backoffLimit counts container restarts), "
        "from zero again once a run has ended. A crash (exit 1-127) fails the job at once.",
        min=0,
        max=1000,
    )
    offline: bool = opt(
        True,
        "Pods run with HF_HUB_OFFLINE/HF_DATASETS_OFFLINE=1: everything comes from the "
        "staged caches (`hpcqa stage`).",
    )
    service_account: str = opt(
        "", "Service account of the pods (empty: the namespace's default).", pattern=DNS_LABEL
    )
    secret_env: Mapping[str, str] = opt(
        FrozenDict,
        "Variables the pods take from Kubernetes Secrets, NAME = "
        '"secret-name/key" (secretKeyRef), e.g. HF_TOKEN = '
        '"hf/token": the value stays in the Secret.',
        factory=True,
    )
    run_as_user: int = opt(
        1000,
        "UID the pods run as: the rendered Dockerfile's USER (1000). The pods then run with "
        "runAsNonRoot and the restricted Pod Security profile's settings. 0: the image runs "
        "as root (no runAsNonRoot; not admitted in a restricted namespace).",
        min=0,
        max=2147483647,
    )
    supplemental_groups: tuple[int, ...] = opt(
        tuple,
        "Group IDs the pods also run with (securityContext."
        "supplementalGroups), e.g. [2000]: a ReadWriteMany volume gets no "
        "fsGroup from the kubelet, so the pods write to it as their UID or as "
        "one of these groups (a volume root owned root:2000, mode 2775).",
        factory=True,
    )
    prepare_volume: bool = opt(
        False,
        "The staging Job first makes the folders the pods write on the volume and gives "
        "them to k8s.run_as_user, in an init container that runs as root with only "
        "CAP_CHOWN: for a fresh ReadWriteMany volume (root-owned, no fsGroup). Not "
        "admitted in a restricted Pod Security namespace (baseline is enough).",
    )
    node_selector: Mapping[str, str] = opt(
        FrozenDict,
        'Node labels the pods require, e.g. {"node.kubernetes.io/instance-type" = "spr"}.',
        factory=True,
    )
    queue: str = opt(
        "",
        "Kueue LocalQueue: the job gets the kueue.x-k8s.io/queue-name label, and Kueue admits all of "
        "its pods at once or none (a partly scheduled job would spend its restarts on rendezvous "
        "timeouts). Empty: no Kueue.",
        pattern=DNS_LABEL,
    )
    priority_class: str = opt(
        "",
        "PriorityClass of the pods (priorityClassName; Kueue reads it as the workload's "
        "priority unless k8s.workload_priority_class is set). Empty: the cluster's "
        "default.",
        pattern=DNS_LABEL,
    )
    workload_priority_class: str = opt(
        "",
        "Kueue WorkloadPriorityClass: the job (and the staging Job) get the "
        "kueue.x-k8s.io/priority-class label, Kueue's priority for admission and "
        "preemption in the queue, apart from the pods' priorityClassName. Empty: "
        "none.",
        pattern=DNS_LABEL,
    )
    tolerations: tuple[str, ...] = opt(
        tuple,
        "Taints the pods tolerate, as kubectl taint writes them: "
        '"key=value:Effect" (operator Equal) or "key:Effect" (Exists), Effect one '
        'of NoSchedule, PreferNoSchedule, NoExecute; e.g. ["dedicated=training:'
        'NoSchedule"].',
        factory=True,
    )
    runtime: str = opt(
        "hpcqa-torch",
        "Name prefix of the TrainingRuntime that `render --kind trainingruntime` "
        "writes for the TrainJob: <runtime>-<digest of its spec>, so jobs of one shape "
        "share it and a changed shape never rewrites the runtime of a queued job.",
        pattern=DNS_LABEL,
    )
