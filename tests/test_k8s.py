"""`hpcqa render --kind pytorchjob|dockerfile`: the PyTorchJob is built with the Kubernetes/Kubeflow client
models, survives their deserialiser, and its pod script trains when run the way the operator runs it."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hpcqa.core import config
from hpcqa.core.plan import LaunchPlan
from hpcqa.executors.k8s import manifest as k8s_manifest
from hpcqa.executors.k8s import pods as k8s_pods
from hpcqa.executors.k8s import pytorchjob
from tests import k8s_rules
from tests.conftest import ROOT, free_port, run_cli_rendering_in_process

IMAGE = ["--set", "k8s.image=registry.example.com/hpcqa:1"]


@pytest.fixture
def cli():
    """Renders in this process (a fresh interpreter per render imported the kubernetes client each time: ~0.9 s of
    CPU, a hundred renders here); every other verb as a process (tests/conftest.py: run_cli)."""
    return run_cli_rendering_in_process


def render(cli, *args, config="configs/squad_spr.toml"):
    r = cli("render", config, "--kind", "pytorchjob", *args)
    assert r.returncode == 0, r.stderr
    (job,) = yaml.safe_load_all(
        r.stdout
    )  # the job alone: it carries its plan and pod script, no ConfigMap
    assert job["kind"] == "PyTorchJob"
    return job


def carried(job: dict) -> dict[str, str]:
    """The plan and the pod script the job carries in its container's variables."""
    (c,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    return {"plan.json": env["HPCQA_PLAN_JSON"], "node.sh": env["HPCQA_NODE_SCRIPT"]}


def test_pytorchjob_for_squad_spr(cli):
    job = render(cli)
    cm = {"data": carried(job)}
    assert job["apiVersion"] == "kubeflow.org/v1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (
        list(replicas) == ["Worker"] and replicas["Worker"]["replicas"] == 4
    )  # 4 nodes, one pod each, no Master
    assert job["spec"]["nprocPerNode"] == "2" and job["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "activeDeadlineSeconds": 3600,
    }
    assert "elasticPolicy" not in job["spec"]
    spec = replicas["Worker"]
    assert spec["restartPolicy"] == "ExitCode"
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert c["name"] == "pytorch" and c["image"] == "registry.example.com/hpcqa:0.1"
    assert c["ports"] == [{"containerPort": 23456, "name": "pytorchjob-port", "protocol": "TCP"}]
    # Guaranteed QoS: requests = limits, whole cores: 2 sockets x (56 - 1 reserved) cores x 2 threads
    assert (
        c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "220", "memory": "480Gi"}
    )
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert (
        env["HF_HUB_CACHE"] == "/mnt/hpcqa/hub"
        and env["HF_DATASETS_CACHE"] == "/mnt/hpcqa/datasets"
    )
    assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == "1"
    assert (
        env["MASTER_ADDR"] == f"{job['metadata']['name']}-worker-0"
        and env["MASTER_PORT"] == "23456"
    )
    assert env["HPCQA_NODE_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}
    }
    assert "RANK" not in env
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"data": "/mnt/hpcqa", "dshm": "/dev/shm"}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == "hpcqa-data"
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
    assert c["command"] == ["bash", "-c", pytorchjob.RUN_SCRIPT]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert (
        pod["securityContext"]["runAsNonRoot"] is True
        and pod["securityContext"]["runAsUser"] == 1000
    )
    plan = LaunchPlan.loads(cm["data"]["plan.json"])
    assert plan.world_size == 8 and plan.ranks_per_node == 2 and plan.executor == "k8s"
    assert (
        plan.config.job.output_dir == "/mnt/hpcqa/output"
        and plan.config.model.cache_dir == "/mnt/hpcqa/hub"
    )
    # each rank goes through the rank wrapper, which maps RANK/LOCAL_RANK and pins to the socket's cores
    assert "-m hpcqa.rank --plan" in cm["data"]["node.sh"]
    assert job["metadata"]["name"] == k8s_pods.job_name(plan, pytorchjob.MAX_NAME)


