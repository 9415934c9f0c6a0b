"""hpcqa's Python API, as one would use it from a notebook: one job, watched to the end, then a small sweep.

    python examples/api_quickstart.py            # local executor on this machine, or Slurm where sbatch is

Each step is what the CLI does too (`hpcqa submit`, `status`, `logs`, `cancel`, `results`): the CLI is a thin
layer over these functions.
"""

import json
import time

import hpcqa

# 1. A config, with overrides written as `--set` would take them.
cfg = hpcqa.load_config(
    "configs/quickstart.toml",
    ["model.name_or_path=builtin:tiny-bert", "train.max_steps=20", "train.bf16=false"],
)

# 2. The plan submit will run: every rank's CPUs and environment (what `submit --dry-run` prints).
plan = hpcqa.plan(cfg)
print(f"{plan.world_size} ranks on {plan.nodes} node(s), executor {plan.executor}")
for r in plan.ranks:
    print(f"  rank {r.rank}: CPUs {list(r.cpus)} OMP_NUM_THREADS={r.env.get('OMP_NUM_THREADS')}")

# 3. Submit: returns once queued (Slurm) or started (local).
job = hpcqa.submit(cfg)
print("submitted", job.id, "folder", job.folder)

# 4. Watch it: state, progress, pending reason.
while not job.done():
    # the view's progress and results are typed values (hpcqa.record.jobfiles), None until written
    v = job.view()
    p = v.progress
    print(
        f"  {v.state:<10} step {p.step if p else 0}/{(p and p.total_steps) or '?'}"
        + (f"  waiting: {v.reason}" if v.reason else "")
    )
    time.sleep(5)

# 5. Results (raises hpcqa.errors.JobFailed naming the first failing rank), logs, resource use.
print(
    json.dumps(
        {k: job.results()[k] for k in ("exact_match", "f1", "train_samples_per_second")}, indent=1
    )
)
print(job.logs(rank=0).splitlines()[-1])
print("resource use:", job.view().usage)

# 6. A sweep: a config with a [sweep] table gives a handle over its tasks (a local sweep runs them in turn).
#    Its grid narrowed here as --set would: one learning rate and one batch size, so 1 grid point + the hand-picked
#    variant = 2 tasks.
sweep = hpcqa.submit(
    "configs/sweep_quickstart.toml",
    [
        "model.name_or_path=builtin:tiny-bert",
        "train.max_steps=10",
        "train.bf16=false",
        "sweep.train.learning_rate=[1e-4]",
        "sweep.train.per_device_train_batch_size=[16]",
    ],
)
print(sweep, sweep.wait())
print([r and r["f1"] for r in sweep.results()])
