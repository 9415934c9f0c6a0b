"""One rank of a job: check what it was given, train with the HF Trainer (DDP), evaluate, report.

Expects the rank wrapper (hpcqa.rank) to have exported RANK/WORLD_SIZE/... and the plan's
environment and to have bound the process to its CPUs before this interpreter started.
Side effects that must happen once (results.json, progress.json, building caches) are rank 0's;
the other ranks wait for it (main_process_first).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from hpcqa import plan as planmod
from hpcqa import topology
from hpcqa.fsutil import atomic_write_text


def cache_root(plan: dict) -> Path:
    root = os.environ.get("HPCQA_CACHE") or (
        os.path.join(plan["config"]["data"]["cache_dir"], "hpcqa") if plan["config"]["data"]["cache_dir"]
        else os.path.join(os.path.expanduser("~"), ".cache", "hpcqa"))
    return Path(root)


def write_json_atomic(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def bf16_choice(setting: str, flags: set[str]) -> tuple[bool, str]:
    if setting == "true":
        return True, "train.bf16 = true"
    if setting == "false":
        return False, "train.bf16 = false"
    hw = sorted(flags & {"amx_bf16", "avx512_bf16"})
    return (True, f"auto: CPU has {', '.join(hw)}") if hw else (False, "auto: no AMX / avx512_bf16 on this CPU")


def resolve_backend(requested: str) -> tuple[str, str, str | None]:
    """(backend, reason, error). ccl needs oneccl_bindings_for_pytorch (registers 'ccl' with torch)."""
    try:
        import oneccl_bindings_for_pytorch  # noqa: F401
        ccl_ok, why = True, "oneccl_bindings_for_pytorch imported"
    except Exception as e:  # ImportError, or an ABI mismatch with this torch
        ccl_ok, why = False, f"oneccl_bindings_for_pytorch does not import ({type(e).__name__}: {e})"
    backend = planmod.resolve_backend(requested, ccl_ok).resolved  # the same decision the plan made
    if requested == "gloo":
        return backend, "requested", None
    if requested == "ccl":
        if not ccl_ok:
            return backend, why, (f"train.ddp_backend = \"ccl\" but {why}. fix: install oneccl_bind_pt built for "
                                  f"this torch, or set train.ddp_backend = \"gloo\" (or \"auto\")")
        return backend, "requested; " + why, None
    return backend, f"auto: {why}" + ("" if ccl_ok else "; using gloo"), None


def startup_report(plan: dict, job_dir: Path) -> dict:
    """What this rank actually got vs what the plan said; warnings for mismatches."""
    import torch

    rank = int(os.environ.get("RANK", "0"))
    allowed = sorted(os.sched_getaffinity(0))
    omp = os.environ.get("OMP_NUM_THREADS")
    warnings = []
    bound = os.environ.get("HPCQA_BOUND_CPUS", "")
    if bound and topology.cpu_list(allowed) != bound:
        warnings.append(f"bound to CPUs {topology.cpu_list(allowed)}, the wrapper chose {bound}")
    if omp and torch.get_num_threads() != int(omp):
        warnings.append(f"torch uses {torch.get_num_threads()} threads, OMP_NUM_THREADS={omp}")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    threads = torch.get_num_threads()
    ncpu = os.cpu_count() or 1
    if threads * local_world > ncpu:
        warnings.append(f"OVERSUBSCRIBED: {local_world} ranks x {threads} threads > {ncpu} CPUs on this node")
    if len(allowed) and threads > len(allowed):
        warnings.append(f"OVERSUBSCRIBED: {threads} threads on {len(allowed)} allowed CPUs")
    import transformers
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__}
    for mod in ("accelerate", "datasets", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    return {
        "host": socket.gethostname(), "pid": os.getpid(), "rank": rank,
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "node_rank": int(os.environ.get("NODE_RANK", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")), "local_world_size": local_world,
        "master_addr": os.environ.get("MASTER_ADDR"), "master_port": os.environ.get("MASTER_PORT"),
        "env_source": os.environ.get("HPCQA_ENV_SOURCE"), "planned_cpus": os.environ.get("HPCQA_PLANNED_CPUS"),
        "cpus": allowed, "bind_note": os.environ.get("HPCQA_BIND_NOTE"), "omp_num_threads": omp,
        "torch_threads": threads, "ld_preload": os.environ.get("LD_PRELOAD", ""), "versions": versions,
        "warnings": warnings, "started": time.time(), "job_dir": str(job_dir),
    }


def weights_digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def run_rank(plan: dict, job_dir: Path) -> dict:
    job_dir = Path(job_dir)
    rank = int(os.environ.get("RANK", "0"))
    report_path = job_dir / "ranks" / f"rank-{rank}.json"
    try:
        return _run(plan, job_dir, report_path)
    except BaseException as e:
        tail = traceback.format_exc().splitlines()[-30:]
        write_json_atomic(job_dir / "ranks" / f"rank-{rank}.failed",
                          {"rank": rank, "host": socket.gethostname(), "error": f"{type(e).__name__}: {e}",
                           "traceback": tail, "time": time.time()})
        raise


def _run(plan: dict, job_dir: Path, report_path: Path) -> dict:
    t_start = time.time()
    cfg = plan["config"]
    tc, dc, mc = cfg["train"], cfg["data"], cfg["model"]
    report = startup_report(plan, job_dir)
    rank, world = report["rank"], report["world_size"]
    log = _logger(rank)
    for w in report["warnings"]:
        log(f"WARNING: {w}")
    log(f"rank {rank}/{world} on {report['host']}: CPUs {topology.cpu_list(report['cpus'])}, "
        f"{report['torch_threads']} threads ({report['bind_note']})")

    backend, backend_reason, backend_error = resolve_backend(tc["ddp_backend"])
    report.update(backend=backend, backend_reason=backend_reason)
    write_json_atomic(report_path, report)
    if backend_error:
        raise RuntimeError(backend_error)
    if rank == 0:
        log(f"ddp backend: {backend} ({backend_reason})")
    bf16, bf16_reason = bf16_choice(tc["bf16"], _cpu_flags())

    import torch
    from transformers import (AutoModelForQuestionAnswering, AutoTokenizer, Trainer, TrainerCallback,
                              TrainingArguments)
    from transformers.trainer_utils import get_last_checkpoint
    from transformers.training_args import ParallelMode

    from hpcqa.train import data as qa_data
    from hpcqa.train import metrics, postprocess
    from hpcqa.train.model import resolve

    accepted = TrainingArguments.__dataclass_fields__["ddp_backend"].metadata.get("choices", [])
    ddp_backend = backend if backend in accepted else None
    if world > 1 and ddp_backend is None:
        # Newer transformers dropped "ccl": set the process group up ourselves; accelerate adopts it.
        import torch.distributed as dist
        import datetime
        dist.init_process_group(backend=backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=tc["ddp_timeout_s"]))

    ckpt_dir = job_dir / "checkpoints"
    args = TrainingArguments(
        output_dir=str(ckpt_dir), use_cpu=True, ddp_backend=ddp_backend, bf16=bf16,
        learning_rate=tc["learning_rate"], num_train_epochs=tc["num_train_epochs"], max_steps=tc["max_steps"],
        per_device_train_batch_size=tc["per_device_train_batch_size"],
        per_device_eval_batch_size=tc["per_device_eval_batch_size"],
        gradient_accumulation_steps=tc["gradient_accumulation_steps"], weight_decay=tc["weight_decay"],
        seed=tc["seed"], logging_steps=tc["logging_steps"],
        save_strategy="steps", save_steps=tc["save_steps"], save_total_limit=tc["save_total_limit"],
        dataloader_num_workers=tc["dataloader_num_workers"], report_to=[], disable_tqdm=True,
        ddp_find_unused_parameters=False, log_level="warning", eval_strategy="no",
        ddp_timeout=tc["ddp_timeout_s"],
        # transformers 5 folded warmup_ratio into warmup_steps (a float < 1 is a ratio)
        **({"warmup_ratio": tc["warmup_ratio"]} if "warmup_ratio" in TrainingArguments.__dataclass_fields__
           else {"warmup_steps": tc["warmup_ratio"]}),
    )
    if world > 1 and (args.parallel_mode != ParallelMode.DISTRIBUTED or args.world_size != world):
        raise RuntimeError(f"the Trainer did not set up DDP (parallel_mode={args.parallel_mode}, "
                           f"world_size={args.world_size}, expected {world}): every rank would train alone")

    croot = cache_root(plan)
    # global rank 0 first: the cache is usually on a shared filesystem; the writes are atomic anyway
    with args.main_process_first(local=False, desc="model and data"):
        model_path, kwargs = resolve(mc, croot)
        tokenizer = AutoTokenizer.from_pretrained(model_path, **kwargs)
        raw = qa_data.load_raw(dc, tc["seed"], croot, mc["allow_download"])
        train_raw = raw["train"]
        if dc["max_train_samples"]:
            train_raw = train_raw.select(range(min(dc["max_train_samples"], len(train_raw))))
        eval_raw = raw["validation"] if "validation" in raw and tc["do_eval"] else None
        if eval_raw is not None and dc["max_eval_samples"]:
            eval_raw = eval_raw.select(range(min(dc["max_eval_samples"], len(eval_raw))))
        train_features = qa_data.featurize(train_raw, tokenizer, "train", tc["max_seq_length"], tc["doc_stride"], croot)
        eval_features = (qa_data.featurize(eval_raw, tokenizer, "validation", tc["max_seq_length"], tc["doc_stride"],
                                           croot) if eval_raw is not None else None)
    model = AutoModelForQuestionAnswering.from_pretrained(model_path, **kwargs)

    optimizers: tuple = (None, None)
    ipex_used = None
    if tc["ipex"]:
        try:
            import intel_extension_for_pytorch as ipex
            opt = torch.optim.AdamW(model.parameters(), lr=tc["learning_rate"], weight_decay=tc["weight_decay"])
            model, opt = ipex.optimize(model, optimizer=opt, dtype=torch.bfloat16 if bf16 else torch.float32)
            optimizers, ipex_used = (opt, None), ipex.__version__
        except ImportError:
            log("train.ipex = true but intel_extension_for_pytorch is not installed: continuing without it")

    progress = job_dir / "progress.json"
    callbacks = [_ProgressCallback(progress, t_start, TrainerCallback)] if rank == 0 else []
    if tc["fail_at_step"]:
        callbacks.append(_FailAt(tc["fail_at_step"], rank == world - 1, TrainerCallback))
    trainer = Trainer(model=model, args=args, train_dataset=train_features, processing_class=tokenizer,
                      callbacks=callbacks, optimizers=optimizers)
    last = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
    if last and rank == 0:
        log(f"resuming from {last}")
    t_train = time.time()
    train_out = trainer.train(resume_from_checkpoint=last)
    train_time = time.time() - t_train
    digest = weights_digest(trainer.model.module if hasattr(trainer.model, "module") else trainer.model)
    report.update(weights_digest=digest, finished=time.time(), status="trained")
    write_json_atomic(report_path, report)

    result: dict[str, Any] = {}
    if eval_features is not None:
        t_eval = time.time()
        pred = trainer.predict(eval_features)
        eval_time = time.time() - t_eval
        if rank == 0:
            start_logits, end_logits = pred.predictions[:2]
            examples = [{"id": i, "context": c} for i, c in zip(eval_raw["id"], eval_raw["context"])]
            feats = [{"example_id": e, "offset_mapping": o}
                     for e, o in zip(eval_features["example_id"], eval_features["offset_mapping"])]
            preds = postprocess.best_answers(
                examples, feats, start_logits, end_logits, n_best_size=tc["n_best_size"],
                max_answer_length=tc["max_answer_length"], version_2_with_negative=dc["version_2_with_negative"],
                null_score_diff_threshold=tc["null_score_diff_threshold"])
            golds = {i: a["text"] for i, a in zip(eval_raw["id"], eval_raw["answers"])}
            result.update(metrics.squad_scores(golds, preds))
            firsts = eval_raw["first_fact"] if "first_fact" in eval_raw.column_names else []
            if any(firsts):
                base = metrics.squad_scores(golds, dict(zip(eval_raw["id"], firsts)))
                result["baseline"] = {"name": "first_fact (answer with the context's first fact)",
                                      "exact_match": base["exact_match"], "f1": base["f1"]}
            write_json_atomic(job_dir / "predictions.json", preds)
            result.update(eval_runtime_s=eval_time, eval_samples_per_second=len(eval_features) / eval_time,
                          eval_examples=len(eval_raw), eval_features=len(eval_features))
    if rank == 0:
        m = train_out.metrics
        result.update(
            status="COMPLETED", job_dir=str(job_dir), world_size=world, nodes=world // report["local_world_size"],
            backend=backend, backend_reason=backend_reason, bf16=bf16, bf16_reason=bf16_reason, ipex=ipex_used,
            model=mc["name_or_path"], dataset=dc["dataset"] or dc["train_file"],
            train_examples=len(train_raw), train_features=len(train_features),
            train_samples_per_second=m.get("train_samples_per_second"), train_runtime_s=train_time,
            train_loss=m.get("train_loss"), global_steps=train_out.global_step, resumed_from=last,
            wall_time_s=time.time() - t_start, threads_per_rank=report["torch_threads"],
            versions=report["versions"], weights_digest=digest, finished_at=time.time(),
        )
        write_json_atomic(job_dir / "results.json", result)
        log(f"done: EM {result.get('exact_match', float('nan')):.2f}  F1 {result.get('f1', float('nan')):.2f}  "
            f"train {result['train_samples_per_second']:.1f} samples/s")
    return {"rank": rank, "weights_digest": digest, **({"results": result} if rank == 0 else {})}


def _logger(rank: int):
    def log(msg: str) -> None:
        print(f"[hpcqa rank {rank}] {msg}", file=sys.stderr, flush=True)
    return log


def _ProgressCallback(path: Path, t0: float, base):
    class ProgressCallback(base):
        """Rank 0 writes progress.json (step, total, loss, ETA) for `submit` and `status` to read."""

        def __init__(self) -> None:
            self.last_write = 0.0
            self.loss = None
            self.t_begin = None

        def on_train_begin(self, args, state, control, **kw):
            self.t_begin = time.time()
            self._write(state, "training", force=True)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.loss = logs["loss"]
            self._write(state, "training", force=True)

        def on_step_end(self, args, state, control, **kw):
            self._write(state, "training")

        def on_train_end(self, args, state, control, **kw):
            self._write(state, "evaluating", force=True)

        def _write(self, state, phase: str, force: bool = False) -> None:
            now = time.time()
            if not force and now - self.last_write < 1.0:
                return
            self.last_write = now
            done = state.global_step
            total = state.max_steps or 0
            elapsed = now - (self.t_begin or now)
            eta = elapsed / done * (total - done) if done and total else None
            write_json_atomic(path, {"phase": phase, "step": done, "total_steps": total, "epoch": state.epoch,
                                     "loss": self.loss, "eta_s": eta, "updated": now, "started": t0})

    return ProgressCallback()


def _FailAt(step: int, this_rank: bool, base):
    class FailAt(base):
        """Testing aid (train.fail_at_step): the last rank raises at `step`."""

        def on_step_end(self, args, state, control, **kw):
            if this_rank and state.global_step >= step:
                raise RuntimeError(f"train.fail_at_step = {step}: failing on purpose (test aid)")

    return FailAt()
