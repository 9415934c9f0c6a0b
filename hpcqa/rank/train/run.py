"""One rank of a job: check what it was given, train with the HF Trainer (DDP), evaluate, report.

Expects the rank wrapper (hpcqa.rank) to have exported RANK/WORLD_SIZE/... and the plan's
environment and to have bound the process to its CPUs before this interpreter started. The plan
(typed, from the one file the wrapper read) decided the DDP backend; a rank only checks that it can
honour it. Side effects that must happen once (results.json, progress.json, building caches) are
rank 0's; the other ranks wait for it (main_process_first).

Stages: startup (report, checks) -> training arguments (DDP really on?) -> data -> model ->
trainer -> train -> evaluate -> results.
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist
from transformers import Trainer, TrainingArguments, set_seed
from transformers.trainer_utils import TrainOutput
from transformers.training_args import ParallelMode

from hpcqa.core import scaling, topology
from hpcqa.core.config import TrainConfig
from hpcqa.core.kinds import Requeue
from hpcqa.core.plan import LaunchPlan, bf16_choice
from hpcqa.core.states import State
from hpcqa.errors import HpcqaError, RankError
from hpcqa.rank.binding import widen_main_thread
from hpcqa.rank.phase import Phases
from hpcqa.rank.train import attention, commbench, efficiency, finalmodel, master, tracking
from hpcqa.rank.train import data as qa_data
from hpcqa.rank.train.callbacks import board_efficiency
from hpcqa.rank.train.evaluate import evaluate, predict
from hpcqa.rank.train.facts import (
    Rank,
    cpu_flags,
    logger,
    own_usage,
    startup_report,
    verify_backend,
    verify_plan,
    weights_digest,
)
from hpcqa.rank.train.resume import train
from hpcqa.rank.train.stop import (
    STOP,
    NoticeBeforeTraining,
    StopNotice,
    attempt,
    leave_process_group,
    save_at_notice,
    stop_after_checkpoint,
)
from hpcqa.rank.train.trainer import build_trainer
from hpcqa.record.caches import Caches
from hpcqa.record.jobdir import JobDir
from hpcqa.record.jobfiles import failure, results
from hpcqa.record.jobfiles.fields import MAX_TEXT
from hpcqa.record.phases import Phase


def run_rank(plan: LaunchPlan, jd: JobDir) -> dict:
    rank = int(os.environ.get("RANK", "0"))
    try:
        return _run(plan, jd)
    except NoticeBeforeTraining as e:  # a pod's notice before training began: nothing to save
        Phases(jd, rank, attempt()).enter(
            Phase.STOPPING, f"{e} before training began: nothing to checkpoint"
        )
        print(
            f"hpcqa rank {rank}: {e} before training began: nothing to checkpoint; the restarted pod starts "
            "again from the last checkpoint",
            file=sys.stderr,
        )
        return {"rank": rank, "requeue": "before training"}
    except SystemExit:
        if STOP.agreed_at is not None:  # submitit's requeue exits this process: not a failure
            raise
        write_failed(jd, rank, sys.exc_info()[1], plan)
        raise
    except BaseException as e:
        write_failed(jd, rank, e, plan)
        raise


def write_failed(
    jd: JobDir, rank: int, e: BaseException | None, plan: LaunchPlan | None = None
) -> None:
    """The rank's failure recorded; its MLflow run FAILED (rank 0's own, or, from another rank, rank 0's: the job
    fails, and rank 0 may be killed before it says so)."""
    tracking.abandon("FAILED")
    said = f"{e.message} (fix: {e.hint})" if isinstance(e, HpcqaError) and e.hint else f"{e}"
    error = f"{type(e).__name__}: {said}"
    Phases(jd, rank, attempt()).enter(Phase.FAILED, error[:200])
    failure.write(
        jd.rank_failed(rank),
        {
            "rank": rank,
            "host": socket.gethostname(),
            "error": error[: MAX_TEXT // 2],  # a message as long as any: the record must be written
            "traceback": traceback.format_exc().splitlines()[-30:],
            "time": time.time(),
            "attempt": attempt(),
        },
    )
    if warning := tracking.fail_job_run(plan, jd, rank):
        print(f"hpcqa rank {rank}: WARNING: {warning}", file=sys.stderr)


def _run(plan: LaunchPlan, jd: JobDir) -> dict:
    r = startup(plan, jd)
    if plan.config.job.task == "comm":
        return run_link(r)
    args, bf16 = training_arguments(r)
    with args.main_process_first(local=False, desc="model and data"):
        # global rank 0 first: the cache is usually on a shared filesystem; the writes are atomic anyway
        data = load_data(r)
    model, ipex_used, optimizers = build_model(r, data["model_path"], data["model_kwargs"], bf16)
    trainer = build_trainer(r, args, model, data, optimizers)
    own_peak = efficiency.rank_peak(r, bf16)
    train_out, resumed_from, train_time = train(r, trainer, jd)
    if STOP.agreed_at is not None:
        return stop_after_checkpoint(r, trainer.state.global_step)
    cfg = plan.config.train
    timing = trainer.hpcqa_timer.summary(
        cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * r.world
    )
    timing["efficiency"] = efficiency.run_efficiency(
        r, model, data, timing, own_peak, bf16, trainer.hpcqa_counts
    )
    timing["comm"] = comm_probe(r, trainer, timing["step_split_s"])
    timing["optimizer"] = optimizer_facts(trainer)
    timing["compile"] = compile_facts(r, timing)
    timing.update(
        train_runtime_s=train_time,
        trainer_samples_per_second=train_out.metrics.get("train_samples_per_second"),
        best_checkpoint=trainer.state.best_model_checkpoint,
        best_metric=trainer.state.best_metric,
    )
    if trainer.hpcqa_prune is not None:
        timing["trial"] = trainer.hpcqa_prune.outcome()
    trained = trainer.model
    if r.report.get("step_recipe"):
        r.report["step_recipe"] = attention.switched(trained, r.report["step_recipe"])
    digest = weights_digest(getattr(trained, "module", trained))  # DDP's wrapper holds the model
    r.save_report(weights_digest=digest, finished=time.time(), status="trained")
    model_dir = keep_model(r, trainer, data["tokenizer"])
    try:
        result = (
            evaluate(r, trainer, data) if data["eval_features"] is not None and cfg.do_eval else {}
        )
        if data["test_features"] is not None:
            result["predict"] = predict(r, trainer, data)
    except StopNotice:  # trained, then a notice during the evaluation: the trained weights are kept
        return stop_after_checkpoint(r, save_at_notice(r, trainer, "the final evaluation"))
    r.save_report(usage=own_usage(r))
    r.phases.enter(Phase.FINISHING)
    if r.rank == 0:
        result["model_dir"] = model_dir
        write_results(r, result, data, train_out, timing, resumed_from, digest, bf16, ipex_used)
    leave_process_group()
    r.phases.enter(Phase.DONE)
    return {
        "rank": r.rank,
        "weights_digest": digest,
        **({"results": result} if r.rank == 0 else {}),
    }


def keep_model(r: Rank, trainer: Trainer, tokenizer: Any) -> str | None:
    """train.save_model: rank 0 saves the trained model and its tokenizer in the job folder (bf16 weights with
    master copies: the fp32 masters, in the model's own dtype). -> its path, or None."""
    if r.rank != 0 or not r.plan.config.train.save_model:
        return None
    t0 = time.time()
    best = trainer.state.best_model_checkpoint
    with master.full_precision(trainer.model, trainer.optimizer, best) as weights:
        path = finalmodel.save(r.jd, trainer.model, tokenizer)
    r.report["bf16_weights"]["saved"] = weights
    r.log(f"model saved in {time.time() - t0:.1f} s: {path}")
    return str(path)


def startup(plan: LaunchPlan, jd: JobDir) -> Rank:
    """Report what this rank got; check the plan and the backend before any heavy work."""
    main_thread = (
        widen_main_thread()
    )  # done before the trainer was imported (load_trainer): what it did
    report = startup_report(plan, jd)
    report["main_thread"] = main_thread
    report["attempt"] = attempt()
    jd.begin_attempt(report["rank"], report["attempt"])
    if report["rank"] == 0:
        jd.tidy_staging()
    STOP.install(plan.config.launch.requeue_signal, early_exit=plan.requeue is Requeue.POD)
    r = Rank(
        plan,
        jd,
        report,
        logger(report["rank"]),
        phases=Phases(jd, report["rank"], report["attempt"]),
    )
    missing = [name for name, there in report["passed_env"].items() if not there]
    if missing:
        report["warnings"].append(
            f"launch.pass_env: {', '.join(missing)} did not reach this rank (a site default "
            "of sbatch --export=NONE, or not set where the job was submitted)"
        )
    for w in report["warnings"]:
        r.log(f"WARNING: {w}")
    r.log(
        f"attempt {report['attempt']} starts"
    )  # `hpcqa logs` shows a log from its attempt's start
    r.log(
        f"rank {r.rank}/{r.world} on {report['host']}: CPUs {topology.cpu_list(report['cpus'])}, "
        f"{report['torch_threads']} threads ({report['bind_note']}); plan {plan.digest}"
    )
    r.save_report(backend=plan.backend.resolved, backend_reason=plan.backend.reason)
    verify_plan(plan)
    checked = verify_backend(plan.backend)
    r.save_report(backend_check=checked)
    if r.rank == 0:
        r.log(f"ddp backend: {checked}")
    return r


def training_arguments(r: Rank) -> tuple[TrainingArguments, bool]:
    """TrainingArguments for CPU DDP; refuses to go on unless the Trainer really is distributed."""

    tc = r.plan.config.train
    backend = r.plan.backend.resolved
    bf16 = precision(r)
    ddp_backend, guard = _process_group(r, backend, tc.ddp_timeout_s)
    # transformers 5 folded warmup_ratio into warmup_steps (a float < 1 is a ratio)
    warmup: dict[str, Any] = (
        {"warmup_ratio": tc.warmup_ratio}
        if "warmup_ratio" in TrainingArguments.__dataclass_fields__
        else {"warmup_steps": tc.warmup_ratio}
    )
    compiled: dict[str, Any] = {}
    if tc.compile:
        _prepare_compile()
        compiled = {"torch_compile": True, "torch_compile_backend": "inductor"}
    try:
        args = TrainingArguments(
            output_dir=str(r.jd.checkpoints),
            use_cpu=True,
            ddp_backend=ddp_backend,
            bf16=bf16 and r.report["bf16_weights"]["mode"] == "autocast",  # master: no autocast
            **_eval_arguments(tc),
            learning_rate=tc.learning_rate,
            num_train_epochs=tc.num_train_epochs,
            max_steps=tc.max_steps,
            per_device_train_batch_size=tc.per_device_train_batch_size,
            per_device_eval_batch_size=tc.per_device_eval_batch_size,
            gradient_accumulation_steps=tc.gradient_accumulation_steps,
            weight_decay=tc.weight_decay,
            seed=tc.seed,
            logging_steps=tc.logging_steps,
            optim=tc.optim,
            ddp_bucket_cap_mb=tc.ddp_bucket_cap_mb,
            save_total_limit=tc.save_total_limit,
            dataloader_num_workers=tc.dataloader_num_workers,
            report_to=[],
            disable_tqdm=True,  # TensorBoard: rank 0's own callback (build_trainer), into the job folder
            ddp_find_unused_parameters=False,
            log_level="warning",
            ddp_timeout=tc.ddp_timeout_s,
            **compiled,
            **warmup,
        )
    finally:  # an error setting the group up is the rank's error: no watchdog after it
        if guard is not None:
            guard.cancel()
    if r.world > 1 and (
        args.parallel_mode != ParallelMode.DISTRIBUTED or args.world_size != r.world
    ):
        raise RuntimeError(
            f"the Trainer did not set up DDP (parallel_mode={args.parallel_mode}, "
            f"world_size={args.world_size}, expected {r.world}): every rank would train alone"
        )
    r.phases.enter(Phase.LOADING, "rank 0 first" if r.world > 1 else "")
    return args, bf16


def precision(r: Rank) -> bool:
    """train.bf16 and train.bf16_weights on this CPU, recorded in the rank's report. -> bf16 on?"""
    tc = r.plan.config.train
    bf16, r.report["bf16_reason"] = bf16_choice(tc.bf16, cpu_flags())
    mode, why = master.weights_choice(
        tc.bf16_weights, bf16, tc.ipex, tc.gradient_accumulation_steps
    )
    r.report["bf16_weights"] = {"mode": mode, "reason": why}
    return bf16


def _process_group(
    r: Rank, backend: str, timeout_s: float
) -> tuple[str | None, threading.Timer | None]:
    """The process group, set up here with train.ddp_timeout_s; accelerate adopts it. Not left to the Trainer:
    transformers 5.23 passes ddp_timeout to accelerate only off the CPU, so with use_cpu the group had torch's
    default (30 min) for the rendezvous and every collective (a rendezvous with a peer missing hung until hpcqa's
    watchdog); and newer transformers dropped "ccl". -> (the ddp_backend to name in TrainingArguments, None where
    it accepts no such name; the rendezvous watchdog, for the caller to cancel once the group is up)."""
    accepted = TrainingArguments.__dataclass_fields__["ddp_backend"].metadata.get("choices", [])
    ddp_backend = backend if backend in accepted else None
    guard = rendezvous(r, timeout_s) if r.world > 1 else None
    if r.world > 1:
        dist.init_process_group(
            backend=backend,
            rank=r.rank,
            world_size=r.world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return ddp_backend, guard


def _prepare_compile() -> None:
    """train.compile: a C++ compiler on this node (else one line and the fix), and the compile's choices."""
    compilers = [
        c for c in (os.environ.get("CXX"), "g++", "c++", "clang++") if c and shutil.which(c)
    ]
    if not compilers:
        raise RankError(
            f"train.compile = true, but {socket.gethostname()} has no C++ compiler (g++, c++, "
            "clang++ or $CXX): Inductor builds its CPU kernels with one",
            "install one on the nodes (Debian: apt-get install g++), or set train.compile = false",
        )
    # how the Trainer's torch.compile (accelerate's TorchDynamoPlugin) reads the two choices it has no argument
    # for: dynamic shapes from the first compile (lengths vary from batch to batch: no static compile thrown
    # away at the second length), and regional compilation (the encoder's identical layers compiled once and
    # reused, not once each)
    os.environ.setdefault("ACCELERATE_DYNAMO_USE_DYNAMIC", "1")
    os.environ.setdefault("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "1")
    # the dropout masks, traced into the graphs (attention.keep_mask), drawn from torch's generator as the eager
    # step draws them: the compiled run trains the eager run's model for a seed (Inductor's own generator would not)
    import torch._inductor.config as inductor_config

    inductor_config.fallback_random = True
    # the modules' float settings (LayerNorm's eps, Embedding's norm_type, Dropout's p) as the
    # constants they are in a run. Left symbolic (torch's default under dynamic shapes), every
    # graph holding one was traced, partly compiled, thrown away and traced again ("Restarting
    # analysis due to ... _tensorify_python_scalars"). A cold compile of the tiny model: 37 s and
    # 56 CPU-s, against 45 s and 64 (medians of 3, benchmarks/compile_start_bench.py)
    import torch._dynamo.config as dynamo_config

    dynamo_config.specialize_float = True


RESOLVE_RETRY_S = 5.0


WATCHDOG_GRACE_S = 60.0


def rendezvous(
    r: Rank, timeout_s: float, lookup: Callable[..., Any] = socket.getaddrinfo
) -> threading.Timer:
    """Before the process group is set up: MASTER_ADDR must resolve on this node (retried until timeout_s: a name can
    appear late), because torch's store retries an unresolvable name well past its timeout (seen here: 12 minutes with
    train.ddp_timeout_s = 120, the job RUNNING all along). Then a watchdog: a rendezvous that has not completed
    timeout_s + a minute later ends this rank with a record of why (the main thread is inside c10d and cannot be
    interrupted). -> the watchdog; cancel it once the group is up."""
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    r.phases.enter(Phase.RENDEZVOUS, f"{addr}:{port}", timeout_s=timeout_s)
    deadline, said = time.time() + timeout_s, False
    while True:
        try:
            lookup(addr, None)
            break
        except (OSError, UnicodeError) as e:
            why = e
        if time.time() >= deadline:
            raise RankError(
                f"MASTER_ADDR {addr!r} does not resolve on {socket.gethostname()} ({why}); retried for "
                f"{timeout_s:.0f} s (train.ddp_timeout_s)",
                "unset a stale MASTER_ADDR where you submit (the ranks inherit it), or set "
                "launch.master_interface so that the ranks meet at an IPv4 address",
            )
        if not said:
            r.log(
                f"WARNING: MASTER_ADDR {addr!r} does not resolve here ({why}); retrying until train.ddp_timeout_s"
            )
            r.phases.note(f"{addr}:{port}; the name does not resolve on this node, retrying")
            said = True
        time.sleep(RESOLVE_RETRY_S)

    def give_up() -> None:
        error = RankError(
            f"the rendezvous at {addr}:{port} did not complete in {timeout_s + WATCHDOG_GRACE_S:.0f} s",
            "check that every rank started (hpcqa status JOB) and that the port is reachable from "
            "every node (launch.master_port)",
        )
        r.log(f"ERROR: {error.message}; ending this rank")
        write_failed(r.jd, r.rank, error)
        os._exit(1)

    guard = threading.Timer(timeout_s + WATCHDOG_GRACE_S, give_up)
    guard.daemon = True
    guard.start()
    return guard


def _eval_arguments(tc: TrainConfig) -> dict[str, Any]:
    """Evaluation during training and the best checkpoint (run_qa.py's --eval_strategy, --eval_steps,
    --load_best_model_at_end); checkpoints follow the evaluations when the best one is kept."""
    out: dict[str, Any] = {
        "eval_strategy": tc.eval_strategy,
        "save_strategy": "steps",
        "save_steps": tc.save_steps,
    }
    if tc.eval_strategy == "steps":
        out["eval_steps"] = tc.eval_steps or tc.logging_steps
    if tc.load_best_model_at_end:
        out.update(
            load_best_model_at_end=True,
            metric_for_best_model=tc.metric_for_best_model,
            greater_is_better=True,
        )
        if tc.eval_strategy == "epoch":
            out["save_strategy"] = "epoch"
    return out


def load_data(r: Rank) -> dict:
    """Tokenizer, raw splits (truncated as configured) and tokenised features."""
    out, warnings = qa_data.prepare_data(
        r.plan.config, Caches.for_data_cache(r.plan.config.data.cache_dir)
    )
    for warning in warnings:
        r.log(f"WARNING: {warning}")
        r.report["warnings"].append(warning)
    return out


def build_model(
    r: Rank, model_path: str, kwargs: dict, bf16: bool
) -> tuple[torch.nn.Module, str | None, tuple[torch.optim.Optimizer | None, None]]:
    """The QA model; IPEX `optimize` when asked for and installed. -> (model, ipex version, optimizers)"""

    tc = r.plan.config.train
    set_seed(tc.seed)  # before the model: the new QA head's initial weights follow train.seed
    model, r.report["step_recipe"] = attention.load_qa_model(
        model_path, kwargs, r.plan.config.model, compiled=tc.compile
    )
    r.log(
        "step: attention {attention} ({attention_reason}), dropout masks {dropout_masks}, dropout "
        "{attention_dropout} on attention, {hidden_dropout} on hidden states".format(
            **r.report["step_recipe"]
        )
    )
    if not tc.ipex:
        return model, None, (None, None)
    try:
        import intel_extension_for_pytorch as ipex
    except ImportError:
        r.log(
            "train.ipex = true but intel_extension_for_pytorch is not installed: continuing without it"
        )
        return model, None, (None, None)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.learning_rate, weight_decay=tc.weight_decay)
    model, opt = ipex.optimize(
        model, optimizer=opt, dtype=torch.bfloat16 if bf16 else torch.float32
    )
    return model, ipex.__version__, (opt, None)


def optimizer_facts(trainer: Trainer) -> dict:
    """The optimizer that ran (the Trainer wraps it in accelerate's), and whether it was the fused kernel."""
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    defaults = getattr(opt, "defaults", {}) or {}
    return {
        "class": f"{type(opt).__module__}.{type(opt).__name__}",
        "fused": bool(defaults.get("fused")),
        "master_weights": master.master_of(opt) is not None,
        "setting": trainer.args.optim
        if isinstance(trainer.args.optim, str)
        else trainer.args.optim.value,
    }


def comm_probe(r: Rank, trainer: Trainer, split: dict) -> dict:
    """What DDP all-reduces per step, and the part of it the backward did not hide (commbench); the step's split
    gains that part and the compute left when it is taken out of forward + backward."""
    inner = trainer.model
    steps = r.plan.config.train.comm_probe_steps
    compress = r.plan.config.train.ddp_compress
    if r.report["bf16_weights"]["mode"] == "master":
        compress = "none"  # no hook (trainer.ddp_hooks): the bf16 gradients are sent as they are
    if r.world > 1 and steps:
        comm = commbench.exposed_allreduce(trainer, steps, compress)
    else:
        planned = commbench.planned_buckets(inner)
        comm = {
            **planned,
            **commbench.wire(planned["bucket_bytes"], compress),
            "exposed_s": 0.0 if r.world == 1 else None,
        }
    exposed = comm.get("exposed_s")
    if split.get("forward_backward") is not None and exposed is not None:
        split["allreduce_exposed"] = min(exposed, split["forward_backward"])
        split["compute"] = split["forward_backward"] - split["allreduce_exposed"]
    r.save_report(comm=comm)
    return comm


def run_link(r: Rank) -> dict:
    """job.task = "comm": the link between the nodes, measured with the training's backend (commbench)."""
    guard = rendezvous(r, r.plan.config.train.ddp_timeout_s)
    dist.init_process_group(
        backend=r.plan.backend.resolved,
        rank=r.rank,
        world_size=r.world,
        timeout=datetime.timedelta(seconds=r.plan.config.train.ddp_timeout_s),
    )
    guard.cancel()
    r.phases.enter(Phase.LINK)
    t0 = time.time()
    link = commbench.measure_link(int(r.report.get("node_rank") or 0))
    r.save_report(link=link, finished=time.time(), status="measured")
    if r.rank == 0:
        results.write(
            r.jd.results,
            {
                "status": State.COMPLETED,
                "task": "comm",
                "link": link,
                "world_size": r.world,
                "nodes": link.get("nodes"),
                "backend": r.plan.backend.resolved,
                "hosts": link.get("hosts"),
                "measure_s": time.time() - t0,
                "job_dir": str(r.jd.path),
                "plan_digest": r.plan.digest,
                "finished_at": time.time(),
                "wall_time_s": r.wall_s(),
            },
        )
        if "error" in link:
            r.log(f"link: {link['error']}")
        else:
            r.log(
                f"link: {scaling.human_rate(link['bandwidth_Bps'])}, latency {1e6 * link['latency_s']:.0f} us "
                f"({r.plan.backend.resolved}, {link['nodes']} nodes)"
            )
    leave_process_group()
    r.phases.enter(Phase.DONE)
    return {"rank": r.rank, "link": link}


def compile_facts(r: Rank, timing: dict) -> dict | None:
    """train.compile: what compiling cost (the warm-up steps' time beyond steady steps) and how many graphs Dynamo
    made (each new one a compile: lengths that vary are compiled once more as dynamic shapes, then reused)."""
    if not r.plan.config.train.compile:
        return None
    from torch._dynamo.utils import counters

    return {
        "backend": "inductor",
        "compile_s": timing.get("warmup_excess_s"),
        "graphs": int(counters["stats"]["unique_graphs"]),
    }


def write_results(
    r: Rank,
    result: dict,
    data: dict,
    train_out: TrainOutput,
    timing: dict,
    resumed_from: str | None,
    digest: str,
    bf16: bool,
    ipex_used: str | None,
) -> None:
    cfg, rep, m = r.plan.config, r.report, train_out.metrics
    result.update(timing)
    result.update(
        status=State.COMPLETED,
        job_dir=str(r.jd.path),
        world_size=r.world,
        nodes=r.world // rep["local_world_size"],
        backend=r.plan.backend.resolved,
        backend_reason=r.plan.backend.reason,
        bf16=bf16,
        bf16_reason=rep.get("bf16_reason"),
        ipex=ipex_used,
        model=cfg.model.name_or_path,
        dataset=cfg.data.dataset or cfg.data.train_file,
        train_examples=len(data["train_raw"]),
        train_features=len(data["train_features"]),
        train_loss=m.get("train_loss"),
        global_steps=train_out.global_step,
        resumed_from=resumed_from,
        wall_time_s=r.wall_s(),
        threads_per_rank=rep["torch_threads"],
        versions=rep["versions"],
        weights_digest=digest,
        finished_at=time.time(),
        plan_digest=r.plan.digest,
        variant=dict(r.plan.variant),
        attempt=rep["attempt"],
        requeues=rep["attempt"],
        resumed_from_step=int(resumed_from.rsplit("-", 1)[1]) if resumed_from else None,
        notices=[n.to_json() for n in r.jd.notices()],
        code=rep.get("code"),
        max_seq_length=data["max_seq_length"],
        tensorboard=rep.get("tensorboard"),
        warnings=rep["warnings"],
        step_recipe=rep.get("step_recipe"),
        bf16_weights=rep.get("bf16_weights"),
        allocator=rep.get("allocator"),
    )
    # the MLflow run's end first: where it went and a warning of the store's go into results.json
    tracking.finish(result, train_out.global_step)
    results.write(r.jd.results, result)
    board_efficiency(
        r, result.get("efficiency") or {}, result.get("step_split_s") or {}, train_out.global_step
    )
    r.log(
        f"done: EM {result.get('exact_match', float('nan')):.2f}  F1 {result.get('f1', float('nan')):.2f}  "
        f"train {result['train_samples_per_second']:.1f} samples/s"
    )
