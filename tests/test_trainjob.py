"""`hpcqa render --kind trainjob|stage-job`: the TrainingRuntime and TrainJob against Kubeflow Trainer v2.3's CRDs
and the rules of Trainer, JobSet v0.12 and Kubernetes Jobs (tests/trainer_rules.py, transcribed from their source),
and the pods they make, run as JobSet runs them."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests import k8s_rules, trainer_rules
from tests.conftest import ROOT, free_port, run_cli_rendering_in_process
from tests.test_k8s import IMAGE, TINY, _step_at_least, _stop, group_gone, sigterm_after

KUBE_VERSIONS = ["1.27", "1.30", "1.33"]


@pytest.fixture
def cli():
    """Renders in this process (a fresh interpreter per render imported the kubernetes client each time: ~0.9 s of
    CPU, a hundred renders here); every other verb as a process (tests/conftest.py: run_cli)."""
    return run_cli_rendering_in_process


def render(cli, *args, config="configs/squad_spr.toml"):
    """[TrainingRuntime, TrainJob], each from its own render target (each its own file: applied apart)."""
    docs = []
    for target, kind in (("trainingruntime", "TrainingRuntime"), ("trainjob", "TrainJob")):
        r = cli("render", config, "--kind", target, *args)
        assert r.returncode == 0, r.stderr
        (doc,) = yaml.safe_load_all(r.stdout)
        assert doc["kind"] == kind
        docs.append(doc)
    return docs


def node_job(runtime: dict) -> dict:
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]


def test_trainjob_for_squad_spr(cli):
    rt, job = render(cli, *IMAGE)
    assert job["spec"]["runtimeRef"] == {
        "name": rt["metadata"]["name"],
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }
    assert job["spec"]["trainer"]["numNodes"] == 4 and job["spec"]["trainer"]["numProcPerNode"] == 2
    assert (
        "namespace" not in job["metadata"] and "namespace" not in rt["metadata"]
    )  # kubectl apply -n decides
    plan = json.loads(
        {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}["HPCQA_PLAN_JSON"]
    )
    assert plan["launcher"] == "trainjob" and plan["requeue"] == "pod" and plan["world_size"] == 8
    assert (
        job["spec"]["activeDeadlineSeconds"] == 60 * 60
    )  # cluster.time_limit_min of squad_spr.toml
    assert rt["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 3


@pytest.mark.parametrize("kind", ["TrainingRuntime", "TrainJob"])
def test_valid_for_trainers_crd_schema_nothing_pruned(cli, kind):
    """Against the CRDs' openAPIV3Schema of Trainer v2.3.0, with no field the API server's pruning would drop."""
    import jsonschema

    doc = {d["kind"]: d for d in render(cli, *IMAGE, "--set", "k8s.secret_env.HF_TOKEN=hf/token")}[
        kind
    ]
    schema = trainer_rules.crd_schema(kind)
    jsonschema.validate(doc, schema)
    assert k8s_rules.pruned_fields(doc, schema) == []
    bad = json.loads(json.dumps(doc))
    bad["spec"]["runtimeReff" if kind == "TrainJob" else "mlPolicyy"] = {}
    assert k8s_rules.pruned_fields(bad, schema) != []
    bad = json.loads(json.dumps(doc))
    if kind == "TrainJob":
        bad["spec"]["trainer"]["numNodes"] = "4"
    else:
        bad["spec"]["template"]["spec"]["failurePolicy"]["restartStrategy"] = "Sometimes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_admitted_by_the_trainer_jobset_and_job_rules(cli):
    rt, job = render(cli, *IMAGE, "--set", "k8s.namespace=team-a")
    js = trainer_rules.jobset(rt, job)
    assert trainer_rules.webhook_errors(rt, job) == []
    assert trainer_rules.jobset_errors(js) == []
    assert trainer_rules.job_errors(js["spec"]["replicatedJobs"][0]["template"]["spec"]) == []
    # the rules can fail: a reserved variable, a second replica, a runtime in another namespace, an unknown reason
    bad = json.loads(json.dumps(job))
    bad["spec"]["trainer"]["env"].append({"name": "PET_NNODES", "value": "2"})
    assert trainer_rules.webhook_errors(rt, bad)
    bad_rt = json.loads(json.dumps(rt))
    bad_rt["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    assert trainer_rules.webhook_errors(bad_rt, job)
    bad_rt["metadata"]["namespace"] = "team-b"
    assert any("namespace" in e for e in trainer_rules.webhook_errors(bad_rt, job))
    bad_js = json.loads(json.dumps(js))
    bad_js["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"] = ["Crashed"]
    assert trainer_rules.jobset_errors(bad_js)


def test_a_long_name_fits_jobsets_pod_names(cli):
    """JobSet's webhook refuses a JobSet whose pod names (<job>-node-0-<index>-<5>) exceed 63 characters."""
    rt, job = render(cli, *IMAGE, "--set", "job.name=" + "x" * 64, "--set", "cluster.nodes=2000")
    assert trainer_rules.jobset_errors(trainer_rules.jobset(rt, job)) == []
    assert trainer_rules.webhook_errors(rt, job) == []


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_pods_and_staging_job_valid_for_kubernetes(cli, kube):
    """The pods JobSet makes of the job (runtime patch merged, the Trainer's env and port, JobSet's labels), the
    Job template and the staging Job, against Kubernetes' own schemas (kubernetes-validate, strict)."""
    import kubernetes_validate

    rt, job = render(
        cli,
        *IMAGE,
        "--set",
        "k8s.secret_env.HF_TOKEN=hf/token",
        "--set",
        'k8s.tolerations=["dedicated=training:NoSchedule", "spr:NoExecute"]',
    )
    js = trainer_rules.jobset(rt, job)
    pods = trainer_rules.pods(js)
    assert len(pods) == 4
    for pod in pods:
        kubernetes_validate.validate(pod, kube, strict=True)
    rjob = js["spec"]["replicatedJobs"][0]
    kubernetes_validate.validate(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "x"},
            "spec": rjob["template"]["spec"],
        },
        kube,
        strict=True,
    )
    for extra in (
        [],
        [
            "--set",
            "k8s.prepare_volume=true",
            "--set",
            "k8s.supplemental_groups=[2000, 3000]",
            "--set",
            "k8s.queue=q",
            "--set",
            "k8s.workload_priority_class=low",
        ],
    ):
        r = cli("render", "configs/squad_spr.toml", "--kind", "stage-job", *IMAGE, *extra)
        assert r.returncode == 0, r.stderr
        (stage,) = yaml.safe_load_all(r.stdout)
        kubernetes_validate.validate(stage, kube, strict=True)
    assert stage["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert stage["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    bad = json.loads(json.dumps(pods[0]))
    bad["spec"]["containers"][0]["resource"] = bad["spec"]["containers"][0].pop("resources")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kube, strict=True)


