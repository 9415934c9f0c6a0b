"""The Kubeflow training operator's and Kubernetes' rules, as data and small functions transcribed from their source
(tests/data/k8s/SOURCE.md says from where and which version). The k8s tests apply them to the rendered objects:
no API server or operator can run here. Independent of hpcqa's own code on purpose: where hpcqa claims something
(a QoS class), a test compares the claim with these."""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import yaml

DATA = Path(__file__).parent / "data" / "k8s"
OPERATOR_VERSIONS = ("v1.8.1", "v1.9.0")


def crd_schema(version: str) -> dict:
    with gzip.open(DATA / f"pytorchjob-crd-{version}.schema.json.gz") as f:
        return json.load(f)


# ------------------------------------------------------------------ k8s.io/apimachinery/pkg/util/validation

DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # IsDNS1035Label, at most 63
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # IsDNS1123Label, at most 63
LABEL_VALUE = re.compile(
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
)  # IsValidLabelValue, at most 63
TOTAL_ANNOTATION_SIZE = (
    256 * 1024
)  # apimachinery's TotalAnnotationSizeLimitB: kubectl apply's last-applied copy
CONFIGMAP_DATA_MAX = (
    1024 * 1024
)  # core/v1 validation: MaxSecretSize, also applied to a ConfigMap's data


def is_dns1035(name: str) -> bool:
    return len(name) <= 63 and bool(DNS1035_LABEL.fullmatch(name))


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(LABEL_VALUE.fullmatch(value))


# ------------------------------------------------------------------ the operator (v1.9.0; v1.8.1 the same)

REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"


def webhook_errors(job: dict) -> list[str]:
    """pytorchjob_webhook.go validatePyTorchJob (the parts a fixed-size job meets)."""
    errs = []
    if not is_dns1035(job["metadata"]["name"]):
        errs.append("metadata.name: not a DNS-1035 label")
    specs = job["spec"].get("pytorchReplicaSpecs")
    if not specs:
        errs.append("spec.pytorchReplicaSpecs: must be required")
    for rtype, spec in (specs or {}).items():
        if rtype not in ("Master", "Worker"):
            errs.append(f"{rtype}: not supported")
        containers = spec["template"]["spec"].get("containers") or []
        if not containers or any(not c.get("image") for c in containers):
            errs.append(f"{rtype}: containers/image required")
        if not any(c["name"] == "pytorch" for c in containers):
            errs.append(f"{rtype}: must have a container named pytorch")
        if rtype == "Master" and spec.get("replicas") != 1:
            errs.append("Master: replicas must be 1")
        if rtype == "Worker" and spec.get("replicas", 1) < 1:
            errs.append("Worker: replicas must be at least 1")
    return errs


def _init_container(
    master_addr: str, image: str = "alpine:3.10", max_tries: int = 100
) -> list[dict]:
    text = (DATA / "init-pytorch.yaml.tmpl").read_text()
    text = text.replace("{{.InitContainerImage}}", image).replace("{{.MaxTries}}", str(max_tries))
    return yaml.safe_load(text.replace("{{.MasterAddr}}", master_addr))


def _port(job: dict, rtype: str) -> int:
    for c in job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"]:
        if c["name"] == "pytorch":
            for p in c.get("ports") or []:
                if p.get("name") == "pytorchjob-port":
                    return p["containerPort"]
    raise ValueError("port not found")


