"""`hpcqa stage` then an offline submit: the model from a hub-layout cache (through huggingface_hub's own
offline cache lookup), a dataset repository through datasets, the features through the ranks' own cache."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from hpcqa.rank.train import model as models
from tests.test_data import ROWS

pytestmark = pytest.mark.slow
REPO_ID = "hpcqa-test/tiny-qa"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(root: Path, tmp: Path) -> Path:
    """A model in the layout huggingface_hub writes: blobs by content digest, a snapshot of symlinks, refs/main."""
    src = models.build_tiny_bert(tmp / "tiny-src")
    repo = root / ("models--" + REPO_ID.replace("/", "--"))
    snap = repo / "snapshots" / REVISION
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return root


def dataset_repo(root: Path) -> Path:
    rows = [dict(r, id=f"{r['id']}-{k}") for k in range(20) for r in ROWS]
    for split in ("train", "validation"):
        (root / f"{split}.jsonl").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        "  - split: train\n    path: train.jsonl\n"
        "  - split: validation\n    path: validation.jsonl\n---\n"
    )
    return root


@pytest.fixture
def staged_setup(tmp_path):
    hub = hub_cache(tmp_path / "shared" / "hub", tmp_path)
    data = dataset_repo(tmp_path / "my-squad")
    sets = [
        "--set",
        f"model.name_or_path={REPO_ID}",
        "--set",
        f"model.cache_dir={json.dumps(str(hub))}",
        "--set",
        f"data.dataset={json.dumps(str(data))}",
        "--set",
        "data.version_2_with_negative=true",  # ROWS has an unanswerable question: SQuAD v2 data
        "--set",
        f"data.cache_dir={json.dumps(str(tmp_path / 'shared' / 'datasets'))}",
        "--set",
        f"job.output_dir={json.dumps(str(tmp_path / 'out'))}",
        "--set",
        f"job.registry={json.dumps(str(tmp_path / 'registry.sqlite'))}",
        "--set",
        "train.max_steps=4",
        "--set",
        "train.bf16=false",
        "--set",
        "train.max_seq_length=64",
        "--set",
        "train.doc_stride=16",
        "--set",
        "train.per_device_train_batch_size=4",
    ]
    # offline, and no cache but the staged one
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "empty-hf-home"),
        "HPCQA_CACHE": "",
    }
    return tmp_path, hub, sets, env


def features(tmp: Path) -> dict[str, float]:
    return {
        str(p): p.stat().st_mtime
        for p in (tmp / "shared" / "datasets" / "hpcqa" / "features").glob("*")
    }


def test_stage_then_offline_submit(cli, staged_setup):
    tmp, hub, sets, env = staged_setup
    r = cli("stage", "configs/quickstart.toml", *sets, "--json", env=env)
    assert r.returncode == 0, r.stderr
    manifest = json.loads(r.stdout)
    model = manifest["model"]
    assert model["kind"] == "hub" and model["revision"] == REVISION and model["name"] == REPO_ID
    weights = next(f for f in model["files"] if f["path"].endswith("model.safetensors"))
    blob = Path(weights["path"]).resolve()
    assert weights["sha256"] == blob.name == hashlib.sha256(blob.read_bytes()).hexdigest()
    splits = {s["split"]: s for s in manifest["dataset"]["splits"]}
    assert splits["train"]["rows"] == len(ROWS) * 20 and splits["train"]["features"]["files"]
    staged_features = features(tmp)
    assert staged_features

    dry = cli("submit", "configs/quickstart.toml", *sets, "--dry-run", env=env)
    assert dry.returncode == 0 and "model: staged" in dry.stdout and REVISION[:12] in dry.stdout, (
        dry.stdout
    )
    doc = cli("doctor", "configs/quickstart.toml", *sets, "--json", env=env)
    checks = {c["name"]: c for c in json.loads(doc.stdout)}
    assert all(checks[f"staged {k}"]["level"] == "ok" for k in ("model", "data", "features"))

    run = cli("submit", "configs/quickstart.toml", *sets, env=env)
    assert run.returncode == 0 and "COMPLETED" in run.stdout, run.stdout + run.stderr
    assert features(tmp) == staged_features, (
        "the ranks must load the staged features, not tokenise again"
    )

    # a staged file goes missing: submit refuses before anything starts
    blob.unlink()
    jobs_before = sorted((tmp / "out").rglob("results.json"))
    bad = cli("submit", "configs/quickstart.toml", *sets, env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert "model.safetensors is missing" in bad.stderr and "hpcqa stage" in bad.stderr
    assert sorted((tmp / "out").rglob("results.json")) == jobs_before
    folders = [
        p
        for p in (tmp / "out" / "quickstart").iterdir()
        if p.is_dir() and p.name.split("-")[0].isdigit()
    ]
    assert len(folders) == 1, "no new job folder"
    doc = cli("doctor", "configs/quickstart.toml", *sets, "--json", env=env)
    assert {c["name"]: c["level"] for c in json.loads(doc.stdout)}["staged model"] == "error"


def test_stage_without_the_model_anywhere_fails_clearly(cli, staged_setup):
    tmp, hub, sets, env = staged_setup
    r = cli(
        "stage",
        "configs/quickstart.toml",
        *sets,
        "--set",
        "model.name_or_path=hpcqa-test/not-there",
        env=env,
    )
    assert (
        r.returncode == 2 and "hpcqa-test/not-there" in r.stderr and "Traceback" not in r.stderr
    ), r.stderr


def test_a_hub_dataset_with_unanswerable_questions_under_v1_rules_is_refused(cli, staged_setup):
    """A hub dataset's version is read from its rows (no file to read at submit): its 20 unanswerable questions
    under data.version_2_with_negative = false stop the run with the key named, before any training."""
    tmp, hub, sets, env = staged_setup
    r = cli(
        "stage",
        "configs/quickstart.toml",
        *sets,
        "--set",
        "data.version_2_with_negative=false",
        env=env,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert (
        "is SQuAD v2 data (20 of 60 questions have no answer), but data.version_2_with_negative = false"
        in r.stderr
    )