def test_render_says_what_the_pods_get(cli):
    r = cli("render", "configs/squad_spr.toml", "--kind", "pytorchjob")
    assert r.returncode == 0, r.stderr
    assert (
        "4 Worker pod(s) x 2 rank(s), 220 CPUs (224 of the declared node less k8s.reserved_cores = 1 per "
        "socket)" in r.stderr
    )
    assert "every pod Guaranteed with whole CPUs" in r.stderr and "UID 1000" in r.stderr
    r = cli(
        "render",
        "configs/squad_spr.toml",
        "--kind",
        "pytorchjob",
        "--set",
        "k8s.cpus=224",
        "--set",
        "k8s.run_as_user=0",
    )
    assert (
        "all 224 CPUs of the declared node" in r.stderr
        and "not admitted in a restricted" in r.stderr
    )
    r = cli("render", "configs/squad_spr.toml", "--kind", "pytorchjob", "--set", "k8s.cpus=221")
    assert "not a whole number of cores" in r.stderr


def test_round_trips_through_the_client_deserialisers(cli):
    job = render(cli)
    for doc, kind in ((job, "PyTorchJob"),):
        model = k8s_manifest.load(doc, kind)
        assert k8s_manifest.to_dicts([model])[0] == doc
    from kubeflow.training.models import KubeflowOrgV1PyTorchJob

    assert isinstance(k8s_manifest.load(job, "PyTorchJob"), KubeflowOrgV1PyTorchJob)


def test_the_schema_refuses_what_the_operator_would(cli):
    """The models check the PyTorchJob schema: a replica spec without its required fields is refused."""
    from kubeflow.training import models as kf

    with pytest.raises(ValueError):
        kf.KubeflowOrgV1PyTorchJobSpec(pytorch_replica_specs=None)


# ----------------------------------------------------------------------------- against the operator's and Kubernetes' rules


@pytest.mark.parametrize("version", k8s_rules.OPERATOR_VERSIONS)
def test_valid_for_the_operators_crd_schema_nothing_pruned(cli, version):
    """The PyTorchJob against the CRD's openAPIV3Schema of the operator release (tests/data/k8s/SOURCE.md), and no
    field the API server's structural pruning would silently drop; then the operator's admission webhook."""
    import jsonschema

    job = render(cli)
    schema = k8s_rules.crd_schema(version)
    jsonschema.validate(job, schema)
    assert k8s_rules.pruned_fields(job, schema) == []
    assert k8s_rules.webhook_errors(job) == []
    # the checks can fail: a misspelt field is pruned, a wrong type refused
    bad = json.loads(json.dumps(job))
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicys"] = "Never"
    assert k8s_rules.pruned_fields(bad, schema) == [
        ".spec.pytorchReplicaSpecs.Worker.restartPolicys"
    ]
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "4"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


@pytest.mark.parametrize("kube", ["1.27", "1.30", "1.33"])
def test_pods_valid_for_kubernetes(cli, kube):
    """The pods the operator makes of the job (its labels, env and restart policy applied), against Kubernetes' own
    schemas (kubernetes-validate, strict: unknown fields refused)."""
    import kubernetes_validate

    job = render(cli, "--set", "k8s.secret_env.HF_TOKEN=hf/token")
    pods = k8s_rules.operator_pods(job)
    assert len(pods) == 4
    for pod in pods:
        kubernetes_validate.validate(pod, kube, strict=True)
    bad = json.loads(json.dumps(pods[0]))
    bad["spec"]["containers"][0]["resource"] = bad["spec"]["containers"][0].pop(
        "resources"
    )  # a typo is refused
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kube, strict=True)