def operator_pods(job: dict) -> list[dict]:
    """The pods the operator creates from a PyTorchJob: each replica's template with the operator's labels, the
    restart policy it sets (ExitCode -> Never), the env setPodEnv appends, and the init container setInitContainer
    adds (to Workers, only when there is a Master)."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    name = job["metadata"]["name"]
    has_master = "Master" in specs
    total = sum(s.get("replicas", 1) for s in specs.values())
    nproc = job["spec"].get("nprocPerNode")
    nproc_int = int(nproc) if nproc and str(nproc).isdigit() else 1
    pods = []
    for rtype, spec in specs.items():
        rt = rtype.lower()
        for index in range(spec.get("replicas", 1)):
            template = copy.deepcopy(spec["template"])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **template.get("metadata", {}),
                    "name": f"{name}-{rt}-{index}",
                    "namespace": job["metadata"].get("namespace", "default"),
                },
                "spec": template["spec"],
            }
            labels = dict(pod["metadata"].get("labels") or {})
            labels.update(
                {
                    JOB_NAME_LABEL: name,
                    REPLICA_TYPE_LABEL: rt,
                    REPLICA_INDEX_LABEL: str(index),
                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                }
            )
            if (rtype == "Master") if has_master else (rtype == "Worker" and index == 0):
                labels[JOB_ROLE_LABEL] = "master"
            pod["metadata"]["labels"] = labels
            policy = spec.get("restartPolicy", "")
            pod["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
            for c in pod["spec"]["containers"]:
                env = c.setdefault("env", [])
                env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
                if has_master:
                    env += [
                        {"name": "MASTER_PORT", "value": str(_port(job, "Master"))},
                        {"name": "MASTER_ADDR", "value": f"{name}-master-0"},
                    ]
                    rank = index + 1 if rtype == "Worker" else index
                    env += [
                        {"name": "WORLD_SIZE", "value": str(total * nproc_int)},
                        {"name": "RANK", "value": str(rank)},
                        {"name": "PET_NODE_RANK", "value": str(rank)},
                    ]
                if nproc is not None:
                    env.append({"name": "PET_NPROC_PER_NODE", "value": str(nproc)})
                if job["spec"].get("elasticPolicy") is None:
                    env.append({"name": "PET_NNODES", "value": str(total)})
            if has_master and rtype == "Worker":
                pod["spec"]["initContainers"] = (
                    pod["spec"].get("initContainers") or []
                ) + _init_container(f"{name}-master-0")
            pods.append(pod)
    return pods


def service_link_env(services: list[dict]) -> dict[str, str]:
    """The variables the kubelet makes for the Services of a pod's namespace (kubernetes pkg/kubelet/envvars
    FromServices, makeLinkVariables): for a Service with a cluster IP, NAME (upper case, '-' -> '_')_SERVICE_HOST,
    _SERVICE_PORT (its first port), _SERVICE_PORT_<PORTNAME>, and the Docker-link ones: NAME_PORT=proto://ip:port
    of the first port, NAME_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]."""
    env: dict[str, str] = {}
    for svc in services:
        ip = svc["spec"].get("clusterIP") or ""
        if ip in ("", "None"):
            continue
        name = svc["metadata"]["name"].upper().replace("-", "_")
        ports = svc["spec"].get("ports") or []
        env[f"{name}_SERVICE_HOST"] = ip
        if ports:
            env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                env[f"{name}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
        for i, p in enumerate(ports):
            proto = p.get("protocol", "TCP").lower()
            url = f"{proto}://{ip}:{p['port']}"
            if i == 0:
                env[f"{name}_PORT"] = url
            prefix = f"{name}_PORT_{p['port']}_{proto.upper()}"
            env.update(
                {
                    prefix: url,
                    f"{prefix}_PROTO": proto,
                    f"{prefix}_PORT": str(p["port"]),
                    f"{prefix}_ADDR": ip,
                }
            )
    return env


def resolve_env(pod: dict, container: str = "pytorch", services: list[dict] = ()) -> dict[str, str]:
    """The container's environment as the kubelet gives it (kubelet_pods.go makeEnvironmentVariables): the service
    links of `services` (the namespace's; only with the pod's enableServiceLinks, default true), then the
    container's own variables, which win: values, and the downward API's fields of this pod (its namespace,
    labels, annotations). A secretKeyRef is left out: the Secret is not here."""
    (c,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
    env = service_link_env(list(services)) if pod["spec"].get("enableServiceLinks", True) else {}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        if ref is None:
            continue
        path = ref["fieldPath"]
        if path == "metadata.namespace":
            env[e["name"]] = pod["metadata"]["namespace"]
        elif m := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path):
            env[e["name"]] = pod["metadata"][m.group(1)][m.group(2)]
        else:
            raise ValueError(f"downward API field {path} not modelled")
    return env


def is_retryable_exit_code(code: int) -> bool:  # pkg/util/train/train_util.go
    return code >= 128


def failed_pod_action(restart_policy: str, exit_code: int) -> str:
    """common/pod.go ReconcilePods, for a pod in phase Failed: 'recreate' (the operator deletes it and makes a new
    one, restart counts back to 0) or 'fail-job'. A pod with restartPolicy OnFailure/Always is restarted in place
    by the kubelet instead (restartCount + 1) and only reaches Failed when it cannot be."""
    if restart_policy == "ExitCode":
        return "recreate" if is_retryable_exit_code(exit_code) else "fail-job"
    if restart_policy in ("OnFailure", "Always"):
        return "recreate"
    return "fail-job"  # Never


def past_backoff_limit(job: dict, pods: list[dict]) -> bool:
    """pkg/core/job.go PastBackoffLimit: the restart counts of the containers (init containers too) of the running
    pods of every replica type whose policy is OnFailure, Always or ExitCode, against runPolicy.backoffLimit."""
    limit = job["spec"].get("runPolicy", {}).get("backoffLimit")
    if limit is None:
        return False
    total = 0
    for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
        if spec.get("restartPolicy") not in ("OnFailure", "Always", "ExitCode"):
            continue
        for pod in pods:
            if pod["metadata"]["labels"][REPLICA_TYPE_LABEL] != rtype.lower():
                continue
            status = pod.get("status", {})
            if status.get("phase") != "Running":
                continue
            for key in ("initContainerStatuses", "containerStatuses"):
                total += sum(s.get("restartCount", 0) for s in status.get(key, []))
    return total > 0 if limit == 0 else total >= limit


# ------------------------------------------------------------------ Kubernetes (pkg/apis/core/helper/qos)


def qos_class(pod_spec: dict) -> str:
    """GetPodQOS: Guaranteed iff every container, init containers included, has cpu and memory limits and any
    request it states equal to its limit; BestEffort iff no container states any request or limit."""
    containers = (pod_spec.get("initContainers") or []) + pod_spec["containers"]
    requests_any = limits_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        requests_any |= bool(req)
        limits_any |= bool(lim)
        for name in ("cpu", "memory"):
            if name not in lim:
                guaranteed = False
            elif name in req and _quantity(req[name]) != _quantity(lim[name]):
                guaranteed = False
    if not requests_any and not limits_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _quantity(q) -> float:
    m = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    scale = {
        None: 1,
        "m": 1e-3,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
    }[m.group(2)]
    return float(m.group(1)) * scale


# ------------------------------------------------------------------ Pod Security Standards, "restricted"
# https://kubernetes.io/docs/concepts/security/pod-security-standards/ (baseline's checks + restricted's)

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(pod: dict) -> list[str]:
    spec, out = pod["spec"], []
    psc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"{key}")
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds)}")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation != false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities.drop lacks ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: capabilities.add")
        if not (sc.get("runAsNonRoot") if "runAsNonRoot" in sc else psc.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot not true")
        if sc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        if (sc.get("seccompProfile") or {}).get("type", pod_seccomp) not in (
            "RuntimeDefault",
            "Localhost",
        ):
            out.append(f"{name}: seccompProfile not RuntimeDefault/Localhost")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{name}: hostPort")
    return out


# ------------------------------------------------------------------ structural schema pruning


def pruned_fields(doc, schema: dict, path: str = "") -> list[str]:
    """Fields the API server would drop (structural schema pruning): keys not in `properties` where the schema
    neither preserves unknown fields nor gives additionalProperties."""
    out = []
    if isinstance(doc, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return out
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in doc.items():
            if props is not None and key in props:
                out += pruned_fields(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += pruned_fields(value, extra, f"{path}.{key}")
            elif props is not None:
                out.append(f"{path}.{key}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(doc):
            out += pruned_fields(item, schema["items"], f"{path}[{i}]")
    return out


# ------------------------------------------------------------------ the kubelet's fsGroup (kubernetes v1.33:
#     pkg/volume/csi/csi_mounter.go supportsFSGroup, pkg/volume/nfs (no ownership management), storage/v1 CSIDriver
#     fsGroupPolicy: ReadWriteOnceWithFSType is the default)

NFS, CSI = "nfs", "csi"


def fs_group_applied(
    source: str, access_modes: list[str], fs_group_policy: str | None, fs_type: str
) -> bool:
    """Whether the kubelet changes a volume's ownership to the pod's fsGroup. In-tree NFS: never. CSI, by its
    driver's fsGroupPolicy: File always, None never, ReadWriteOnceWithFSType (the default) only for a volume whose
    access modes are exactly ReadWriteOnce (or ReadWriteOncePod) and that has an fsType."""
    if source == NFS:
        return False
    policy = fs_group_policy or "ReadWriteOnceWithFSType"
    if policy == "File":
        return True
    if policy == "None":
        return False
    return (
        bool(fs_type)
        and len(access_modes) == 1
        and access_modes[0] in ("ReadWriteOnce", "ReadWriteOncePod")
    )


# ------------------------------------------------------------------ how kubectl reads YAML: sigs.k8s.io/yaml on
#     go-yaml v2, a YAML 1.1 reader (resolve.go: y/Y/n/N/yes/on/off... as booleans, ~ and null, decimal, 0x, 0b
#     and 0-octal integers with _, floats that need no dot: yamlStyleFloat); YAML 1.2 readers add 0o octal


def yaml11_loader():
    """A PyYAML loader with the implicit types of go-yaml v2 that PyYAML's own YAML 1.1 resolver lacks (y, n and
    their capitals as booleans, 1e3-style floats) and YAML 1.2's 0o octal: a plain scalar any of these readers
    retypes is read here as not a string."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN")
    )
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)$"),
        list("-+0123456789."),
    )
    # go-yaml v2 tries strconv.ParseInt(s, 0, 64), which takes Go's prefixes in either case (0x/0X, 0b/0B, 0o/0O)
    # and underscores after a prefix
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:int",
        re.compile(r"^[-+]?0(?:[oO][0-7_]+|[xX][0-9a-fA-F_]+|[bB][01_]+)$"),
        list("-+0"),
    )
    Loader.add_constructor(
        "tag:yaml.org,2002:bool",
        lambda loader, node: (
            loader.construct_scalar(node)
            in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")
        ),
    )
    Loader.add_constructor(
        "tag:yaml.org,2002:int", lambda loader, node: ("int", loader.construct_scalar(node))
    )
    Loader.add_constructor(
        "tag:yaml.org,2002:float", lambda loader, node: ("float", loader.construct_scalar(node))
    )
    return Loader