def test_pods_guaranteed_restricted_one_per_node_no_sidecar(cli):
    rt, job = render(cli, *IMAGE)
    pods = trainer_rules.pods(trainer_rules.jobset(rt, job))
    for pod in pods:
        assert k8s_rules.qos_class(pod["spec"]) == "Guaranteed"
        assert k8s_rules.restricted_violations(pod) == []
        assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
        assert pod["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
        (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        # the selector matches this job's pods (JobSet labels them), so no two of them share a node
        assert all(
            pod["metadata"]["labels"].get(k) == v
            for k, v in term["labelSelector"]["matchLabels"].items()
        )
    other = trainer_rules.pods(
        trainer_rules.jobset(*render(cli, *IMAGE, "--set", "job.name=other"))
    )[0]
    assert not all(
        other["metadata"]["labels"].get(k) == v
        for k, v in term["labelSelector"]["matchLabels"].items()
    )


def test_node_rank_rendezvous_and_restart_count_from_what_trainer_and_jobset_give(cli):
    rt, job = render(cli, *IMAGE)
    name = job["metadata"]["name"]
    pods = trainer_rules.pods(trainer_rules.jobset(rt, job), uid="uid-1", restarts=2)
    for index, pod in enumerate(pods):
        env = trainer_rules.resolve_env(pod)
        assert env["PET_NODE_RANK"] == str(index) and env["PET_NNODES"] == "4"
        # pod 0's DNS name: its hostname in the JobSet's subdomain
        assert (
            env["PET_MASTER_ADDR"]
            == f"{pods[0]['spec']['hostname']}.{pods[0]['spec']['subdomain']}"
        )
        assert env["PET_MASTER_PORT"] == "29500"
        assert env["HPCQA_JOB_UID"] == "uid-1" and env["HPCQA_RESTART_ATTEMPT"] == "2"
        assert env["HPCQA_K8S_JOB"] == name and "MASTER_ADDR" not in env
    assert 29500 in [p["containerPort"] for p in pods[0]["spec"]["containers"][0]["ports"]]


def test_restart_arithmetic_evictions_restart_crashes_fail(cli):
    """What each way a pod ends does to the job, by Kubernetes' pod failure policy and JobSet's failure policy:
    a checkpointed stop (143), a lost peer (200), SIGKILL after the grace period (137), a lost node (no exit code)
    restart every pod, k8s.max_restarts times per job; a crash (1) or spent restarts (3) fail the job at once."""
    rt, job = render(cli, *IMAGE, "--set", "k8s.max_restarts=2")
    js = trainer_rules.jobset(rt, job)
    job_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    for codes in ([143], [143, 200], [137], [None], [0, 0, 0, 200]):
        reason = trainer_rules.job_failure(job_spec, codes)
        assert reason == "BackoffLimitExceeded", codes
        assert [trainer_rules.jobset_action(js["spec"], reason, r) for r in range(3)] == [
            "restart",
            "restart",
            "fail",
        ]
    for codes in ([1], [143, 1], [3]):
        reason = trainer_rules.job_failure(job_spec, codes)
        assert reason == "PodFailurePolicy", codes
        assert trainer_rules.jobset_action(js["spec"], reason, 0) == "fail"
    assert trainer_rules.job_failure(job_spec, [0, 0, 0, 0]) is None


def test_kueue_priority_tolerations_deadline_namespace(cli):
    args = [
        *IMAGE,
        "--set",
        "k8s.queue=team-a-queue",
        "--set",
        "k8s.priority_class=training-high",
        "--set",
        'k8s.tolerations=["dedicated=training:NoSchedule", "spr:NoExecute"]',
        "--set",
        "k8s.namespace=team-a",
        "--set",
        "cluster.time_limit_min=90",
        "--set",
        'k8s.node_selector={"node.kubernetes.io/instance-type" = "spr"}',
    ]
    rt, job = render(cli, *args)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert job["metadata"]["namespace"] == rt["metadata"]["namespace"] == "team-a"
    assert job["spec"]["activeDeadlineSeconds"] == 90 * 60
    pod = trainer_rules.pods(trainer_rules.jobset(rt, job))[0]
    assert pod["spec"]["priorityClassName"] == "training-high"
    assert pod["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "spr"}
    assert pod["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
        {"key": "spr", "operator": "Exists", "effect": "NoExecute"},
    ]
    # admitted by Kueue through a ResourceFlavor with node labels and a toleration of its own: the labels merge,
    # the flavour's tolerations replace the job's (the render says so and where to put them)
    flavored = trainer_rules.kueue_admit(
        job,
        {"cloud.example.com/pool": "spr"},
        [{"key": "pool", "operator": "Equal", "value": "spr", "effect": "NoSchedule"}],
    )
    pod = trainer_rules.pods(trainer_rules.jobset(rt, flavored))[0]
    assert pod["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "spr",
        "cloud.example.com/pool": "spr",
    }
    assert pod["spec"]["tolerations"] == [
        {"key": "pool", "operator": "Equal", "value": "spr", "effect": "NoSchedule"}
    ]
    plain = trainer_rules.pods(trainer_rules.jobset(rt, trainer_rules.kueue_admit(job, {}, [])))[0]
    assert len(plain["spec"]["tolerations"]) == 2  # a flavour without tolerations keeps them
    warned = cli("render", "configs/squad_spr.toml", "--kind", "trainjob", *args).stderr
    assert (
        "replaces the pods' list" in " ".join(warned.split())
        and "ResourceFlavor's spec.tolerations" in warned
    )
    assert (
        "replaces the pods' list"
        not in cli(
            "render",
            "configs/squad_spr.toml",
            "--kind",
            "trainjob",
            *IMAGE,
            "--set",
            'k8s.tolerations=["a:NoSchedule"]',
        ).stderr
    )
    # the PyTorchJob of a v1 operator gets the same
    r = cli("render", "configs/squad_spr.toml", "--kind", "pytorchjob", *args)
    (pj,) = yaml.safe_load_all(r.stdout)
    assert pj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert (
        pj["spec"]["runPolicy"]["activeDeadlineSeconds"] == 90 * 60
        and pj["metadata"]["namespace"] == "team-a"
    )
    spec = pj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert spec["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    assert spec["spec"]["priorityClassName"] == "training-high"
    assert spec["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"


@pytest.mark.parametrize(
    "args, key",
    [
        (["--set", "k8s.image=registry.example.com/hpcqa"], "k8s.image"),
        (["--set", "k8s.image=registry.example.com:5000/hpcqa:latest"], "k8s.image"),
        (["--set", "k8s.image=registry.example.com/hpcqa@sha256:abc"], "k8s.image"),
        ([*IMAGE, "--set", 'launch.pass_env=["WANDB_API_KEY"]'], "launch.pass_env"),
        ([*IMAGE, "--set", 'k8s.tolerations=["dedicated=training"]'], "k8s.tolerations[0]"),
        ([*IMAGE, "--set", 'k8s.tolerations=["a b:NoSchedule"]'], "k8s.tolerations[0]"),
    ],
)
@pytest.mark.parametrize("target", ["trainjob", "pytorchjob", "stage-job"])
def test_refused_with_the_key_and_the_fix(cli, args, key, target):
    r = cli("render", "configs/squad_spr.toml", "--kind", target, *args)
    assert (
        r.returncode == 2 and key in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr
    ), r.stderr


def test_pass_env_from_a_secret_is_taken_from_the_secret(cli):
    """A launch.pass_env name that pods.secret_env maps reaches the pods from the Secret; only unmapped names are
    refused."""
    rt, job = render(
        cli,
        *IMAGE,
        "--set",
        'launch.pass_env=["HF_TOKEN"]',
        "--set",
        'k8s.secret_env={HF_TOKEN = "hf/tok"}',
    )
    (c,) = node_job(rt)["template"]["spec"]["containers"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "tok"}}} in c[
        "env"
    ]
    r = cli(
        "render",
        "configs/squad_spr.toml",
        "--kind",
        "trainjob",
        *IMAGE,
        "--set",
        'launch.pass_env=["HF_TOKEN", "X"]',
        "--set",
        'k8s.secret_env={HF_TOKEN = "hf/tok"}',
    )
    assert (
        r.returncode == 2 and "launch.pass_env: X:" in r.stderr and "k8s.secret_env.X" in r.stderr
    ), r.stderr


def test_pinned_images_pass(cli):
    for image in ("registry.example.com:5000/hpcqa:1.4", "hpcqa@sha256:" + "a" * 64):
        assert (
            cli(
                "render",
                "configs/squad_spr.toml",
                "--kind",
                "trainjob",
                "--set",
                f"k8s.image={image}",
            ).returncode
            == 0
        )


def test_values_that_yaml_readers_retype_stay_strings(cli):
    """y, n, on, 1e3, 0o17, null as label and selector values: written quoted, so a YAML 1.1 reader (kubectl's
    go-yaml v2) and a YAML 1.2 one read the strings the config gave, not booleans, numbers or null."""
    values = [
        "y",
        "N",
        "on",
        "off",
        "1e3",
        "1e-3",
        "0o17",
        "null",
        "1_000",
        "12",
        "0x1f",
        "0X1F",
        "0B11",
        "0O17",
        "0x_1f",
    ]  # label values
    selector = "{" + ", ".join(f'k{i} = "{v}"' for i, v in enumerate(values)) + "}"
    for target in ("trainjob", "trainingruntime", "pytorchjob", "stage-job"):
        r = cli(
            "render",
            "configs/squad_spr.toml",
            "--kind",
            target,
            *IMAGE,
            "--set",
            "job.name=y",
            "--set",
            f"k8s.node_selector={selector}",
        )
        assert r.returncode == 0, r.stderr
        for doc in yaml.load_all(r.stdout, Loader=k8s_rules.yaml11_loader()):
            found = [
                (k, v)
                for k, v in _walk(doc)
                if k == "nodeSelector" or k == "app.kubernetes.io/instance"
            ]
            for key, value in found:
                got = value if isinstance(value, dict) else {key: value}
                assert all(isinstance(v, str) for v in got.values()), (target, got)
            selectors = [v for k, v in found if k == "nodeSelector"]
            assert all(sel == {f"k{i}": v for i, v in enumerate(values)} for sel in selectors), (
                target,
                selectors,
            )
    # the reader bites: unquoted, these are not strings to it
    assert yaml.load(
        "a: y\nb: 1e3\nc: 0o17\nd: 0X1F\ne: 0B11", Loader=k8s_rules.yaml11_loader()
    ) == {
        "a": True,
        "b": ("float", "1e3"),
        "c": ("int", "0o17"),
        "d": ("int", "0X1F"),
        "e": ("int", "0B11"),
    }
    for name in ("0X1F", "0B11", "0O17"):  # a job.name that kubectl would read as a number: quoted
        r = cli(
            "render",
            "configs/squad_spr.toml",
            "--kind",
            "trainjob",
            *IMAGE,
            "--set",
            f"job.name={name}",
        )
        assert r.returncode == 0 and f"'{name}'" in r.stdout and f": {name}\n" not in r.stdout, (
            r.stderr
        )


def _walk(node, key=None):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from _walk(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v, key)


def test_runtime_is_named_by_its_content(cli):
    """Jobs of one shape share a runtime; a changed shape gets another, never rewriting a queued job's runtime."""
    a, _ = render(cli, *IMAGE)
    b, _ = render(
        cli, *IMAGE, "--set", "train.learning_rate=5e-5"
    )  # the plan changes, the pods do not
    c, _ = render(cli, *IMAGE, "--set", "k8s.cpus=200")
    assert a["metadata"]["name"] == b["metadata"]["name"] != c["metadata"]["name"]
    assert a["metadata"]["name"].startswith("hpcqa-torch-")


def test_size_stays_small(cli):
    """The plan travels in the TrainJob: it stays far under etcd's object limit and kubectl's 256 KiB
    last-applied annotation, and does not grow with nodes (the plan keeps one node's ranks)."""
    small = cli("render", "configs/squad_spr.toml", "--kind", "trainjob", *IMAGE).stdout
    large = cli(
        "render",
        "configs/squad_spr.toml",
        "--kind",
        "trainjob",
        *IMAGE,
        "--set",
        "cluster.nodes=512",
    ).stdout
    assert len(large) < 64 * 1024 and abs(len(large) - len(small)) < 200


# ----------------------------------------------------------------------------- the pods, run as JobSet runs them


def start_pods(
    docs: list[dict],
    tmp: Path,
    port: int,
    uid: str = "uid-1",
    restarts: int = 0,
    only=None,
    extra_env=None,
) -> list[subprocess.Popen]:
    """Each pod as JobSet makes it (trainer_rules.pods) and the kubelet starts it: the container's command with its
    env resolved, in its own cpuset (taskset). One stand-in: pod 0's DNS name resolves to 127.0.0.1 here."""
    rt, job = docs
    out = []
    for index, pod in enumerate(
        trainer_rules.pods(trainer_rules.jobset(rt, job), uid=uid, restarts=restarts)
    ):
        if only is not None and index not in only:
            continue
        env = trainer_rules.resolve_env(pod)
        assert env["PET_MASTER_ADDR"].endswith(f"-node-0-0.{job['metadata']['name']}")
        pod_env = {
            **os.environ,
            **env,
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": str(port),
            "PYTHONPATH": str(ROOT),
            "HF_HOME": str(tmp / "empty-hf-home"),
            **(extra_env or {}),
        }
        (c,) = pod["spec"]["containers"]
        out.append(
            subprocess.Popen(
                ["taskset", "-c", str(index % os.cpu_count()), *c["command"]],
                env=pod_env,
                cwd=tmp,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    return out


def job_dir(mount: Path, job: dict) -> Path:
    return mount / "output" / "quickstart" / f"k8s-default-{job['metadata']['name']}"


def test_sigterm_while_waiting_for_pod_0_is_a_checkpointed_stop(cli, tmp_path):
    """SIGTERM while the pod waits for pod 0's name to resolve: exit 143 (JobSet restarts the job), not the lost
    peer's 200 nor a timeout."""
    mount = tmp_path / "pvc"
    docs = render(
        cli, *IMAGE, *TINY, "--set", f"k8s.mount_path={mount}", config="configs/quickstart.toml"
    )
    (pod,) = start_pods(
        docs, tmp_path, 29000, only=[1], extra_env={"PET_MASTER_ADDR": "pod-0.invalid"}
    )
    out = sigterm_after(pod, 3)
    assert pod.returncode == 143, out
    assert "SIGTERM while waiting for pod-0.invalid" in out
    assert trainer_rules.job_failure(node_job(docs[0]), [143]) == "BackoffLimitExceeded"


MASTER_SERVICE = {
    "metadata": {"name": "master"},  # someone's Service named master in the namespace
    "spec": {
        "clusterIP": "10.96.7.7",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    },
}


def test_a_service_named_master_in_the_namespace_does_not_reach_the_rendezvous(cli, tmp_path):
    """With service links on (Kubernetes' default) the kubelet gives every pod MASTER_PORT=tcp://10.96.7.7:8080 for
    a Service named master. The pods turn service links off; where something turns them on again, the pod script
    takes the torch plugin's PET_MASTER_* over MASTER_*, and a MASTER_PORT that is not a number is refused by name."""
    mount = tmp_path / "pvc"
    docs = render(
        cli, *IMAGE, *TINY, "--set", f"k8s.mount_path={mount}", config="configs/quickstart.toml"
    )
    (pod, *_) = trainer_rules.pods(trainer_rules.jobset(*docs))
    assert pod["spec"]["enableServiceLinks"] is False
    assert "MASTER_PORT" not in trainer_rules.resolve_env(pod, services=[MASTER_SERVICE])
    linked = json.loads(json.dumps(pod))
    del linked["spec"]["enableServiceLinks"]
    env = trainer_rules.resolve_env(linked, services=[MASTER_SERVICE])
    assert env["MASTER_PORT"] == "tcp://10.96.7.7:8080" and env["PET_MASTER_PORT"] == "29500"
    # the pod script with that environment: PET_* wins, it waits for pod 0 (SIGTERM there: 143), no exit 2
    (p,) = start_pods(
        docs,
        tmp_path,
        29000,
        only=[1],
        extra_env={
            "PET_MASTER_ADDR": "pod-0.invalid",
            **{k: v for k, v in env.items() if k.startswith("MASTER_")},
        },
    )
    out = sigterm_after(p, 3)
    assert p.returncode == 143 and "SIGTERM while waiting for pod-0.invalid" in out, out
    # no PET_* (a PyTorchJob's pod) and a link's MASTER_PORT: refused, naming the cause
    (p,) = start_pods(
        docs,
        tmp_path,
        29000,
        only=[1],
        extra_env={
            "PET_MASTER_ADDR": "",
            "MASTER_ADDR": "m",
            "MASTER_PORT": "tcp://10.96.7.7:8080",
        },
    )
    out = p.communicate(timeout=60)[0]
    assert p.returncode == 2 and "not a port number" in out and "Service named master" in out, out


def test_an_edited_num_proc_per_node_is_refused(cli, tmp_path):
    """numProcPerNode becomes PET_NPROC_PER_NODE (the torch plugin); the plan fixes the ranks per node, so an
    edited value is refused with the fix instead of being silently ignored."""
    mount = tmp_path / "pvc"
    rt, job = render(
        cli, *IMAGE, *TINY, "--set", f"k8s.mount_path={mount}", config="configs/quickstart.toml"
    )
    job["spec"]["trainer"]["numProcPerNode"] = 4
    (pod, *_) = trainer_rules.pods(trainer_rules.jobset(rt, job))
    assert trainer_rules.resolve_env(pod)["PET_NPROC_PER_NODE"] == "4"
    (p,) = start_pods([rt, job], tmp_path, 29000, only=[1])
    out = p.communicate(timeout=60)[0]
    assert p.returncode == 2 and "numProcPerNode was edited" in out, out


def test_restart_count_belongs_to_the_job_uid(cli, tmp_path):
    """The attempt is JobSet's restart count of this JobSet: a job applied again (a new UID) starts at attempt 0
    whatever an earlier job of the same name left on the volume; the files are kept per UID."""
    mount = tmp_path / "pvc"
    docs = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "k8s.max_restarts=2",
        config="configs/quickstart.toml",
    )
    jd = job_dir(mount, docs[1])
    (jd / "attempts").mkdir(parents=True)
    for attempt in range(5):  # an earlier job of this name (or a PyTorchJob) restarted often
        (jd / "attempts" / f"node-1.{attempt}").touch()
    (pod,) = start_pods(
        docs, tmp_path, 29000, uid="uid-2", only=[1], extra_env={"PET_MASTER_ADDR": "pod-0.invalid"}
    )
    out = sigterm_after(pod, 3)
    assert pod.returncode == 143, out
    assert (jd / "attempts" / "uid-2" / "node-1.0").exists()
    (pod,) = start_pods(docs, tmp_path, 29000, uid="uid-2", restarts=3, only=[1])
    out = pod.communicate(timeout=60)[0]
    assert pod.returncode == 3 and "k8s.max_restarts = 2" in out, (
        out
    )  # beyond JobSet's maxRestarts: never retried
    assert trainer_rules.job_failure(node_job(docs[0]), [3]) == "PodFailurePolicy"
    (pod,) = start_pods(docs, tmp_path, 29000, uid="bad uid", only=[1])
    out = pod.communicate(timeout=60)[0]
    assert pod.returncode == 2 and "not a UID" in out, out
    # an older JobSet without the restart-attempt label: the count falls back to the volume, with one line
    (pod,) = start_pods(
        docs, tmp_path, 29000, uid="uid-3", only=[1], extra_env={"HPCQA_RESTART_ATTEMPT": ""}
    )
    out = pod.communicate(timeout=60)[0]
    assert pod.returncode == 3 and "no restart-attempt label" in out, (
        out
    )  # the 5 starts above are over budget


def test_staging_job_fills_the_volume_the_pods_read(cli, tmp_path):
    """The staging Job's container, run as the kubelet would: `hpcqa stage --k8s` with the config it carries, into
    the volume; the training pods' check of the staged caches (offline) then passes."""
    mount = tmp_path / "pvc"
    args = [
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "model.name_or_path=builtin:tiny-bert",
    ]
    r = cli("render", "configs/quickstart.toml", "--kind", "stage-job", *args)
    assert r.returncode == 0, r.stderr
    (stage,) = yaml.safe_load_all(r.stdout)
    (c,) = stage["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert "HF_HUB_OFFLINE" not in env and c["volumeMounts"] == [
        {"mountPath": str(mount), "name": "data"}
    ]
    assert c["command"][-1].endswith("-m hpcqa stage /tmp/hpcqa-stage.toml --k8s")
    p = subprocess.run(
        c["command"],
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    manifests = list((mount / "datasets" / "hpcqa" / "manifests").glob("*.json"))
    assert len(manifests) == 1, list(mount.rglob("*"))[:20]
    from hpcqa.core import config
    from hpcqa.executors.k8s import pods
    from hpcqa.record import manifest as stagemod

    cfg = config.load(ROOT / "configs/quickstart.toml", [a for a in args if a != "--set"])
    staged = stagemod.check(pods.pod_config(cfg))
    assert staged["manifest"] and staged["problems"] == [], staged


def test_a_fresh_shared_volume_is_checked_as_the_pods_uid_and_the_fix_named(cli):
    """A fresh ReadWriteMany volume (CephFS, EFS, NFS) is root-owned 0755, and the kubelet's fsGroup does not reach
    it (k8s_rules.fs_group_applied, its rule). The staging Job's command, run as the pods' UID 1000 (setpriv)
    against such a folder: it stops before any download with one line and the fix (exit 2). With the volume
    group-writable for a group the pods get (k8s.supplemental_groups = [2000]: root:2000, mode 2775) it goes on."""
    import shutil
    import tempfile

    for source, modes, policy, fs_type in (
        (k8s_rules.NFS, ["ReadWriteMany"], None, ""),
        (k8s_rules.CSI, ["ReadWriteMany"], "ReadWriteOnceWithFSType", "ext4"),
        (k8s_rules.CSI, ["ReadWriteOnce"], "ReadWriteOnceWithFSType", ""),
    ):
        assert not k8s_rules.fs_group_applied(source, modes, policy, fs_type)
    assert k8s_rules.fs_group_applied(
        k8s_rules.CSI, ["ReadWriteOnce"], "ReadWriteOnceWithFSType", "ext4"
    )
    assert k8s_rules.fs_group_applied(k8s_rules.CSI, ["ReadWriteMany"], "File", "")
    top = Path(
        tempfile.mkdtemp(prefix="hpcqa-volume-", dir="/tmp")
    )  # tmp_path's parents are root-only 0700
    try:
        top.chmod(0o755)
        mount = top / "pvc"
        mount.mkdir(mode=0o755)  # root:root 0755, as provisioned
        args = [
            *TINY,
            "--set",
            f"k8s.mount_path={mount}",
            "--set",
            "k8s.supplemental_groups=[2000]",
        ]
        (stage,) = yaml.safe_load_all(
            cli("render", "configs/quickstart.toml", "--kind", "stage-job", *IMAGE, *args).stdout
        )
        security = stage["spec"]["template"]["spec"]["securityContext"]
        assert security["runAsUser"] == 1000 and security["supplementalGroups"] == [2000]
        as_pod = [
            "setpriv",
            f"--reuid={security['runAsUser']}",
            f"--regid={security['runAsGroup']}",
            f"--groups={','.join(map(str, security['supplementalGroups']))}",
            "--",
        ]
        cmd = [
            *as_pod,
            sys.executable,
            "-m",
            "hpcqa",
            "stage",
            str(ROOT / "configs/quickstart.toml"),
            "--k8s",
            *args,
        ]
        r = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd="/",
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"{mount} is owned by 0:0 with mode 0755" in r.stderr and "UID 1000" in r.stderr, (
            r.stderr
        )
        assert "k8s.supplemental_groups" in r.stderr and "chown 1000" in r.stderr, r.stderr
        assert not list(mount.iterdir())  # nothing half-made
        os.chown(mount, 0, 2000)
        mount.chmod(0o2775)
        check = [
            *as_pod,
            sys.executable,
            "-c",
            "import sys; from hpcqa.core import config; "
            "from hpcqa.executors.k8s import pods; "
            "pods.check_volume(pods.pod_config(config.load(sys.argv[1], sys.argv[2:])))",
            str(ROOT / "configs/quickstart.toml"),
            f"k8s.mount_path={mount}",
        ]
        r = subprocess.run(
            check,
            capture_output=True,
            text=True,
            cwd="/",
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert (mount / "output").stat().st_gid == 2000  # setgid: the pods' group goes on down
        # or k8s.prepare_volume: the staging Job's init container, run as it would be (root, only CAP_CHOWN), on
        # another fresh volume; then the pods' UID alone (no supplemental group) can write every folder
        fresh = top / "fresh"
        fresh.mkdir(mode=0o755)
        args = [*TINY, "--set", f"k8s.mount_path={fresh}", "--set", "k8s.prepare_volume=true"]
        (stage,) = yaml.safe_load_all(
            cli("render", "configs/quickstart.toml", "--kind", "stage-job", *IMAGE, *args).stdout
        )
        (init,) = stage["spec"]["template"]["spec"]["initContainers"]
        assert init["securityContext"]["capabilities"] == {"add": ["CHOWN"], "drop": ["ALL"]}
        as_init = [
            "setpriv",
            "--inh-caps=-all,+chown",
            "--bounding-set=-all,+chown",
            "--",
            *init["command"],
        ]
        for _ in range(
            3
        ):  # idempotent: a second and third staging run find the folders the pods' already
            r = subprocess.run(as_init, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
        assert all(
            (fresh / d).stat().st_uid == 1000 for d in ("output", "hub", "datasets", "hf-home")
        )
        as_uid = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--"]
        r = subprocess.run(
            [*as_uid, *check[len(as_pod) : -1], f"k8s.mount_path={fresh}"],
            capture_output=True,
            text=True,
            cwd="/",
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert (
            k8s_rules.restricted_violations({"spec": stage["spec"]["template"]["spec"]}) != []
        )  # baseline only
        # a volume root the pods' UID already owns (given to it beforehand), with one folder planted as a link to a
        # folder outside: the link is refused in one line, its target untouched; without the link the run succeeds
        owned = top / "owned"
        owned.mkdir(mode=0o755)
        os.chown(owned, 1000, 1000)
        outside = top / "outside"
        outside.mkdir(mode=0o700)
        (owned / "hub").symlink_to(outside)
        args = [*TINY, "--set", f"k8s.mount_path={owned}", "--set", "k8s.prepare_volume=true"]
        (stage,) = yaml.safe_load_all(
            cli("render", "configs/quickstart.toml", "--kind", "stage-job", *IMAGE, *args).stdout
        )
        (init,) = stage["spec"]["template"]["spec"]["initContainers"]
        as_init = [
            "setpriv",
            "--inh-caps=-all,+chown",
            "--bounding-set=-all,+chown",
            "--",
            *init["command"],
        ]
        r = subprocess.run(as_init, capture_output=True, text=True, timeout=60)
        assert (
            r.returncode == 1
            and f"{owned}/hub is a symbolic link: not followed, nothing changed" in r.stderr
        )
        assert outside.stat().st_uid == 0 and oct(outside.stat().st_mode & 0o777) == "0o700"
        (owned / "hub").unlink()
        for _ in range(
            2
        ):  # root may not write in the UID's folder: the folders are left to the pods, who may
            r = subprocess.run(as_init, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and "they make" in r.stdout, r.stderr
        assert not list(owned.iterdir())
        r = subprocess.run(
            [*as_uid, *check[len(as_pod) : -1], f"k8s.mount_path={owned}"],
            capture_output=True,
            text=True,
            cwd="/",
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
        assert r.returncode == 0, r.stderr  # the pods' UID writes every folder
        for _ in range(2):  # and again once the pods made them: theirs, left as they are
            r = subprocess.run(as_init, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
        os.chown(owned / "hub", 1234, 1234)  # someone else's folder: refused, not taken
        r = subprocess.run(as_init, capture_output=True, text=True, timeout=60)
        assert (
            r.returncode == 1
            and "belongs to UID 1234" in r.stderr
            and (owned / "hub").stat().st_uid == 1234
        )
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.slow
def test_a_peer_that_never_arrives_is_a_retryable_exit(cli, tmp_path):
    """3 pods, one rank each, pod 2 never starts (its node lost before the process group formed). The two that
    started wait train.ddp_timeout_s on real gloo, then fail: the store's host with "2/3 clients joined", the other
    with the store's "wait timeout" -- or, when the host gave up first and left, "Failed to recv ... Connection was
    likely closed" (a CI run met that race). Both are a peer that never arrived -- the retryable exit 200, which JobSet's
    policy answers with a restart -- not a crash (1), which would fail the job with restarts unspent."""
    mount = tmp_path / "pvc"
    docs = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "cluster.nodes=3",
        "--set",
        "train.ddp_timeout_s=12",
        config="configs/quickstart.toml",
    )
    pods = start_pods(docs, tmp_path, free_port(), only=[0, 1])
    try:
        outs = [p.communicate(timeout=300)[0] for p in pods]
    finally:
        _stop(pods)
    assert [p.returncode for p in pods] == [200, 200], outs
    assert all("lost a peer: exit 200 (retryable)" in o for o in outs), outs
    # ended by gloo's own timeout, train.ddp_timeout_s, not a minute later by hpcqa's rendezvous watchdog
    # (transformers 5.23 gave the group torch's default of 30 min on the CPU)
    logs = [p.read_text() for p in sorted(mount.rglob("rank-*.log"))]
    assert len(logs) == 2 and not any("did not complete in" in t for t in logs), logs
    spec = trainer_rules.jobset(*docs)["spec"]
    reason = trainer_rules.job_failure(spec["replicatedJobs"][0]["template"]["spec"], [200, 200])
    assert trainer_rules.jobset_action(spec, reason, 0) == "restart"


@pytest.mark.slow
def test_pods_train_and_resume_after_an_eviction(cli, tmp_path):
    """Two pods, one rank each: SIGTERM (an eviction) to pod 0 mid-run checkpoints both ranks and both pods exit
    143, which restarts the JobSet; the recreated pods (JobSet's restart attempt 1) resume from that step."""
    mount = tmp_path / "pvc"
    docs = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "train.max_steps=120",
        config="configs/quickstart.toml",
    )
    jd = job_dir(mount, docs[1])
    port = free_port()
    pods = start_pods(docs, tmp_path, port)
    outs = evict_first(pods, lambda: _step_at_least(jd, 6))
    assert [p.returncode for p in pods] == [143, 143], outs
    spec = trainer_rules.jobset(*docs)["spec"]
    reason = trainer_rules.job_failure(
        spec["replicatedJobs"][0]["template"]["spec"], [p.returncode for p in pods]
    )
    assert trainer_rules.jobset_action(spec, reason, 0) == "restart"
    stopped = json.loads((jd / "ranks" / "rank-0.json").read_text())["stopped_at_step"]
    assert stopped >= 6 and not (jd / "results.json").exists()
    pods = start_pods(docs, tmp_path, port + 1, restarts=1)
    try:
        outs = [p.communicate(timeout=600)[0] for p in pods]
        assert all(group_gone(p) for p in pods)
    finally:
        _stop(pods)
    assert [p.returncode for p in pods] == [0, 0], outs
    res = json.loads((jd / "results.json").read_text())
    assert res["world_size"] == 2 and res["resumed_from_step"] == stopped, res
    reports = [json.loads((jd / "ranks" / f"rank-{k}.json").read_text()) for k in (0, 1)]
    assert [r["cpus"] for r in reports] == [[0], [1 % os.cpu_count()]]
    assert reports[0]["attempt"] == reports[1]["attempt"] == 1
    assert reports[0]["weights_digest"] == reports[1]["weights_digest"]
    assert (jd / "attempts" / "uid-1" / "node-1.1").exists()


def _phase(jd: Path, rank: int) -> str | None:
    try:
        return json.loads((jd / "ranks" / f"rank-{rank}.phase.json").read_text()).get("phase")
    except (OSError, ValueError):
        return None


def _wait(pods, ready, within_s: float = 300) -> None:
    """Until ready() (every pod still running meanwhile)."""
    deadline = time.time() + within_s
    while not ready():
        assert all(p.poll() is None for p in pods), [p.communicate()[0][-3000:] for p in pods]
        assert time.time() < deadline, "never ready"
        time.sleep(0.05)


def _wait_phase(jd: Path, rank: int, phases: tuple[str, ...], pods) -> None:
    _wait(pods, lambda: _phase(jd, rank) in phases)


def restart_and_finish(docs: list[dict], tmp: Path, port: int, jd: Path) -> dict:
    """The pods JobSet recreates after a restart (attempt 1): both finish (exit 0); -> the job's results."""
    pods = start_pods(docs, tmp, port, restarts=1)
    try:
        outs = [p.communicate(timeout=600)[0] for p in pods]
    finally:
        _stop(pods)
    assert [p.returncode for p in pods] == [0, 0], outs
    return json.loads((jd / "results.json").read_text())


def evict_first(pods, ready) -> list[str]:
    """Once ready(): SIGTERM to pod 0 (an eviction); -> every pod's output once all ended."""
    try:
        _wait(pods, ready)
        time.sleep(0.5)
        pods[0].send_signal(signal.SIGTERM)
        return [p.communicate(timeout=300)[0] for p in pods]
    finally:
        _stop(pods)


def test_sigterm_at_the_rendezvous_ends_the_pod_with_the_stopped_code(cli, tmp_path):
    """Pod 0 of two alone: its rank waits in torch's rendezvous (C++: Python's handler cannot run there) for a
    rank that never comes. SIGTERM: the rank wrapper ends it 15 s later and the pod exits 143 (restart the job),
    well inside the grace period -- not 200 after train.ddp_timeout_s, nor a SIGKILL."""
    mount = tmp_path / "pvc"
    docs = render(
        cli, *IMAGE, *TINY, "--set", f"k8s.mount_path={mount}", config="configs/quickstart.toml"
    )
    jd = job_dir(mount, docs[1])
    (pod,) = start_pods(docs, tmp_path, free_port(), only=[0])
    try:
        _wait_phase(jd, 0, ("rendezvous",), [pod])
        time.sleep(3)  # inside init_process_group by now
        t0 = time.time()
        pod.send_signal(signal.SIGTERM)
        out = pod.communicate(timeout=120)[0]
        took = time.time() - t0
        gone = group_gone(pod)
    finally:
        _stop([pod])
    assert pod.returncode == 143, out
    assert took < 60 and gone, (took, out)
    assert "blocked outside Python" in out or "before training began" in out, out
    assert not list(jd.glob("ranks/*.exit")) and not list(jd.glob("ranks/*.failed.json"))


def test_sigterm_while_loading_ends_the_rank_at_once(cli, tmp_path):
    """One pod, one rank, tokenising a large training set: SIGTERM reaches Python's handler there, and the rank ends
    at once with the stopped code (nothing to checkpoint before training), not after preprocessing."""
    mount = tmp_path / "pvc"
    docs = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "cluster.nodes=1",
        "--set",
        "data.synthetic_train_examples=40000",
        config="configs/quickstart.toml",
    )
    jd = job_dir(mount, docs[1])
    (pod,) = start_pods(docs, tmp_path, free_port())
    try:
        _wait_phase(jd, 0, ("loading",), [pod])
        time.sleep(0.5)
        t0 = time.time()
        pod.send_signal(signal.SIGTERM)
        out = pod.communicate(timeout=120)[0]
        took = time.time() - t0
    finally:
        _stop([pod])
    assert pod.returncode == 143, out
    assert "SIGTERM before training began" in out and took < 10, (took, out)
    phase = json.loads((jd / "ranks" / "rank-0.phase.json").read_text())
    assert phase["phase"] == "stopping" and "before training began" in phase["detail"], phase
    assert not list(jd.glob("checkpoints/checkpoint-*")) and not list(
        jd.glob("ranks/*.failed.json")
    )


@pytest.mark.slow
def test_sigterm_during_the_final_evaluation_keeps_the_trained_weights(cli, tmp_path):
    """Two pods; SIGTERM to pod 0 while both ranks evaluate after training: the ranks agree after an evaluation
    batch, save the last step's checkpoint (not saved otherwise: train.save_final_checkpoint is off) and exit 143;
    the restarted pods resume at that step, train nothing more, evaluate and finish."""
    mount = tmp_path / "pvc"
    docs = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "train.save_steps=1000",
        # an evaluation of ~8 s here (~25 s on a loaded CI machine): the notice is sent 0.5 s after both
        # ranks began it; the restarted pods evaluate all of it again, so no longer than that needs
        "--set",
        "data.synthetic_eval_examples=1000",
        "--set",
        "train.per_device_eval_batch_size=1",
        config="configs/quickstart.toml",
    )
    jd = job_dir(mount, docs[1])
    port = free_port()
    pods = start_pods(docs, tmp_path, port)
    outs = evict_first(pods, lambda: _phase(jd, 0) == _phase(jd, 1) == "evaluating")
    assert [p.returncode for p in pods] == [143, 143], outs
    report = json.loads((jd / "ranks" / "rank-1.json").read_text())
    assert report["stopped_at_step"] == 24 and report["notice"]["signal"] == "SIGTERM", report
    assert (jd / "checkpoints" / "checkpoint-24").is_dir() and not (jd / "results.json").exists()
    res = restart_and_finish(docs, tmp_path, port + 1, jd)
    assert res["resumed_from_step"] == 24 and res["f1"] >= 0 and res["eval_examples"] == 1000, res


@pytest.mark.slow
def test_sigterm_during_an_evaluation_between_steps_saves_that_step(cli, tmp_path):
    """train.eval_strategy = "steps": the Trainer evaluates after step 12, and the notice arrives in that evaluation
    (no step boundary for its ~8 s). The ranks agree after an evaluation batch, leave the Trainer's loop, save step
    12 (save_steps would not: 1000) and exit 143; the restarted pods resume at 12 and finish. 20 steps and no final
    evaluation: the restarted pods evaluate nothing (what the test holds is the step-12 notice and the resume)."""
    mount = tmp_path / "pvc"
    docs = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--set",
        "train.save_steps=1000",
        "--set",
        "train.max_steps=20",
        "--set",
        "train.do_eval=false",
        "--set",
        'train.eval_strategy="steps"',
        "--set",
        "train.eval_steps=12",
        "--set",
        "data.synthetic_eval_examples=1000",
        "--set",
        "train.per_device_eval_batch_size=1",
        config="configs/quickstart.toml",
    )
    jd = job_dir(mount, docs[1])
    port = free_port()
    pods = start_pods(docs, tmp_path, port)
    outs = evict_first(pods, lambda: _step_at_least(jd, 12))
    assert [p.returncode for p in pods] == [143, 143], outs
    report = json.loads((jd / "ranks" / "rank-1.json").read_text())
    assert report["stopped_at_step"] == 12, report
    assert (jd / "checkpoints" / "checkpoint-12").is_dir()
    assert restart_and_finish(docs, tmp_path, port + 1, jd)["resumed_from_step"] == 12


def test_a_plan_over_the_kernels_variable_limit_is_refused_at_render(cli, tmp_path):
    """One 64 KiB argument is within hpcqa's own limit for an argument, but the plan carries the command twice
    (argv and its display) and the TrainJob's plan variable grew past Linux's 128 KiB per variable: the kubelet's
    exec would fail and the pod never start. The render refuses it with the cause and the fix; a pod started
    with such a variable really is refused by the kernel (E2BIG)."""
    big = "a" * (64 << 10)
    r = cli(
        "render",
        "configs/quickstart.toml",
        "--kind",
        "trainjob",
        *IMAGE,
        *TINY,
        "--",
        "python",
        "prog.py",
        big,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert (
        "over Linux's 131072 byte limit" in r.stderr and "longest argument has 65536" in r.stderr
    ), r.stderr
    with pytest.raises(OSError) as e:
        subprocess.run(["true"], env={"HPCQA_PLAN_JSON": "x" * (130 << 10)})
    assert e.value.errno == 7  # E2BIG: what the container's exec would have met
    ok = cli(
        "render",
        "configs/quickstart.toml",
        "--kind",
        "trainjob",
        *IMAGE,
        *TINY,
        "--",
        "python",
        "prog.py",
        "a" * (16 << 10),
    )
    assert ok.returncode == 0, ok.stderr


def test_kueues_pods_ready_timeout_and_the_ranks_wait_are_kept_apart(cli):
    """Kueue v0.19 turns waitForPodsReady on with a 30-minute timeout (apis/config/v1beta2/defaults.go:
    DefaultWaitForPodsReadyTimeout, recoveryTimeout the same). train.ddp_timeout_s's default stays clear of it (Kueue's
    requeue comes first); the render says so when the two are within 10 minutes and the job goes through a Kueue
    queue, and is quiet when the two are apart or there is no queue."""
    args = ("render", "configs/squad_spr.toml", "--kind", "trainjob", *IMAGE)
    tie = cli(*args, "--set", "k8s.queue=team", "--set", "train.ddp_timeout_s=1800")
    assert tie.returncode == 0 and "Kueue's waitForPodsReady" in " ".join(tie.stderr.split()), (
        tie.stderr
    )
    for extra in (
        ["--set", "k8s.queue=team"],
        ["--set", "k8s.queue=team", "--set", "train.ddp_timeout_s=3600"],
        [],
    ):
        r = cli(*args, *extra)
        assert r.returncode == 0 and "waitForPodsReady" not in r.stderr, r.stderr


def test_the_stage_job_advice_is_the_docs_wait(cli, tmp_path):
    """render's line after writing the staging Job advises what the docs do: wait for Complete or Failed, not a
    `kubectl wait --for=condition=complete`, which sits out its timeout when the Job fails."""
    r = cli(
        "render",
        "configs/squad_spr.toml",
        "--kind",
        "stage-job",
        *IMAGE,
        "-o",
        str(tmp_path / "s.yaml"),
    )
    text = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0 and "until it is Complete or Failed" in text, text
    assert "then kubectl wait --for=condition=complete" not in text
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    assert "*Complete* || $s == *Failed*" in docs


def test_a_notice_that_reaches_one_pod_only_stops_every_pod(cli, tmp_path):
    """A user's program whose ranks agree to stop (examples/ddp_loop.py: every rank ends the same step, rank 0 saves,
    all exit 0) under SIGTERM to pod 1 only -- the kubelet evicts pods one at a time, as Slurm signals each node in
    its own time. Pod 0's program then ends with 0 and no notice reached pod 0: taken for done, its pod exited 0,
    results.json said complete, and JobSet would not have restarted the job. Pod 0's rank reads pod 1's report on
    the shared volume and stops as pod 1 did: both pods exit 143 (a restart), and the recreated pods resume from
    the saved step and finish."""
    mount = tmp_path / "pvc"
    program = [sys.executable, str(ROOT / "examples/ddp_loop.py"), "--steps", "400"]
    docs = render(
        cli,
        *IMAGE,
        *TINY,
        "--set",
        f"k8s.mount_path={mount}",
        "--",
        *program,
        "--step-time",
        "0.05",
        config="configs/quickstart.toml",
    )
    # the job is named after its program (job.name unset)
    jd = mount / "output" / "ddp_loop" / f"k8s-default-{docs[1]['metadata']['name']}"
    port = free_port()
    pods = start_pods(docs, tmp_path, port)
    try:
        # some steps in: the program's first checkpoint (every 10 steps)
        _wait(pods, (jd / "checkpoints" / "ddp_loop.pt").exists, within_s=120)
        pods[1].send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=180)[0] for p in pods]
    finally:
        _stop(pods)
    assert [p.returncode for p in pods] == [143, 143], outs
    assert not (jd / "results.json").exists() or (
        json.loads((jd / "results.json").read_text()).get("exit_code") != 0
    ), "the job was taken for complete"
    report = json.loads((jd / "ranks" / "rank-0.json").read_text())
    assert report["notice"]["signal"] == "SIGTERM" and report["notice"]["attempt"] == 0, report
    saved = torch_step(jd)
    assert 0 < saved < 400
    pods = start_pods(docs, tmp_path, port + 1, restarts=1)
    try:
        outs = [p.communicate(timeout=300)[0] for p in pods]
    finally:
        _stop(pods)
    assert [p.returncode for p in pods] == [0, 0], outs
    assert f"rank 0: resumed from step {saved}" in outs[0], outs[0][-2000:]


def torch_step(jd: Path) -> int:
    """The step ddp_loop.py saved in the job's checkpoint folder (its own file, read as the program reads it)."""
    import torch

    return int(torch.load(jd / "checkpoints" / "ddp_loop.pt")["step"])