def test_every_pod_is_guaranteed_after_the_operators_mutation(cli):
    """Kubernetes counts init containers in a pod's QoS. With a Master the operator gives every Worker its init
    container (CPU 50m/100m): Burstable, no exclusive cores. hpcqa renders Workers only: nothing is injected, and
    every pod is Guaranteed with whole CPUs -- what the render says."""
    job = render(cli)
    pods = k8s_rules.operator_pods(job)
    assert all("initContainers" not in p["spec"] for p in pods)
    assert {k8s_rules.qos_class(p["spec"]) for p in pods} == {"Guaranteed"}
    assert all(
        k8s_pods.qos_class(p["spec"]) == "Guaranteed" for p in pods
    )  # hpcqa's claim agrees with the rule
    # the rule bites: the same pods under a Master, as hpcqa rendered them before
    with_master = json.loads(json.dumps(job))
    specs = with_master["spec"]["pytorchReplicaSpecs"]
    specs["Master"] = {**specs["Worker"], "replicas": 1}
    specs["Worker"]["replicas"] = 3
    by_type = {}
    for p in k8s_rules.operator_pods(with_master):
        by_type.setdefault(p["metadata"]["labels"][k8s_rules.REPLICA_TYPE_LABEL], set()).add(
            k8s_rules.qos_class(p["spec"])
        )
        assert k8s_pods.qos_class(p["spec"]) == k8s_rules.qos_class(p["spec"])
    assert by_type == {"master": {"Guaranteed"}, "worker": {"Burstable"}}


