"""`hpcqa render --target pytorchjob|dockerfile`: the PyTorchJob is built with the Kubernetes/Kubeflow client
models, survives their deserialiser, and its pod script trains when run the way the operator runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hpcqa.executors import k8s
from hpcqa.core.plan import LaunchPlan
from tests.conftest import ROOT

IMAGE = ["--set", "k8s.image=registry.example.com/hpcqa:1"]


def render(cli, *args, config="configs/squad_spr.toml"):
    r = cli("render", config, "--target", "pytorchjob", *args)
    assert r.returncode == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"ConfigMap", "PyTorchJob"}
    return by_kind["ConfigMap"], by_kind["PyTorchJob"]


def test_pytorchjob_for_squad_spr(cli):
    cm, job = render(cli)
    assert job["apiVersion"] == "kubeflow.org/v1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3  # 4 nodes, one pod each
    assert job["spec"]["nprocPerNode"] == "2" and job["spec"]["runPolicy"]["backoffLimit"] == 3
    assert "elasticPolicy" not in job["spec"]
    for spec in replicas.values():
        assert spec["restartPolicy"] == "OnFailure"
        pod = spec["template"]["spec"]
        (c,) = pod["containers"]
        assert c["name"] == "pytorch" and c["image"] == "registry.example.com/hpcqa:0.1"
        assert c["ports"] == [{"containerPort": 23456, "name": "pytorchjob-port", "protocol": "TCP"}]
        # Guaranteed QoS: requests = limits, whole CPUs (2 sockets x 56 cores x 2 threads)
        assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "224", "memory": "480Gi"}
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
        assert env["HF_HUB_CACHE"] == "/mnt/hpcqa/hub" and env["HF_DATASETS_CACHE"] == "/mnt/hpcqa/datasets"
        assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == "1"
        assert "RANK" not in env and "MASTER_ADDR" not in env  # the operator's, mapped by the node script
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts == {"data": "/mnt/hpcqa", "plan": "/etc/hpcqa", "dshm": "/dev/shm"}
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["data"]["persistentVolumeClaim"]["claimName"] == "hpcqa-data"
        assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
        assert vols["plan"]["configMap"]["name"] == cm["metadata"]["name"]
        assert c["command"] == ["bash", "/etc/hpcqa/node.sh"]
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["topologyKey"] == "kubernetes.io/hostname"
    plan = LaunchPlan.loads(cm["data"]["plan.json"])
    assert plan.world_size == 8 and plan.ranks_per_node == 2 and plan.executor == "k8s"
    assert plan.config.job.output_dir == "/mnt/hpcqa/output" and plan.config.model.cache_dir == "/mnt/hpcqa/hub"
    # each rank goes through the rank wrapper, which maps RANK/LOCAL_RANK and pins to the socket's cores
    assert "-m hpcqa.rank --plan" in cm["data"]["node.sh"]
    assert job["metadata"]["name"] == k8s.job_name(plan)


def test_round_trips_through_the_client_deserialisers(cli):
    cm, job = render(cli)
    for doc, kind in ((job, "PyTorchJob"), (cm, "ConfigMap")):
        model = k8s.load(doc, kind)
        assert k8s.to_dicts([model])[0] == doc
    from kubeflow.training.models import KubeflowOrgV1PyTorchJob
    assert isinstance(k8s.load(job, "PyTorchJob"), KubeflowOrgV1PyTorchJob)


def test_the_schema_refuses_what_the_operator_would(cli):
    """The models check the PyTorchJob schema: a replica spec without its required fields is refused."""
    from kubeflow.training import models as kf
    with pytest.raises(ValueError):
        kf.KubeflowOrgV1PyTorchJobSpec(pytorch_replica_specs=None)


HOSTILE = "$(touch PWNED) `touch PWNED2` 'quote\" \\ ; &&\n---\nkind: Secret"


def test_hostile_strings_stay_data(cli, tmp_path):
    cm, job = render(cli, "--set", f"launch.env.NOTE={json.dumps(HOSTILE)}",
                     "--set", f"cluster.python={json.dumps('/opt/my env/py' + chr(39) + 'thon $(touch PWNED)')}")
    plan = LaunchPlan.loads(cm["data"]["plan.json"])
    assert all(r.env["NOTE"] == HOSTILE for r in plan.ranks)
    script = cm["data"]["node.sh"]
    assert "'/opt/my env/py'\"'\"'thon $(touch PWNED)' -m hpcqa.rank" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize("override, key", [
    ([], "k8s.image"),
    (IMAGE + ["--set", "k8s.namespace=Bad_NS"], "k8s.namespace"),
    (IMAGE + ["--set", "k8s.memory=lots"], "k8s.memory"),
    (IMAGE + ["--set", "k8s.output_path=../elsewhere"], "k8s.output_path"),
    (IMAGE + ["--set", "k8s.node_selector.zone=a b"], "k8s.node_selector.zone"),
])
def test_bad_k8s_keys_are_named(cli, tmp_path, override, key):
    r = cli("render", "configs/quickstart.toml", "--target", "pytorchjob", "--set", "k8s.memory=4Gi", *override)
    assert r.returncode == 2 and key in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_memory_is_required_for_guaranteed_pods(cli):
    r = cli("render", "configs/quickstart.toml", "--target", "pytorchjob", *IMAGE)
    assert r.returncode == 2 and "k8s.memory" in r.stderr and "Guaranteed" in r.stderr


def test_dockerfile(cli):
    r = cli("render", "configs/squad_spr.toml", "--target", "dockerfile")
    assert r.returncode == 0, r.stderr
    assert "torch==2.13.0" in r.stdout and "download.pytorch.org/whl/cpu" in r.stdout
    assert "libgoogle-perftools4" in r.stdout and "intel-openmp" in r.stdout  # malloc tcmalloc, openmp iomp
    assert "hpcqa[k8s]" in r.stdout


# ----------------------------------------------------------------------------- the pods, run as the operator runs them

TINY = ["--set", "model.name_or_path=builtin:tiny-bert", "--set", "data.dataset=builtin:synthetic-squad",
        "--set", "data.synthetic_train_examples=160", "--set", "data.synthetic_eval_examples=40",
        "--set", "train.max_steps=24", "--set", "train.save_steps=3", "--set", "train.logging_steps=2",
        "--set", "train.bf16=false", "--set", "train.max_seq_length=128", "--set", "train.doc_stride=32",
        "--set", "train.per_device_train_batch_size=4", "--set", "cluster.nodes=2",
        "--set", "cluster.sockets_per_node=1", "--set", "cluster.cores_per_socket=1", "--set", "cluster.executor=slurm",
        "--set", "launch.ccl_workers=0", "--set", "launch.ranks_per_socket=1", "--set", "k8s.memory=2Gi"]


def start_pods(cm: dict, job: dict, tmp: Path, port: int) -> list[subprocess.Popen]:
    """Each pod as the operator starts it: the ConfigMap's files in a directory, the container's env from the
    manifest plus what the operator adds (PET_NODE_RANK, RANK = pod index, MASTER_ADDR/PORT), and the pod's own
    cpuset (a static CPU manager gives each Guaranteed pod exclusive cores; here taskset does)."""
    etc = tmp / "etc-hpcqa"
    etc.mkdir(exist_ok=True)
    for name, text in cm["data"].items():
        (etc / name).write_text(text)
    (c,) = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    env["HPCQA_K8S_NAMESPACE"] = "default"  # the downward API's metadata.namespace
    pods = []
    for index in range(2):
        pod_env = {**os.environ, **env, "PET_NODE_RANK": str(index), "RANK": str(index), "WORLD_SIZE": "2",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PET_NNODES": "2",
                   "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp / "empty-hf-home")}
        pods.append(subprocess.Popen(["taskset", "-c", str(index % os.cpu_count()), "bash", str(etc / "node.sh")],
                                     env=pod_env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True))
    return pods


@pytest.mark.slow
def test_pods_train_and_resume_after_sigterm(cli, tmp_path):
    """Two pods, one rank each: SIGTERM (eviction) to pod 0 mid-run checkpoints both ranks, the pods exit 143
    (the operator restarts them), the restarted pods resume from that step and finish."""
    mount = tmp_path / "pvc"
    cm, job = render(cli, *IMAGE, *TINY, "--set", f"k8s.mount_path={mount}", config="configs/quickstart.toml")
    jd = mount / "output" / "quickstart" / f"k8s-default-{job['metadata']['name']}"
    pods = start_pods(cm, job, tmp_path, 29000 + os.getpid() % 1000)
    deadline = time.time() + 300
    while time.time() < deadline and not _step_at_least(jd, 6):
        assert all(p.poll() is None for p in pods), [p.communicate()[0][-3000:] for p in pods]
        time.sleep(0.5)
    pods[0].send_signal(signal.SIGTERM)
    outs = [p.communicate(timeout=300)[0] for p in pods]
    assert [p.returncode for p in pods] == [143, 143], outs
    assert "restarts the pod" in outs[0]
    stopped = json.loads((jd / "ranks" / "rank-0.json").read_text())["stopped_at_step"]
    assert stopped >= 6 and not (jd / "results.json").exists()
    pods = start_pods(cm, job, tmp_path, 29000 + os.getpid() % 1000 + 1)
    outs = [p.communicate(timeout=600)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outs
    res = json.loads((jd / "results.json").read_text())
    assert res["world_size"] == 2 and res["resumed_from_step"] == stopped, res
    reports = [json.loads((jd / "ranks" / f"rank-{k}.json").read_text()) for k in (0, 1)]
    # each rank pinned itself inside its pod's cpuset, and the ranks' environments came from the plan
    assert [r["cpus"] for r in reports] == [[0], [1 % os.cpu_count()]]
    assert reports[0]["attempt"] == reports[1]["attempt"] == 1
    assert reports[0]["weights_digest"] == reports[1]["weights_digest"]
    assert "rank 1 (local 0) of 2" in (jd / "rank-1.log").read_text()
    assert not list(jd.glob("ranks/*.exit")), "a checkpointed stop is not a failure"


def _step_at_least(jd: Path, step: int) -> bool:
    try:
        return json.loads((jd / "progress.json").read_text()).get("step", 0) >= step
    except (OSError, ValueError):
        return False