def test_node_rank_and_rendezvous_from_what_the_operator_gives(cli):
    """Workers only: the operator sets no RANK/MASTER_ADDR. Each pod's node rank comes from its replica-index label
    (downward API) and the rendezvous is Worker 0's service, which the operator names <job>-worker-0."""
    job = render(cli)
    envs = [k8s_rules.resolve_env(p) for p in k8s_rules.operator_pods(job)]
    assert [e["HPCQA_NODE_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["MASTER_ADDR"] for e in envs} == {f"{job['metadata']['name']}-worker-0"}
    assert all(
        e["PET_NNODES"] == "4" and e["PET_NPROC_PER_NODE"] == "2" and "RANK" not in e for e in envs
    )


def test_restricted_pod_security(cli):
    job = render(cli)
    for pod in k8s_rules.operator_pods(job):
        assert k8s_rules.restricted_violations(pod) == []
    root = render(cli, "--set", "k8s.run_as_user=0")
    assert any(
        "runAsNonRoot" in v
        for v in k8s_rules.restricted_violations(k8s_rules.operator_pods(root)[0])
    )


def _evict_one(job: dict, policy_of_old: bool = False) -> tuple[bool, list[str]]:
    """One pod of the job is evicted. Its ranks checkpoint and exit 143, and SIGTERM anywhere stops every rank, so
    every other pod's container exits 143 too. What does the operator do?"""
    pods = k8s_rules.operator_pods(job)
    spec = next(iter(job["spec"]["pytorchReplicaSpecs"].values()))
    actions = []
    for i, pod in enumerate(pods):
        if i == 1:
            actions.append("recreate")  # the evicted pod is gone: the operator makes a new one
            continue
        if spec["restartPolicy"] in (
            "OnFailure",
            "Always",
        ):  # the kubelet restarts the container in place
            pod["status"] = {
                "phase": "Running",
                "containerStatuses": [{"name": "pytorch", "restartCount": 1}],
            }
            actions.append("restart-in-place")
        else:  # restartPolicy Never: the pod ends Failed and the operator reads the exit code
            pod["status"] = {
                "phase": "Failed",
                "containerStatuses": [{"name": "pytorch", "restartCount": 0}],
            }
            actions.append(k8s_rules.failed_pod_action(spec["restartPolicy"], 143))
    return k8s_rules.past_backoff_limit(job, pods), actions


def test_restart_arithmetic_one_eviction_is_one_job_restart(cli):
    job = render(cli)
    failed, actions = _evict_one(job)
    assert not failed and actions == ["recreate"] * 4
    # a crash fails the job at once; a lost peer (200) and a checkpointed stop (143) are retried
    assert k8s_rules.failed_pod_action("ExitCode", 1) == "fail-job"
    assert k8s_rules.failed_pod_action("ExitCode", 200) == "recreate"
    assert k8s_rules.failed_pod_action("ExitCode", 143) == "recreate"
    assert (
        k8s_rules.failed_pod_action("ExitCode", 3) == "fail-job"
    )  # the node script: k8s.max_restarts spent
    # what the old rendering (OnFailure, backoffLimit = k8s.max_restarts = 3) did: 3 restarts in one eviction
    old = json.loads(json.dumps(job))
    old["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    old["spec"]["runPolicy"]["backoffLimit"] = 3
    failed, actions = _evict_one(old)
    assert failed and actions.count("restart-in-place") == 3


@pytest.mark.parametrize(
    "name", ["9lives", "x_", "-lead", "Squad.SPR_v2", "A" * 64, "z" + "_" * 62 + "q"]
)
def test_names_are_valid_kubernetes_names(cli, name):
    job = render(cli, "--set", f"job.name={name}")
    assert k8s_rules.is_dns1035(job["metadata"]["name"])
    assert k8s_rules.webhook_errors(job) == []
    workers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    for pod in k8s_rules.operator_pods(job):  # pod and service names: <job>-worker-<i>
        assert k8s_rules.is_dns1035(pod["metadata"]["name"]), pod["metadata"]["name"]
        assert all(k8s_rules.is_label_value(v) for v in pod["metadata"]["labels"].values())
    assert pod["metadata"]["name"].endswith(f"-worker-{workers - 1}")
    for d in (job,):
        assert all(k8s_rules.is_label_value(v) for v in d["metadata"]["labels"].values()), d[
            "metadata"
        ]["labels"]
        assert k8s_rules.DNS1123_LABEL.fullmatch(d["metadata"]["name"].replace(".", "-"))


def test_a_name_with_nothing_usable_is_refused(cli):
    r = cli("render", "configs/squad_spr.toml", "--kind", "pytorchjob", "--set", "job.name=___")
    assert r.returncode == 2 and "job.name" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_size_does_not_grow_with_nodes(cli):
    """At 512 nodes the job, with the plan it carries, is the size it is at 2 (the plan leaves out the per-rank list
    that follows from one node's), far below kubectl apply's 256 KiB last-applied annotation and the object limit."""
    sizes = {}
    for nodes in (2, 512):
        job = render(cli, "--set", f"cluster.nodes={nodes}")
        sizes[nodes] = len(json.dumps(job))
        assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == nodes
        assert LaunchPlan.loads(carried(job)["plan.json"]).world_size == 2 * nodes
    assert abs(sizes[512] - sizes[2]) < 64, sizes
    assert sizes[512] < k8s_rules.TOTAL_ANNOTATION_SIZE // 4


def test_ranks_split_an_uneven_cpuset_evenly():
    """The kubelet's reservation takes its cores from one socket: a 220-CPU pod on a 2 x 56 x 2 node has 54 cores on
    socket 0 and 56 on socket 1. The ranks pin inside what the pod got, equal shares (they step together)."""
    from hpcqa.core import topology

    node = topology.declared_node(2, 56, 2)
    reserved = {0, 1, 112, 113}  # two cores of socket 0 and their hyper-threads
    allowed = [c for c in node.cpus if c.cpu not in reserved]
    lay = topology.layout(allowed, 2, 56, 0)
    assert [len(p.physical) for p in lay.pools] == [54, 54]
    assert not (set(lay.pools[0].physical) | set(lay.pools[1].physical)) & reserved
    assert {p.sockets for p in lay.pools} == {(0,), (1,)}
    assert any("left idle" in n for n in lay.notes)


HOSTILE = "$(touch PWNED) `touch PWNED2` 'quote\" \\ ; && --- kind: Secret"  # a line break is refused at validate


def test_hostile_strings_stay_data(cli, tmp_path):
    job = render(
        cli,
        "--set",
        f"launch.env.NOTE={json.dumps(HOSTILE)}",
        "--set",
        f"cluster.python={json.dumps('/opt/my env/py' + chr(39) + 'thon $(touch PWNED)')}",
    )
    plan = LaunchPlan.loads(carried(job)["plan.json"])
    assert all(r.env["NOTE"] == HOSTILE for r in plan.ranks)
    script = carried(job)["node.sh"]
    assert "'/opt/my env/py'\"'\"'thon $(touch PWNED)' -m hpcqa.rank" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize(
    "override, key",
    [
        ([], "k8s.image"),
        (IMAGE + ["--set", "k8s.namespace=Bad_NS"], "k8s.namespace"),
        (IMAGE + ["--set", "k8s.memory=lots"], "k8s.memory"),
        (IMAGE + ["--set", "k8s.output_path=../elsewhere"], "k8s.output_path"),
        (IMAGE + ["--set", "k8s.node_selector.zone=a b"], "k8s.node_selector.zone"),
    ],
)
def test_bad_k8s_keys_are_named(cli, tmp_path, override, key):
    r = cli(
        "render",
        "configs/quickstart.toml",
        "--kind",
        "pytorchjob",
        "--set",
        "k8s.memory=4Gi",
        *override,
    )
    assert r.returncode == 2 and key in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_memory_is_required_for_guaranteed_pods(cli):
    r = cli("render", "configs/quickstart.toml", "--kind", "pytorchjob", *IMAGE)
    assert r.returncode == 2 and "k8s.memory" in r.stderr and "Guaranteed" in r.stderr


def test_dockerfile(cli):
    r = cli("render", "configs/squad_spr.toml", "--kind", "dockerfile")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "torch==2.13.0" in text and "download.pytorch.org/whl/cpu" in text
    assert "libgoogle-perftools4" in text and "intel-openmp" in text  # malloc tcmalloc, openmp iomp
    assert "hpcqa[k8s]" in text
    # a released base, never a moving tag like python:3.11-slim or :latest
    (base,) = re.findall(r"^FROM (\S+)$", text, re.M)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+", base), base
    # every pip install of hpcqa's packages goes through the constraints (torch is pinned itself)
    for line in re.findall(r"^RUN pip install .*$", text, re.M):
        assert (
            "-c /opt/hpcqa/constraints.txt" in line
            or "torch==2.13.0" in line
            or "--no-deps" in line
        ), line
    # a numeric non-root USER, the UID the pods' runAsUser defaults to
    (user,) = re.findall(r"^USER (\S+)$", text, re.M)
    assert user == "1000:1000" and config.K8sConfig().run_as_user == 1000
    assert text.index("USER") > text.rindex("RUN pip install")
    # a job that reports to MLflow: the image carries the [mlflow] extra (its pins in constraints.txt)
    r = cli(
        "render",
        "configs/squad_spr.toml",
        "--kind",
        "dockerfile",
        "--set",
        'train.report_to=["mlflow"]',
    )
    assert r.returncode == 0 and "hpcqa[k8s,mlflow]" in r.stdout, r.stderr


def test_constraints_pin_every_run_time_package_as_installed():
    """constraints.txt is what scripts/lock.py writes from this environment: every distribution hpcqa[k8s] needs,
    pinned ==, at the installed version (install.sh installs with it, so CI runs what the image gets)."""
    r = subprocess.run(
        [sys.executable, "scripts/lock.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert {
        "torch",
        "transformers",
        "datasets",
        "submitit",
        "kubernetes",
        "kubeflow-training",
    } <= set(pins)
    assert pins["torch"] == "2.13.0"
    assert "-c constraints.txt" in (ROOT / "scripts" / "install.sh").read_text()


def test_dockerignore_keeps_history_jobs_and_venvs_out():
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", "logs", ".venv"} <= ignored
    assert (
        not {"constraints.txt", "hpcqa", "sbatch_templates", "pyproject.toml", "README.md"}
        & ignored
    )


# ----------------------------------------------------------------------------- the pods, run as the operator runs them

TINY = [
    "--set",
    "model.name_or_path=builtin:tiny-bert",
    "--set",
    "data.dataset=builtin:synthetic-squad",
    "--set",
    "data.synthetic_train_examples=160",
    "--set",
    "data.synthetic_eval_examples=40",
    "--set",
    "train.max_steps=24",
    "--set",
    "train.save_steps=3",
    "--set",
    "train.logging_steps=2",
    "--set",
    "train.bf16=false",
    "--set",
    "train.max_seq_length=128",
    "--set",
    "train.doc_stride=32",
    "--set",
    "train.per_device_train_batch_size=4",
    "--set",
    "cluster.nodes=2",
    "--set",
    "cluster.sockets_per_node=1",
    "--set",
    "cluster.cores_per_socket=1",
    "--set",
    "cluster.executor=slurm",
    "--set",
    "launch.ccl_workers=0",
    "--set",
    "launch.ranks_per_socket=1",
    "--set",
    "k8s.memory=2Gi",
    "--set",
    "k8s.reserved_cores=0",
]


def start_pods(job: dict, tmp: Path, port: int, cpus=None) -> list[subprocess.Popen]:
    """Each pod as the operator makes it (tests/k8s_rules.operator_pods: its labels, the env it appends) and the
    kubelet starts it: the container's command, its env with the downward API's fields resolved, and the pod's own
    cpuset (a static CPU manager gives each Guaranteed pod exclusive cores; here taskset does). One stand-in:
    Worker 0's service name resolves to 127.0.0.1 here, so MASTER_ADDR is that."""
    pods = []
    for index, pod in enumerate(k8s_rules.operator_pods(job)):
        env = k8s_rules.resolve_env(pod)
        assert env["MASTER_ADDR"].endswith("-worker-0")
        pod_env = {
            **os.environ,
            **env,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONPATH": str(ROOT),
            "HF_HOME": str(tmp / "empty-hf-home"),
        }
        cpuset = cpus if cpus is not None else str(index % os.cpu_count())
        (c,) = pod["spec"]["containers"]
        pods.append(
            subprocess.Popen(
                ["taskset", "-c", cpuset, *c["command"]],
                env=pod_env,
                cwd=tmp,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    return pods


def sigterm_after(pod: subprocess.Popen, seconds: float, timeout: float = 60) -> str:
    """SIGTERM to a pod script `seconds` after its start (as the kubelet sends it); -> its output once it ended."""
    try:
        time.sleep(seconds)
        pod.send_signal(signal.SIGTERM)
        return pod.communicate(timeout=timeout)[0]
    finally:
        _stop([pod])


def _stop(pods: list[subprocess.Popen]) -> None:
    """End every process of the pods' sessions (ours: started with start_new_session), even after the script."""
    for p in pods:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def group_gone(pod: subprocess.Popen, within_s: float = 10) -> bool:
    """No process is left in the pod's session (the script's, the wrappers', the ranks')."""
    deadline = time.time() + within_s
    while time.time() < deadline:
        try:
            os.killpg(pod.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


ONE_POD_TWO_RANKS = ["--set", "cluster.nodes=1", "--set", "cluster.sockets_per_node=2"]


def test_pod_script_a_crashed_rank_ends_its_sibling_and_the_pod_reports_the_crash(cli, tmp_path):
    """Two ranks in one pod; rank 1 crashes (exit 1) at start while rank 0 waits for it in the rendezvous. Like
    srun --kill-on-bad-exit, the script ends rank 0 at once (it would wait out the 30-minute DDP timeout), and the
    pod exits 1, the crash's code -- not 143, "checkpointed", which the operator would retry."""
    shim = tmp_path / "python-shim"
    shim.write_text(f"""#!/bin/bash
if [ "${{RANK:-}}" = 1 ] && [ "$2" = hpcqa.rank.train ]; then
  # crash once rank 0 waits at the rendezvous (its handlers installed: a SIGTERM only asks it to stop)
  for _ in $(seq 300); do grep -qs '"rendezvous"' "$HPCQA_JOB_DIR/ranks/rank-0.phase.json" && break; sleep 0.2; done
  echo "rank 1: simulated crash" >&2; exit 1
fi
exec {sys.executable} "$@"
""")
    shim.chmod(0o755)
    mount = tmp_path / "pvc"
    job = render(
        cli,
        *IMAGE,
        *TINY,
        *ONE_POD_TWO_RANKS,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        f"cluster.python={shim}",
        config="configs/quickstart.toml",
    )
    t0 = time.time()
    (pod,) = start_pods(job, tmp_path, free_port(), cpus=f"0-{os.cpu_count() - 1}")
    try:
        out = pod.communicate(timeout=120)[0]
        gone = group_gone(pod)
    finally:
        _stop([pod])
    assert pod.returncode == 1, out
    assert time.time() - t0 < 90
    assert "rank 1 exited with 1" in out and "a rank crashed (exit 1)" in out
    # rank 0's wrapper was SIGKILLed while its child waited at the rendezvous: the child goes with it
    assert gone, "a rank outlived the pod script"


def test_pod_script_sigterm_before_the_ranks_start_is_not_lost(cli, tmp_path):
    """SIGTERM while the script is still in its set-up: noted by the trap installed first thing, and the pod exits
    143 (recreated by the operator) without starting ranks that would then miss it."""
    mount = tmp_path / "pvc"
    job = render(
        cli,
        *IMAGE,
        *TINY,
        *ONE_POD_TWO_RANKS,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        'cluster.setup=["sleep 3"]',
        config="configs/quickstart.toml",
    )
    (pod,) = start_pods(job, tmp_path, free_port())
    out = sigterm_after(pod, 1)
    assert pod.returncode == 143, out
    assert "SIGTERM before the ranks started" in out
    jd = mount / "output" / "quickstart" / f"k8s-default-{job['metadata']['name']}"
    assert not list(jd.glob("rank-*.log"))


def test_pod_script_fails_the_job_when_its_restarts_are_spent(cli, tmp_path):
    """k8s.max_restarts counts job restarts: the 3rd restart of a max_restarts = 2 job exits 3, which the operator's
    ExitCode policy does not retry (the job fails; its checkpoints stay)."""
    mount = tmp_path / "pvc"
    job = render(
        cli,
        *IMAGE,
        *TINY,
        *ONE_POD_TWO_RANKS,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "k8s.max_restarts=2",
        config="configs/quickstart.toml",
    )
    jd = mount / "output" / "quickstart" / f"k8s-default-{job['metadata']['name']}"
    (jd / "attempts").mkdir(parents=True)
    for attempt in range(3):  # the first start and two restarts
        (jd / "attempts" / f"node-0.{attempt}").touch()
    (pod,) = start_pods(job, tmp_path, free_port())
    out = pod.communicate(timeout=60)[0]
    assert pod.returncode == 3, out
    assert k8s_rules.failed_pod_action("ExitCode", pod.returncode) == "fail-job"
    assert "k8s.max_restarts = 2" in out and not list(jd.glob("rank-*.log"))
    # the run has ended: its count is cleared, so the job applied again starts from zero (the fifth apply of one
    # plan used to exit 3 at once); a TrainJob's count is JobSet's, per job UID (test_trainjob)
    assert not (jd / "attempts").exists()


@pytest.mark.slow
def test_a_lost_pod_is_a_retryable_failure_for_the_others(cli, tmp_path):
    """A node is lost: everything in pod 1 dies at once (SIGKILL). Pod 0's rank fails in its next collective; it
    lost a peer, not its own error, so the pod exits 200, which the operator's ExitCode policy retries (a crash's
    1 would fail the job)."""
    mount = tmp_path / "pvc"
    job = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "train.ddp_timeout_s=60",
        config="configs/quickstart.toml",
    )
    jd = mount / "output" / "quickstart" / f"k8s-default-{job['metadata']['name']}"
    pods = start_pods(job, tmp_path, free_port())
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not _step_at_least(jd, 4):
            assert all(p.poll() is None for p in pods), [p.communicate()[0][-3000:] for p in pods]
            time.sleep(0.5)
        os.killpg(pods[1].pid, signal.SIGKILL)
        out = pods[0].communicate(timeout=240)[0]
    finally:
        _stop(pods)
    assert pods[0].returncode == 200, out
    assert k8s_rules.failed_pod_action("ExitCode", 200) == "recreate"
    assert "lost a peer" in out or "lost peer" in out


def _step_at_least(jd: Path, step: int) -> bool:
    try:
        return json.loads((jd / "progress.json").read_text()).get("step", 0) >= step
    except (OSError, ValueError):
        return False
